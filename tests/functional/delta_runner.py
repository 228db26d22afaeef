"""dbt calls on a Delta Lake target, in a process of its own, and what each left stored.

The test run's own SparkSession has Iceberg's catalog as ``spark_catalog``; a Delta
table's MERGE needs Delta's catalog there, and one process has one session. So a test
of Delta tables hands its dbt calls to this script (``python delta_runner.py
<steps.json>``), which runs them in one process (one JVM start) with dbt's Python API,
on a profile with ``table_format: delta``. After each step it reads what the step names
and prints one JSON line ``{"step": i, "ok": ..., "tables": {...}, "files": {...},
"properties": {...}, "versions": {...}}``:

* ``tables``: ``select <columns> from <schema>.<table> order by 1`` per table, as lists;
* ``files``: per table, each data file of the Delta snapshot (its absolute path) with the
  number of rows its deletion vector marks deleted (0 without one);
* ``properties``: per table, its table properties;
* ``log``: with ``"log": "text"`` in the step, dbt's messages of the step that hold it.

A step is ``{"args": [dbt arguments], "env": {...}, "read": [tables], "columns": "..."}``
(``columns`` one list for every table, or a mapping table -> list); a step with
``"fails": true`` is expected to fail, and what it names is read after it. A step's
``"sql": [statements]`` run first, in the session an earlier step's dbt call started (as
another job that writes the tables would).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(steps_file: str) -> int:
    from dbt.cli.main import dbtRunner

    spec = json.loads(Path(steps_file).read_text())
    project, schema = spec["project"], spec["schema"]
    common = ["--project-dir", project, "--profiles-dir", project]
    for index, step in enumerate(spec["steps"]):
        saved = {name: os.environ.get(name) for name in step.get("env", {})}
        os.environ.update(step.get("env", {}))
        if step.get("sql"):
            from pyspark.sql import SparkSession

            spark = SparkSession.builder.getOrCreate()  # the session dbt's adapter started
            for statement in step["sql"]:
                spark.sql(statement).collect()
        messages: list[str] = []  # dbt's messages that hold the step's "log" text
        try:
            keep = _keeper(step.get("log"), messages)
            result = dbtRunner(callbacks=[keep]).invoke([*step["args"], *common])
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        out: dict = {"step": index, "ok": bool(result.success)}
        if not result.success:
            out["error"] = (
                str(result.exception or "")[:2000]
                + " ".join(
                    f"{getattr(getattr(r, 'node', None), 'name', 'operation')}: {r.message}"
                    for r in (result.result or [])
                    if getattr(r, "status", None) not in ("success", "pass")
                )[:3000]
            )
        if step.get("read") and (result.success or step.get("fails")):
            out.update(read(schema, step["read"], step.get("columns", "*")))
        if step.get("log"):
            out["log"] = messages
        print(json.dumps(out, default=str), flush=True)
    return 0


def _keeper(text: str | None, messages: list[str]):
    """A dbt callback that appends to messages each message holding text."""

    def keep(event) -> None:
        message = getattr(event.info, "msg", "") or ""
        if text and text in message:
            messages.append(message)

    return keep


def read(schema: str, names: list[str], columns: str | dict[str, str]) -> dict:
    from pyspark.sql import SparkSession

    from dbt_merge.auto_merge import delta

    spark = SparkSession.builder.getOrCreate()  # the session dbt's adapter started
    tables, files, properties, versions = {}, {}, {}, {}
    for name in names:
        qualified = f"{schema}.{name}"
        selected = columns.get(name, "*") if isinstance(columns, dict) else columns
        tables[name] = [
            list(r) for r in spark.sql(f"select {selected} from {qualified} order by 1").collect()
        ]
        listed = delta.load_table(spark, "spark_catalog", qualified).file_deletes()
        files[name] = {f["file_path"]: f["deleted_rows"] for f in listed}
        properties[name] = {
            r.key: r.value for r in spark.sql(f"show tblproperties {qualified}").collect()
        }
        versions[name] = spark.sql(f"describe history {qualified} limit 1").first().version
    return {"tables": tables, "files": files, "properties": properties, "versions": versions}


def write_project(root: Path, name: str) -> Path:
    """For a test: the dbt project root/name that installs dbt_merge, on a profile with
    ``table_format: delta`` (models in file_format delta), its warehouse and logs in
    root, two threads on local[2]. Returns its folder."""
    from tests.project.installing import SHORT_JVM, write_installing_project

    project = root / name
    write_installing_project(
        project,
        name,
        root / "warehouse",
        file_format="delta",
        table_format="delta",
        threads=2,
        log_dir=str(root / "logs"),
        server_side_parameters={
            **SHORT_JVM,
            "spark.master": "local[2]",
            "spark.sql.shuffle.partitions": "2",
        },
    )
    return project


def run_steps(project: Path, schema: str, steps: list[dict], timeout: int) -> list[dict]:
    """For a test: runs steps on project (its dbt project folder) in a process of this
    script and returns what each step printed, in order. Fails the test, with the
    process's output, unless every step ran and failed exactly where it says so."""
    from tests.conftest import run_json_script

    spec = project.parent / "steps.json"
    spec.write_text(json.dumps({"project": str(project), "schema": schema, "steps": steps}))
    done, results = run_json_script(Path(__file__), spec, project, timeout)
    complete = done.returncode == 0 and len(results) == len(steps)
    wrong = complete and [
        r for r, s in zip(results, steps, strict=True) if r["ok"] == bool(s.get("fails"))
    ]
    assert complete and not wrong, f"{wrong}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return results


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
