"""The repository's demo in this process: its dbt calls, and its stored tables read for a
comparison (the demo tests and the cluster test share one first build, `demo_build` in
conftest.py)."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import jinja2
import pytest
import yaml
from dbt.cli.main import dbtRunner

from tests.conftest import DBT, ROOT, RUN_DIR

TARGET = RUN_DIR / "demo_target"
BUILD_TIMEOUT = 900  # seconds for a demo build in a process of its own (1-4 minutes on 2 cores)
SCHEMA = "dbt_merge"
# Columns whose values depend on the run, not on the data, are left out: the dbt
# invocation that recorded a provenance event and when (invocation_id, recorded_at of
# the provenance tables), when a row was loaded (demo_event_log.loaded_at,
# current_timestamp()) and Iceberg snapshot ids, which are random
# (orders__provenance.table_version, the auto-merge plan's and provenance's snapshot_id).
RUN_DEPENDENT = {
    "invocation_id",
    "recorded_at",
    "loaded_at",
    "table_version",
    "snapshot_id",
    "_batch",  # an entity merge's state: the time of the run that wrote a row
    "edges_snapshot",  # the edges' digest: the Iceberg snapshot it describes
}
# and per table: an offline plan's bin ids hash their first member, here a data file's
# path (which carries a random UUID)
TABLE_RUN_DEPENDENT = {"daily_events_compaction_plan": {"bin_id"}}
# Data file names carry a random UUID per write (Iceberg: 00000-0-<uuid>-0-00001.parquet,
# Spark: part-00000-<uuid>-c000.snappy.parquet) and their paths the warehouse: inside any
# value (e.g. the auto-merge plan's file_paths) a data file's path or name becomes this.
DATA_FILE = re.compile(
    r"[^\"\s,\[\]]*[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"[^\"\s,\[\]]*\.(?:parquet|avro|orc)"
)


def dbt(*args: str):
    """Run dbt in this process on the repository's project, its demo on
    (DBT_MERGE_DEMO=1, as `make run` sets it); fail with its messages."""
    os.environ["DBT_MERGE_DEMO"] = "1"
    try:
        result = dbtRunner().invoke(
            [
                *args,
                "--project-dir",
                str(ROOT),
                "--profiles-dir",
                str(ROOT),
                "--target-path",
                str(TARGET),
                "--log-path",
                str(RUN_DIR / "demo_logs"),
            ]
        )
    finally:
        del os.environ["DBT_MERGE_DEMO"]
    failures = (
        [
            f"{r.node.name}: {r.status}: {r.message}"
            for r in (result.result or [])
            if getattr(r, "status", None) not in ("success", "pass")
        ]
        if args[0] in ("build", "run")
        else []
    )
    assert result.success, f"dbt {' '.join(args)} failed: {result.exception} {failures}"
    return result


def stored_tables(warehouse: Path) -> dict[str, tuple[Path, str]]:
    """The demo schema's tables: Iceberg (hadoop catalog: <warehouse>/<schema>/<table>)
    and those of the metastore (<warehouse>/<schema>.db/<table>: Iceberg of a hive
    catalog, as on the Thrift server, Delta, else parquet)."""
    tables = {}
    iceberg = warehouse / SCHEMA
    for table in sorted(iceberg.iterdir()) if iceberg.is_dir() else []:
        if (table / "metadata").is_dir():
            tables[table.name] = (table, "iceberg")
    hive = warehouse / f"{SCHEMA}.db"
    for table in sorted(hive.iterdir()) if hive.is_dir() else []:
        assert table.name not in tables
        if (table / "metadata").is_dir():
            if not _iceberg_view(table / "metadata"):  # a view model on the Thrift server
                tables[table.name] = (table, "iceberg")
        else:
            tables[table.name] = (table, "delta" if (table / "_delta_log").is_dir() else "parquet")
    return tables


def _iceberg_view(metadata: Path) -> bool:
    """Whether an Iceberg metadata folder is a view's (its metadata has a view-uuid; a
    view's metadata files are gzipped)."""
    data = _newest_metadata(metadata).read_bytes()
    return "view-uuid" in json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def _load_path(path: Path, fmt: str) -> str:
    """What spark.read loads a stored table from: its folder, or for an Iceberg table of
    a hive catalog (metadata files named <n>-<uuid>.metadata.json, no version hint) its
    newest metadata file, which Iceberg reads as a table of its own."""
    metadata = path / "metadata"
    if fmt != "iceberg" or (metadata / "version-hint.text").is_file():
        return str(path)
    return str(_newest_metadata(metadata))


def _newest_metadata(metadata: Path) -> Path:
    """The newest <n>-<uuid>.metadata.json of an Iceberg table or view of a hive catalog."""
    return max(metadata.glob("*.metadata.json"), key=lambda f: int(f.name.split("-")[0]))


def read_table(spark, path: Path, fmt: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(columns with types, rows as sorted JSON lines) without the run-dependent columns."""
    df = spark.read.format(fmt).load(_load_path(path, fmt))
    columns = [(f.name, f.dataType.simpleString()) for f in df.schema.fields]
    dependent = RUN_DEPENDENT | TABLE_RUN_DEPENDENT.get(path.name, set())
    df = df.drop(*[name for name, _ in columns if name in dependent])
    rows = sorted(
        DATA_FILE.sub(
            "<data file>",
            json.dumps(row.asDict(recursive=True), sort_keys=True, default=str, ensure_ascii=False),
        )
        for row in df.collect()
    )
    return columns, rows


def read_tables(spark, warehouse: Path) -> dict[str, tuple[list[tuple[str, str]], list[str]]]:
    """Every stored table of the demo schema in warehouse, read by `read_table`."""
    return {name: read_table(spark, *table) for name, table in stored_tables(warehouse).items()}


def table_differences(
    reference: dict, other: dict, here: str, there: str, left_out: dict | None = None
) -> tuple[list[str], int]:
    """How the tables of `other` differ from those of `reference` (both as `read_tables`
    gives them; `here` and `there` say where each was built, e.g. "locally"), and how
    many rows were compared. `left_out`: per table, the columns not compared, or None to
    leave the table out."""
    left_out = left_out or {}
    differences = []
    row_count = 0
    for name, (columns, rows) in sorted(reference.items()):
        dropped = left_out.get(name, set())
        if dropped is None:
            continue
        other_columns, other_rows = other[name]
        if other_columns != columns:
            differences.append(f"{name}: columns {other_columns} != {columns}")
            continue
        rows, other_rows = _without(rows, dropped), _without(other_rows, dropped)
        if other_rows != rows:
            only_there = [r[:500] for r in sorted(set(other_rows) - set(rows))[:3]]
            only_here = [r[:500] for r in sorted(set(rows) - set(other_rows))[:3]]
            differences.append(
                f"{name}: {len(other_rows)} rows {there}, {len(rows)} {here};"
                f" only {there} {only_there}; only {here} {only_here}"
            )
        row_count += len(rows)
    return differences, row_count


def _without(rows: list[str], columns: set[str]) -> list[str]:
    if not columns:
        return rows
    kept = [{k: v for k, v in json.loads(row).items() if k not in columns} for row in rows]
    return sorted(json.dumps(row, sort_keys=True) for row in kept)


def copy_project(dest: Path) -> Path:
    """The repository's dbt project as it is now: dbt_project.yml, profiles.yml and the
    folders dbt_project.yml names with the demo on (DBT_MERGE_DEMO=1: the demo's folders
    are Jinja there), Python files of the test folder left out."""
    dest.mkdir()
    config = yaml.safe_load((ROOT / "dbt_project.yml").read_text())
    for name in (
        "dbt_project.yml",
        "profiles.yml",
        "selectors.yml",
        "packages.yml",
        "dependencies.yml",
    ):
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, dest / name)
    for key in (
        "model-paths",
        "seed-paths",
        "macro-paths",
        "test-paths",
        "analysis-paths",
        "snapshot-paths",
    ):
        for entry in config.get(key, []):
            folder = jinja2.Template(entry).render(env_var=_demo_env_var)
            ignore = ["__pycache__", "*.pyc"] + (["*.py"] if key == "test-paths" else [])
            if (ROOT / folder).is_dir() and not (dest / folder).exists():
                shutil.copytree(
                    ROOT / folder, dest / folder, ignore=shutil.ignore_patterns(*ignore)
                )
    return dest


def _demo_env_var(name: str, default: str | None = None) -> str | None:
    """dbt's env_var() of dbt_project.yml as a build with the demo on renders it."""
    return "1" if name == "DBT_MERGE_DEMO" else os.environ.get(name, default)


def _short_driver(profiles: Path, target: str) -> None:
    """The driver JVM of `target` in a copied profiles.yml compiles with C1 alone, as the
    test run's own session does (tests/conftest.py): with two workers and a build
    beside them on two cores, CPU is what a run waits for."""
    from tests.conftest import SPARK_SETTINGS

    config = yaml.safe_load(profiles.read_text())
    outputs = next(iter(config.values()))["outputs"]
    if outputs[target]["type"] != "spark_session":
        return  # no driver of its own (dbt-spark over Thrift is a client)
    parameters = outputs[target].setdefault("server_side_parameters", {})
    options = SPARK_SETTINGS["spark.driver.extraJavaOptions"]
    parameters["spark.driver.extraJavaOptions"] = options
    profiles.write_text(yaml.safe_dump(config, sort_keys=False))


class Build:
    """`dbt build --target <target>` of the repository's demo in a process of its own
    (the project a copy: its profile's driver JVM gets the test run's C1 options); it
    passes when every one of at least `nodes` nodes does. `args`: more dbt arguments
    (a selection)."""

    def __init__(
        self,
        target: str,
        project: Path,
        run_dir: Path,
        env: dict[str, str],
        nodes: int = 51,
        args: tuple[str, ...] = (),
    ) -> None:
        self.target = target
        self.run_dir = run_dir
        self.nodes = nodes
        _short_driver(project / "profiles.yml", target)
        self.warehouse = run_dir / "warehouse"
        self.output = run_dir / "dbt.out"
        run_dir.mkdir(parents=True)
        self.started = time.monotonic()
        self.seconds: float | None = None
        with open(self.output, "w") as out:
            # a session (process group) of its own: a timeout ends dbt and its JVM together
            self.proc = subprocess.Popen(
                [
                    DBT,
                    "build",
                    "--target",
                    target,
                    "--full-refresh",
                    "--project-dir",
                    str(project),
                    "--profiles-dir",
                    str(project),
                    "--target-path",
                    str(run_dir / "target"),
                    "--log-path",
                    str(run_dir / "logs"),
                    *args,
                ],
                cwd=project,
                env={**env, "DBT_MERGE_WAREHOUSE": str(self.warehouse)},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait(self) -> None:
        """Wait for dbt; fail with its output's tail unless every node passed."""
        try:
            self.proc.wait(timeout=max(1.0, BUILD_TIMEOUT - (time.monotonic() - self.started)))
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"dbt build --target {self.target}: no result in {BUILD_TIMEOUT} s")
        self.seconds = time.monotonic() - self.started
        tail = "\n".join(self.output.read_text(errors="replace").splitlines()[-40:])
        assert self.proc.returncode == 0, f"dbt build --target {self.target} failed:\n{tail}"
        results = json.loads((self.run_dir / "target" / "run_results.json").read_text())
        statuses = {r["unique_id"]: r["status"] for r in results["results"]}
        # the demo's models and seeds, and its tests
        assert len(statuses) >= self.nodes, statuses
        assert set(statuses.values()) <= {"success", "pass"}, statuses

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def beside_the_demo_build(request, build: Build) -> dict:
    """Waits for ``build`` (a process of its own) while this process makes the run's
    demo build (``demo_build`` in conftest.py), if it has not yet; returns that build's
    tables (``read_tables``). A build that fails or hangs is killed."""
    try:
        _, local = request.getfixturevalue("demo_build")
        build.wait()
    finally:
        build.kill()
    print(f"\n{build.target} demo build: {build.seconds:.1f} s")
    return local
