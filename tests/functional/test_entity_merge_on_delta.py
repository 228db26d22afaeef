"""A merge that follows the change on Delta Lake tables (issue #55): the edges keep their
digest in a Delta table, each Delta dataset is read at the version its run pins, a
dataset whose version has not moved is not read, and a dataset with Delta's change data
feed on (`delta.enableChangeDataFeed`) gives its changed records from the feed
(`table_changes` between the version the digest describes and the one read) instead of
a hash of every record. Where the feed cannot say (it is off, or a version in between
switched it), the dataset is hashed and the log says why.

The closure in SQL alone (`materialized='entity_components'`) runs on Delta too, and
equals the Python closure.

Three datasets are Delta tables that another job changes between the runs (SQL in the
runner: INSERT, UPDATE, DELETE, MERGE, property changes); after every run the
change-following merged model equals a from-scratch build of the same inputs, and so do
the state tables; the merged model reads only the entities of the components written
since its last run (their version then found in Delta's history). A run that dies after
the edges' commit, before their digest's (entity_merge.before_digest), leaves the digest
stale: the next run compares every record and ends where a run that never failed ends;
one that dies before the merged model leaves it as it was, and the next run's merged
model follows both components runs since (time travel to the components' version).
After a RESTORE of the merged table the next run compares every entity, and so it does
after a RESTORE of the components, which catch up on the edges batches since. A joining
email holds a line break (the staged tables of a run keep it).

The dbt calls run in a process of their own on a `table_format: delta` profile
(tests/functional/delta_runner.py): one JVM start for the module.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.functional import delta_runner
from tests.functional.entity_merge_fixtures import NEVER, merge_vars
from tests.functional.test_entity_merge_following import declaration, follow_models

pytestmark = pytest.mark.delta

NAME = "merge_on_delta"
TIMEOUT = 900  # seconds for the whole module's dbt calls
FEED = {"delta.enableChangeDataFeed": "true"}
# the datasets: a and b with the change data feed, c without
RAW = {
    "raw_a": (
        FEED,
        "select * from values ('a1', 'e1', 1, false), ('a2', 'e2', 2, false),"
        " ('a3', 'e3', 3, false) as t(_id, email, score, gone)",
    ),
    "raw_b": (
        FEED,
        "select _id, email, f2, tags from values"
        " ('b1', cast(null as string), 'x', array('t1')), ('b2', 'e3', 'y', array('t2'))"
        " as t(_id, email, f2, tags)",
    ),
    "raw_c": (
        {},
        "select * from values ('c1', 'X', 3, false), ('c2', 'Y', 4, true), ('c3', 'Z', 5, false)"
        " as t(_id, f3, score, gone)",
    ),
}
# the closure in SQL (materialized='entity_components') over the from-scratch edges, and
# the merged model built from it: the first run only
SQL_CLOSURE = {
    "s_components.sql": "{{ config(materialized='entity_components') }}\n"
    "select * from {{ ref('r_edges') }}",
    "s_cd.sql": "{{ config(materialized='table') }}\n"
    "{{ dbt_merge.merge_entities('m_cd', ref('s_components')) }}",
}
# the runs after the first: another job writes the datasets
KEEP_RAW = ["--exclude", *RAW, *(name.split(".")[0] for name in SQL_CLOSURE)]
MERGED = "`_id`, `$ids`, `$deleted`, `$replaced`, entity"
EDGES = "src, dst, fingerprint, `_batch`"
COMPONENTS = "node, component"
READ = {"f_cd": MERGED, "r_cd": MERGED, "f_edges": EDGES, "r_edges": EDGES}
SAID = "dbt_merge: "  # the log lines of the package
# the runs (after deps): the first build, a delivery read from the feeds, a delivery
# around a switch of raw_b's feed in a run that dies before the edges' digest, the run
# after it, a delivery in a run that dies before the merged model, the run after it, a
# run after a RESTORE of the merged model to its version of the FED run, one after a
# RESTORE of the components, and a run with nothing new
FIRST, FED, DIED, AFTER_DEATH, DIED_MERGED, LAST, RESTORED, COMPONENTS_RESTORED, UNCHANGED = range(
    9
)
# the change-following models: a run with nothing new commits no version of any
FOLLOWING = ("f_edges", "f_components", "f_cd")


def _models(folder: Path) -> None:
    models = follow_models({"cd": ("composite", "default")})
    for name, text in models.items():
        if not name.startswith("raw_"):
            (folder / name).write_text(text)
    for name, text in SQL_CLOSURE.items():
        (folder / name).write_text(text)
    for name, (properties, select) in RAW.items():
        extra = f", tblproperties={properties!r}" if properties else ""
        config = f"{{{{ config(materialized='table'{extra}) }}}}\n"
        (folder / f"{name}.sql").write_text(config + select)


def _run(args: list[str] | None = None, sql: list[str] | None = None, **step) -> dict:
    read = {**READ, **step.pop("read", {})}
    return {
        "args": args or ["run", *KEEP_RAW],
        "sql": sql or [],
        "read": list(read),
        "columns": read,
        "log": SAID,
        **step,
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """What each run left (FIRST ... AFTER_DEATH): the merged and edges tables, the log."""
    root = tmp_path_factory.mktemp("merge_on_delta")
    project = delta_runner.write_project(root, NAME)
    config = yaml.safe_load((project / "dbt_project.yml").read_text())
    config["vars"] = {
        **merge_vars(m_cd=declaration("composite", "default"))["vars"],
        "dbt_merge_compare_all_share": NEVER,
        "dbt_merge_rebuild_share": NEVER,
        # a state table is compacted after every run that deleted a row of it
        "dbt_merge_state_compaction": {"deleted_ratio": 0},
    }
    (project / "dbt_project.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    _models(project / "models")
    schema = NAME
    steps = [
        {"args": ["deps"]},
        _run(
            ["run"], read={"s_cd": MERGED, "s_components": COMPONENTS, "r_components": COMPONENTS}
        ),
        # a new record, a MERGE that joins (b1 takes a1's email) and adds b3 (which
        # joins a4 by an email holding a line break, and c3), a hard and a flag delete,
        # a property change the feed describes, and a change in the dataset without a
        # feed
        _run(
            sql=[
                f"insert into {schema}.raw_a values ('a4', 'e\\n9', 4, false)",
                f"merge into {schema}.raw_b as t using (select 'b1' as _id, 'e1' as email,"
                " 'x' as f2, array('t1') as tags union all select 'b3', 'e\\n9', 'z',"
                " array('t\\n3')) as s on t._id = s._id when matched then update set *"
                " when not matched then insert *",
                f"delete from {schema}.raw_a where _id = 'a3'",
                f"update {schema}.raw_a set gone = true where _id = 'a2'",
                f"alter table {schema}.raw_a set tblproperties ('team' = 'ingest')",
                f"update {schema}.raw_c set score = 9 where _id = 'c3'",
            ]
        ),
        # raw_b's feed off for an update that splits b1 from a1; raw_a and raw_c
        # unchanged; the run dies after the edges' commit, before their digest's
        _run(
            sql=[
                f"alter table {schema}.raw_b set tblproperties"
                " ('delta.enableChangeDataFeed' = 'false')",
                f"update {schema}.raw_b set email = 'e2' where _id = 'b1'",
                f"alter table {schema}.raw_b set tblproperties"
                " ('delta.enableChangeDataFeed' = 'true')",
            ],
            env={"DBT_MERGE_FAIL_AT": "entity_merge.before_digest"},
            fails=True,
        ),
        _run(),
        # c1 splits from b1 (lower(f3) no longer b1's f2) in a run that dies after the
        # edges and components, before the merged model; then a5 joins a1: the merged
        # model follows two components runs, reading the ids before them by time travel
        _run(
            sql=[f"update {schema}.raw_c set f3 = 'Q' where _id = 'c1'"],
            env={"DBT_MERGE_FAIL_AT": "entity_merge.before_merged"},
            fails=True,
        ),
        _run(sql=[f"insert into {schema}.raw_a values ('a5', 'e1', 5, false)"]),
        # the merged table back at its version 1 (FED's MERGE; version 0 its first
        # build): its rows no longer say which components they came from
        _run(sql=[f"restore table {schema}.f_cd to version as of 1"]),
        # the components back at their version 2 (FED's batch; version 1 set deletion
        # vectors after the first build) and a6, a new record:
        # the components catch up on every edges batch since, and the merged model,
        # whose components were restored past the version it was built from, compares
        # every entity
        _run(
            sql=[
                f"restore table {schema}.f_components to version as of 2",
                f"insert into {schema}.raw_a values ('a6', 'e6', 6, false)",
            ],
            read={"f_components": COMPONENTS},
        ),
        _run(read={"f_components": COMPONENTS}),
    ]
    return delta_runner.run_steps(project, schema, steps, TIMEOUT)[1:]


def test_a_run_with_nothing_new_commits_no_version(runs):
    """After the last delivery, a run whose datasets did not move: the edges, the
    components and the merged model keep their rows and their Delta version."""
    before, unchanged = runs[COMPONENTS_RESTORED], runs[UNCHANGED]
    # the from-scratch models (r_*) are rebuilt every run, with new _updated values
    assert {name: unchanged["tables"][name] for name in FOLLOWING} == {
        name: before["tables"][name] for name in FOLLOWING
    }
    assert {name: unchanged["versions"][name] for name in FOLLOWING} == {
        name: before["versions"][name] for name in FOLLOWING
    }, "no new version"


def _said(result: dict) -> str:
    return "\n".join(result["log"])


def _live_ids(result: dict) -> set[str]:
    return {row[0] for row in result["tables"]["r_cd"] if not row[2]}


@pytest.mark.parametrize("step", [FIRST, FED, AFTER_DEATH, LAST, RESTORED, COMPONENTS_RESTORED])
def test_each_run_equals_a_from_scratch_build(runs, step):
    """The change-following merged model holds every row of the from-scratch build and
    every other id as a deleted row; the live edges are the from-scratch edges."""
    tables = runs[step]["tables"]
    scratch = {row[0]: row for row in tables["r_cd"]}
    follow = {row[0]: row for row in tables["f_cd"]}
    assert {k: v for k, v in follow.items() if k in scratch} == scratch
    assert all(row[2] for k, row in follow.items() if k not in scratch), follow
    live = sorted(tuple(r[:3]) for r in tables["f_edges"] if r[1] is not None and r[3] is not None)
    assert live == sorted(tuple(r[:3]) for r in tables["r_edges"] if r[1] is not None)


def test_the_merged_model_reads_only_what_changed(runs):
    """After the first build, the merged model follows the change: it finds the
    components' version of its last write in Delta's history and compares only the
    entities of the components written since (the equality above says it missed
    nothing), in the run after the one that died too."""
    for step in (FED, AFTER_DEATH, LAST):
        said = _said(runs[step])
        assert "f_cd: follows the change of" in said and "every entity is compared" not in said, (
            said
        )
        # one components run since the merged model's last run gives the ids it held
        # itself; two (the one that died before the merged model) by time travel
        travelled = "f_cd: reads the ids the changed components held from" in said
        assert travelled == (step == LAST), said


def test_the_deliveries_joined_and_split_entities(runs):
    """The scenario's changes did what they say (so the equality above covers them)."""
    assert _live_ids(runs[FIRST]) == {"0|a1", "0|a2", "0|a3|1|b2", "1|b1|2|c1", "2|c3"}
    assert _live_ids(runs[FED]) == {"0|a1|1|b1|2|c1", "0|a4|1|b3|2|c3", "1|b2"}
    assert _live_ids(runs[AFTER_DEATH]) == {"0|a1", "1|b1|2|c1", "0|a4|1|b3|2|c3", "1|b2"}
    assert _live_ids(runs[LAST]) == {"0|a1|0|a5", "1|b1", "2|c1", "0|a4|1|b3|2|c3", "1|b2"}


def test_datasets_with_a_feed_are_read_from_it_and_the_others_hashed(runs):
    said = _said(runs[FED])
    assert "changed records found from the change data feed of: raw_a, raw_b" in said, said
    assert (
        "every record of raw_c is hashed, not read from its change data feed:"
        " delta.enableChangeDataFeed is not true"
    ) in said, said


def test_a_feed_switched_off_in_between_is_not_read_and_unmoved_datasets_not_at_all(runs):
    said = _said(runs[DIED])
    assert "not read, at the snapshot the last run read: raw_a, raw_c" in said, said
    assert "every record of raw_b is hashed, not read from its change data feed: version" in said
    assert "changed delta.enableChangeDataFeed" in said, said


def test_a_run_after_one_that_died_before_the_digest_compares_every_record(runs):
    """The run that died had committed the edges (b1's change), not their digest nor
    the merged model; the digest then describes an older version of the edges, so the
    next run reads no feed and compares every record, and ends where the from-scratch
    build is (test_each_run_equals_a_from_scratch_build)."""
    died, before = runs[DIED], runs[FED]
    assert "injected failure at entity_merge.before_digest" in died["error"] + _said(died)
    assert died["tables"]["f_edges"] != before["tables"]["f_edges"], "the edges committed"
    assert died["tables"]["f_cd"] == before["tables"]["f_cd"], "the merged model did not run"
    said = _said(runs[AFTER_DEATH])
    assert "change data feed" not in said and "not read, at the snapshot" not in said, said


def test_a_run_that_died_before_the_merged_model_left_it_untouched(runs):
    """entity_merge.before_merged: the edges and components committed the split of c1
    from b1, the merged model did not run; the next run's merged model (a run later)
    holds the split and the join after it (test_each_run_equals_a_from_scratch_build)."""
    died, before = runs[DIED_MERGED], runs[AFTER_DEATH]
    assert "injected failure at entity_merge.before_merged" in died["error"] + _said(died)
    assert died["tables"]["f_edges"] != before["tables"]["f_edges"], "the edges committed"
    assert died["tables"]["f_cd"] == before["tables"]["f_cd"], "the merged model did not run"


def test_a_restored_merged_table_is_compared_with_every_entity(runs):
    """After a RESTORE of the merged table, the commit time of its newest write says
    nothing of the components its rows came from: the run compares every entity, says
    so, and ends equal to a from-scratch build (test_each_run_equals_a_from_scratch_build)."""
    said = _said(runs[RESTORED])
    assert "f_cd: merge_on_delta.f_cd was restored to an older version (version" in said, said
    assert "every entity is compared" in said and "f_cd: follows the change of" not in said


def test_restored_components_catch_up_and_the_merged_model_compares_every_entity(runs):
    """A RESTORE of the components to an older version (FED's batch): the next run's
    components read every edges batch since the restored one, and the merged model,
    whose components were restored past the version it was built from, compares every
    entity, says why, and ends equal to a from-scratch build
    (test_each_run_equals_a_from_scratch_build)."""
    said = _said(runs[COMPONENTS_RESTORED])
    assert "f_cd: merge_on_delta.f_components was rolled back past" in said, said
    assert "every entity is compared" in said and "f_cd: follows the change of" not in said
    assert _live_ids(runs[COMPONENTS_RESTORED]) == _live_ids(runs[LAST]) | {"0|a6"}


def test_the_sql_closure_on_delta_equals_the_python_closure(runs):
    """The closure in SQL alone (for targets without Python models) on Delta tables: its
    components and the merged model built from them equal the Python model's."""
    tables = runs[FIRST]["tables"]
    assert tables["s_components"] == tables["r_components"] and tables["s_components"]
    assert tables["s_cd"] == tables["r_cd"]


def test_the_state_tables_write_deletion_vectors_and_compact_them(runs):
    """The edges and components tables have deletion vectors from their first build on:
    a delivery's MERGE marks the rows it replaces in them (a file whose rows all go is
    removed instead), and the run compacts a table whose deleted rows pass
    state_compaction's deleted_ratio (0 here: any), leaving no deletion vector behind."""
    for step in (FIRST, FED, LAST):
        properties = runs[step]["properties"]["f_edges"]
        assert properties.get("delta.enableDeletionVectors") == "true", (step, properties)
    compacted: dict[str, list[int]] = {"f_edges": [], "f_components": []}
    for step, result in enumerate(runs):
        for name, steps in compacted.items():
            found = re.search(
                rf"{name}: (\d+) deleted rows of \d+ in \d+ delete files", _said(result)
            )
            if found:
                assert int(found.group(1)) > 0 and "the table is compacted" in _said(result)
                steps.append(step)
    assert all(compacted.values()), compacted
    for step in compacted["f_edges"]:
        assert not any(runs[step]["files"]["f_edges"].values()), (step, runs[step]["files"])
