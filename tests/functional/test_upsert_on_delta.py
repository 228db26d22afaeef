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
# commit_time as merge-on-read with compaction at the end of every run, and provenance
INLINE = "commit_time_inline"
EVENTS = f"{INLINE}__provenance"
COMPACTION = "upsert compaction"  # the compaction's log lines start with it


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
            if stem == "commit_time" and short == "mor":
                inline = (
                    f"{text}\n{{{{ config(inline_compaction={{'delete_files': 1}},"
                    " provenance=true) }}\n"
                )
                (folder / short / f"{INLINE}.{suffix}").write_text(inline)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The steps' results: batch 1, batch 2, batch 3 (running a batch twice, which the
    Iceberg scenario does, runs the same MERGE statement: not repeated here), then the
    scheduled compaction of commit_time_mor: a dry run, and the compaction."""
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
    read = [f"{name}_{short}" for short in TABLE_TYPES for name in UPSERTS] + [INLINE]
    columns = {name: "id, ts, name, price" for name in read}
    steps = [{"args": ["deps"]}]
    for batch in (1, 2, 3):
        steps.append(
            {
                "args": ["run"],
                "env": {"DBT_MERGE_TEST_BATCH": str(batch)},
                "read": [*read, EVENTS],
                "columns": {**columns, EVENTS: "distinct cast(table_version as bigint)"},
                "log": COMPACTION,
            }
        )
    compact = ["run-operation", "dbt_merge.execute_upsert_compaction", "--args"]
    for execute in ("false", "true"):
        steps.append(
            {
                "args": [*compact, f"{{model: commit_time_mor, execute: {execute}}}"],
                "read": ["commit_time_mor", "auto_merge_provenance"][: 1 + (execute == "true")],
                "columns": {
                    "commit_time_mor": "id, ts, name, price",
                    "auto_merge_provenance": "event_type, table_name, parent_ids, child_ids,"
                    " rewritten_bytes, snapshot_id",
                },
                "log": COMPACTION,
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
    first, second, third = runs[:3]
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


def test_scheduled_compaction_purges_the_deletion_vectors(runs):
    """execute_upsert_compaction on a Delta table: the dry run names the REORG and
    changes nothing; the compaction rewrites every file with deleted rows (one REORG
    ... APPLY (PURGE)), keeps the rows, and records a JOIN event of the files it
    replaced and wrote."""
    third, dry, compacted = runs[2], runs[3], runs[4]
    marked = {path for path, deleted in third["files"]["commit_time_mor"].items() if deleted}
    assert marked, "batches 2 and 3 left deletion vectors to compact"
    assert dry["files"]["commit_time_mor"] == third["files"]["commit_time_mor"], "dry run"
    assert any("would run:" in m and "apply (purge)" in m.lower() for m in dry["log"]), dry
    files = compacted["files"]["commit_time_mor"]
    assert not any(files.values()), f"no deletion vector is left: {files}"
    assert not marked & set(files), "every file with deleted rows was replaced"
    assert _rows(compacted, "commit_time_mor") == _rows(third, "commit_time_mor")
    events = compacted["tables"]["auto_merge_provenance"]
    ours = [e for e in events if e[1] == f"{NAME}.commit_time_mor"]
    assert len(ours) == 1, events
    event_type, _, parents, children, rewritten, version = ours[0]
    assert event_type == "JOIN" and rewritten > 0 and int(version) > 0
    assert set(parents) == marked
    assert children and set(children) <= set(files)
    assert any(f"rewrote {len(marked)} data file(s)" in m for m in compacted["log"]), compacted


def test_inline_compaction_leaves_no_deletion_vector(runs):
    """inline_compaction on a Delta merge-on-read table: after every run the table has no
    deletion vector left and holds what the same model without compaction holds."""
    for result in runs[:3]:
        assert _rows(result, INLINE) == _rows(result, "commit_time_mor")
        assert not any(result["files"][INLINE].values()), result["files"][INLINE]
    second = runs[1]
    assert any(f"{INLINE}: rewrote" in m for m in second["log"]), second["log"]
    assert any(second["files"]["commit_time_mor"].values()), "the same batch marks rows"
    # provenance: the MERGE's version has its events; the REORG after it (no data
    # change) is recorded as read, so the next run does not diff the whole table
    for result in [r for r in runs[1:3] if any(f"{INLINE}: rewrote" in m for m in r["log"])]:
        merged = max(row[0] for row in result["tables"][EVENTS])
        recorded = result["properties"][EVENTS]["dbt_merge.provenance_version"]
        assert recorded == str(merged + 1), (merged, recorded)
