"""incremental_strategy='upsert' on Delta Lake tables (issue #55): the scenario of
test_upsert.py's TestUpsertSemantics (three batches, every merge mode, partial updates,
deletes, a Python model) with the same expected tables, as copy-on-write and as
merge-on-read, which on Delta is deletion vectors: a MERGE marks the deleted and updated
rows of a file in a deletion vector instead of rewriting the file; compaction of the
deletion vectors, inline and scheduled, and a scheduled one that died between its REORG
and its event. Then an auto-merge plan of a Delta table executed (execute_auto_merge):
dry run, merges, a stale plan, and a run that died between a merge's commit and its
event.

The dbt calls run in a process of their own on a `table_format: delta` profile
(tests/functional/delta_runner.py): one JVM start for the module.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.functional import delta_runner
from tests.functional import test_auto_merge_dbt as auto_merge
from tests.functional import test_upsert as upsert

NAME = "delta_upserts"
TABLE_TYPES = {"cow": "copy_on_write", "mor": "merge_on_read"}
# every upsert model of the Iceberg scenario but partial_payload, an alias of partial's
# settings (the same SQL)
UPSERTS = [
    name.split(".")[0] for name in upsert.MODELS if name not in ("batch.sql", "partial_payload.sql")
]
UPSERT_TABLES = [f"{name}_{short}" for short in TABLE_TYPES for name in UPSERTS]
TIMEOUT = 900  # seconds for the whole module's dbt calls
# commit_time as merge-on-read with compaction at the end of every run, and provenance
INLINE = "commit_time_inline"
EVENTS = f"{INLINE}__provenance"
COMPACTION = "upsert compaction"  # the compaction's log lines start with it
# an auto-merge plan of a Delta table: twelve days, one file each (days_plan's table);
# 2024-01-08 is NEVER, every file fits, so two merges: 01..07 and 09..12
DAYS_PLAN_YML = """
version: 2
models:
  - name: days_plan
    config:
      auto_merge:
        sort_column: day_date
        split_threshold: 1000000
        mergeability: [{from: "2024-01-08", to: "2024-01-08", mergeability: NEVER}]
"""
AUTO_MERGE = "auto-merge"  # the executor's log lines hold it
EXECUTE_PLAN = ["run-operation", "dbt_merge.execute_auto_merge", "--args"]
DAYS = "id, day_date, payload"
EVENT_COLUMNS = (
    "event_type, table_name, merge_index, min_key, max_key, parent_ids, child_ids,"
    " rewritten_bytes, snapshot_id, plan_model"
)
# a scheduled compaction of event_time_mor that dies before its event, and the next two
COMPACTION_DIED, COMPACTION_RECORDED, COMPACTION_AGAIN = range(6, 9)
# the auto-merge steps, after deps, four batches and five compaction steps (runs[9:])
PLANNED, DRY, MERGED, STALE, REBUILT, DIED, RECOVERED = range(9, 16)


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
    delta = 'file_format="delta"'
    (folder / "days.py").write_text(auto_merge.DAYS_MODEL.replace('file_format="iceberg"', delta))
    plan = auto_merge.PLAN_MODEL.format(table="days")
    (folder / "days_plan.py").write_text(plan.replace('file_format="iceberg"', delta))
    (folder / "days_plan.yml").write_text(DAYS_PLAN_YML)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The steps' results: batch 1, batch 2, batch 3 and batch 3 again, then the
    scheduled compaction of commit_time_mor: a dry run, and the compaction; then one of
    event_time_mor that dies before its event, and two more; then the auto-merge steps."""
    root = tmp_path_factory.mktemp("upserts_on_delta")
    project = delta_runner.write_project(root, NAME)
    config = yaml.safe_load((project / "dbt_project.yml").read_text())
    config["models"][NAME].update(
        {short: {"+table_type": kind} for short, kind in TABLE_TYPES.items()}
    )
    (project / "dbt_project.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    _models(project / "models")
    read = [*UPSERT_TABLES, INLINE]
    columns = {name: "id, ts, name, price" for name in read}
    steps = [{"args": ["deps"]}]
    for batch in (1, 2, 3, 3):
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
    point = "upsert.before_compaction_event"
    died = {"env": {"DBT_MERGE_FAIL_AT": point}, "fails": True, "log": point}
    for variant in (died, {}, {}):
        steps.append(
            {
                "args": [*compact, "{model: event_time_mor, execute: true}"],
                "read": ["event_time_mor", "auto_merge_provenance"],
                "columns": {
                    "event_time_mor": "id, ts, name, price",
                    "auto_merge_provenance": "event_type, table_name, parent_ids, child_ids,"
                    " rewritten_bytes, snapshot_id",
                },
                "log": COMPACTION,
                **variant,
            }
        )
    steps += _auto_merge_steps()
    return delta_runner.run_steps(project, NAME, steps, TIMEOUT)[1:]


def _auto_merge_steps() -> list[dict]:
    """Build days and its plan, a dry run, the execution, the same plan again (stale);
    then days and its plan again, an execution that dies after its first merge's
    commit (auto_merge.after_rewrite), and one that goes on."""
    build = {"args": ["run", "--select", "days", "days_plan"], "read": ["days"], "columns": DAYS}

    def execute(flag: str, read: list[str], **step) -> dict:
        columns = {"days": DAYS, "auto_merge_provenance": EVENT_COLUMNS}
        args = [*EXECUTE_PLAN, f"{{plan: days_plan, execute: {flag}}}"]
        return {"args": args, "read": read, "columns": columns, "log": AUTO_MERGE, **step}

    both = ["days", "auto_merge_provenance"]
    return [
        build,
        execute("false", ["days"]),
        execute("true", both),
        execute("true", both),
        build,
        execute(
            "true",
            ["days"],
            env={"DBT_MERGE_FAIL_AT": "auto_merge.after_rewrite"},
            fails=True,
            log="auto_merge.after_rewrite",
        ),
        execute("true", both),
    ]


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


def test_the_same_batch_again_writes_nothing(runs):
    """Batch 3 run again changes no row, so no table gets a new Delta version: neither
    a model of either table type (copy-on-write would rewrite the files of the keys the
    batch matches), the inline-compacted one, nor its events."""
    third, again = runs[2], runs[3]
    assert again["tables"] == third["tables"]
    assert set(again["versions"]) == {*UPSERT_TABLES, INLINE, EVENTS}
    assert again["versions"] == third["versions"], "no new version"


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
    third, dry, compacted = runs[2], runs[4], runs[5]
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


def test_a_compaction_that_died_before_its_event_is_recorded_by_the_next(runs):
    """A scheduled compaction that dies between its REORG's commit and its JOIN event
    (failure point upsert.before_compaction_event): the REORG is stored (no deletion
    vector left, the same rows), its event is not. The next compaction finds the REORG
    by its userMetadata, records the event a compaction that did not die records
    (test_scheduled_compaction_purges_the_deletion_vectors); one more records nothing."""
    third, died = runs[2], runs[COMPACTION_DIED]
    recorded, again = runs[COMPACTION_RECORDED], runs[COMPACTION_AGAIN]
    name, table = "event_time_mor", f"{NAME}.event_time_mor"
    marked = {path for path, deleted in third["files"][name].items() if deleted}
    assert marked, "batches 2 and 3 left deletion vectors to compact"
    said = died["error"] + " ".join(died["log"])
    assert "injected failure at upsert.before_compaction_event" in said, said[-1500:]
    files = died["files"][name]
    assert not any(files.values()) and not marked & set(files), "the REORG committed"
    assert _rows(died, name) == _rows(third, name)
    assert not [e for e in died["tables"]["auto_merge_provenance"] if e[1] == table]

    text = " ".join(recorded["log"])
    assert "has no JOIN event (a compaction stopped before recording it)" in text, text[-1500:]
    assert "no data file has deleted rows past the thresholds" in text
    assert recorded["files"][name] == files, "nothing more to compact"
    ours = [e for e in recorded["tables"]["auto_merge_provenance"] if e[1] == table]
    assert len(ours) == 1, ours
    event_type, _, parents, children, rewritten, version = ours[0]
    assert event_type == "JOIN" and rewritten > 0
    assert set(parents) == marked and set(children) == set(files) - set(third["files"][name])
    assert f"data file(s) in version {version} has no JOIN event" in text, "the REORG's"
    text = " ".join(again["log"])
    assert "has no JOIN event" not in text, text[-1500:]
    assert again["tables"]["auto_merge_provenance"] == recorded["tables"]["auto_merge_provenance"]


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


def _events(result: dict) -> list[dict]:
    names = [c.strip() for c in EVENT_COLUMNS.split(",")]
    rows = [dict(zip(names, row, strict=True)) for row in result["tables"]["auto_merge_provenance"]]
    ours = [e for e in rows if e["table_name"].endswith(f"{NAME}.days")]
    return sorted(ours, key=lambda e: (e["snapshot_id"], e["merge_index"]))


def test_an_auto_merge_plan_runs_on_delta(runs):
    """execute_auto_merge of a plan of a Delta table (through the spark_session adapter):
    the dry run changes nothing; the execution rewrites each planned run of files into
    one, committed as Delta's OPTIMIZE commits (every action dataChange=false), keeps
    every row, and records one JOIN event per merge (planned files -> the new one); the
    same plan again is stale and changes nothing."""
    planned, dry, merged, stale = (runs[i] for i in (PLANNED, DRY, MERGED, STALE))
    files = planned["files"]["days"]
    assert len(files) == 12 and not any(files.values()), files
    assert dry["files"]["days"] == files, "a dry run changes nothing"
    text = " ".join(dry["log"])
    assert "2 merge(s) would run, rewriting 11 files, 0 would be skipped" in text, text[-1500:]
    assert "would run: a rewrite of its 7 files of version" in text, text[-1500:]
    assert "committed as an OPTIMIZE (dataChange=false)" in text

    text = " ".join(merged["log"])
    assert "2 merge(s) executed, 11 files -> 2, 0 skipped" in text, text[-1500:]
    after = merged["files"]["days"]
    assert len(after) == 12 - 11 + 2 and not any(after.values()), after
    assert _rows(merged, "days") == _rows(planned, "days"), "row for row the same contents"
    events = _events(merged)
    assert [(e["event_type"], e["merge_index"], e["plan_model"]) for e in events] == [
        ("JOIN", 1, "days_plan"),
        ("JOIN", 2, "days_plan"),
    ]
    assert [[e["min_key"], e["max_key"]] for e in events] == [
        ["2024-01-01", "2024-01-07"],
        ["2024-01-09", "2024-01-12"],
    ]
    assert [len(e["parent_ids"]) for e in events] == [7, 4]
    parents = {p for e in events for p in e["parent_ids"]}
    assert parents <= set(files) and not parents & set(after), "the planned files are gone"
    assert [len(e["child_ids"]) for e in events] == [1, 1]
    assert {c for e in events for c in e["child_ids"]} == set(after) - set(files)
    assert all(e["rewritten_bytes"] > 0 for e in events)
    assert events[0]["snapshot_id"] < events[1]["snapshot_id"], "one commit per merge"

    text = " ".join(stale["log"])
    assert text.count("the plan is stale") == 2, text[-1500:]
    assert "7 planned file(s) are no longer in the table" in text
    assert text.count("would also rewrite 1 file(s) not in the plan") == 2
    assert "0 merge(s) executed" in text and "2 skipped" in text
    assert stale["files"]["days"] == after and _events(stale) == events, "nothing changed"


def test_a_delta_merge_whose_event_was_lost_is_recorded_by_the_next_run(runs):
    """A run that dies after a merge's commit and before its event (failure point
    auto_merge.after_rewrite): the merge is stored, its event is not; the next run
    finds that commit by its marker (Delta's userMetadata), records its event once,
    and executes the other merge."""
    rebuilt, died, recovered = (runs[i] for i in (REBUILT, DIED, RECOVERED))
    files = rebuilt["files"]["days"]
    assert len(files) == 12
    said = died["error"] + " ".join(died["log"])
    assert "injected failure at auto_merge.after_rewrite" in said, said[-1500:]
    assert len(died["files"]["days"]) == 12 - 7 + 1, "the first merge committed"
    assert _rows(died, "days") == _rows(rebuilt, "days")
    text = " ".join(recovered["log"])
    assert "was executed in version" in text and "its JOIN event is recorded now" in text
    assert "1 merge(s) executed, 4 files -> 1, 0 skipped, 1 event(s) recorded" in text, text[-1500:]
    events = [e for e in _events(recovered) if set(e["parent_ids"]) <= set(files)]
    assert [(e["merge_index"], len(e["parent_ids"])) for e in events] == [(1, 7), (2, 4)]
    assert len(_events(recovered)) == 4, "two merges before, two now: each recorded once"
    assert len(recovered["files"]["days"]) == 3
    assert _rows(recovered, "days") == _rows(rebuilt, "days")
