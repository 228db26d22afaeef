"""incremental_strategy='upsert' on Delta Lake tables (issue #55): the scenario of
test_upsert.py's TestUpsertSemantics (three batches, every merge mode, partial updates,
deletes, a Python model) with the same expected tables, as copy-on-write and as
merge-on-read, which on Delta is deletion vectors: a MERGE marks the deleted and updated
rows of a file in a deletion vector instead of rewriting the file.

The dbt calls run in a process of their own on a `table_format: delta` profile
(tests/functional/delta_runner.py): one JVM start for the module.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import process_env
from tests.functional import test_upsert as upsert
from tests.project.installing import SHORT_JVM, write_installing_project

NAME = "delta_upserts"
RUNNER = Path(__file__).with_name("delta_runner.py")
TABLE_TYPES = {"cow": "copy_on_write", "mor": "merge_on_read"}
# every upsert model of the Iceberg scenario but partial_payload, an alias of partial's
# settings (the same SQL)
UPSERTS = [
    name.split(".")[0] for name in upsert.MODELS if name not in ("batch.sql", "partial_payload.sql")
]
TIMEOUT = 900  # seconds for the whole module's dbt calls


def _models(folder: Path) -> None:
    (folder / "batch.sql").write_text(upsert.MODELS["batch.sql"])
    for short in TABLE_TYPES:
        (folder / short).mkdir()
        for file, text in upsert.MODELS.items():
            stem, suffix = file.split(".")
            if stem not in UPSERTS:
                continue
            text = text.replace("file_format='iceberg'", "file_format='delta'")
            text = text.replace('file_format="iceberg"', 'file_format="delta"')
            assert "iceberg" not in text, text
            (folder / short / f"{stem}_{short}.{suffix}").write_text(text)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The steps' results: batch 1, batch 2, batch 3. (Running a batch twice, which the
    Iceberg scenario does, runs the same MERGE statement: not repeated here.)"""
    root = tmp_path_factory.mktemp("upserts_on_delta")
    project = root / NAME
    write_installing_project(
        project,
        NAME,
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
    config = yaml.safe_load((project / "dbt_project.yml").read_text())
    config["models"][NAME].update(
        {short: {"+table_type": kind} for short, kind in TABLE_TYPES.items()}
    )
    (project / "dbt_project.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    _models(project / "models")
    read = [f"{name}_{short}" for short in TABLE_TYPES for name in UPSERTS]
    steps = [{"args": ["deps"]}]
    for batch in (1, 2, 3):
        steps.append(
            {
                "args": ["run"],
                "env": {"DBT_MERGE_TEST_BATCH": str(batch)},
                "read": read,
                "columns": "id, ts, name, price",
            }
        )
    spec = root / "steps.json"
    spec.write_text(json.dumps({"project": str(project), "schema": NAME, "steps": steps}))
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(spec)],
        cwd=project,
        env=process_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    failed = [r for r in results if not r["ok"]]
    assert done.returncode == 0 and len(results) == len(steps) and not failed, (
        f"{failed}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return results[1:]


def _rows(result: dict, table: str) -> list[tuple]:
    return [tuple(row) for row in result["tables"][table]]


@pytest.mark.parametrize("short", sorted(TABLE_TYPES))
def test_three_batches_store_what_they_store_on_iceberg(runs, short):
    first, second, third = runs
    for name in UPSERTS:
        assert _rows(first, f"{name}_{short}") == upsert.FIRST, f"{name}: batch 1"
        assert _rows(second, f"{name}_{short}") == upsert.SECOND[name], f"{name}: batch 2"
    keys = [row[0] for row in _rows(third, f"event_time_{short}")]
    assert keys == upsert.THIRD_EVENT_TIME_KEYS, "a delete with an equal ordering value wins"


@pytest.mark.parametrize("short", sorted(TABLE_TYPES))
def test_the_table_type_is_delta_s_deletion_vectors_setting(runs, short):
    kind = TABLE_TYPES[short]
    for name in UPSERTS:
        stored = runs[0]["properties"][f"{name}_{short}"]
        assert stored["delta.enableDeletionVectors"] == str(kind == "merge_on_read").lower()
        assert json.loads(stored["dbt_merge.upsert"])["table_type"] == kind


def test_merge_on_read_marks_rows_and_copy_on_write_rewrites_files(runs):
    """Batch 2 updates keys 1 and 3 and deletes 4 of commit_time: merge-on-read keeps
    batch 1's files and marks their rows in deletion vectors; copy-on-write replaces
    the files that held a changed key and has no deletion vector."""
    first, second = runs[0]["files"], runs[1]["files"]
    mor_before, mor_after = first["commit_time_mor"], second["commit_time_mor"]
    assert set(mor_before) <= set(mor_after), "merge-on-read rewrites no data file"
    assert sum(mor_after.values()) >= 3, mor_after
    cow_before, cow_after = first["commit_time_cow"], second["commit_time_cow"]
    assert not set(cow_before) <= set(cow_after), "copy-on-write rewrites the changed files"
    assert not any(cow_after.values()), cow_after
