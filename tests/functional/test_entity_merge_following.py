"""A merge that follows the change (SPEC §1 'Change-driven runs'), proven against
from-scratch builds: random sequences of deliveries over three datasets, and after
every delivery the change-following merged model

* equals a from-scratch build of the same inputs (table models), row for row but
  `_updated`, for every id the from-scratch build has;
* holds every other id as a deleted row; one retired in this run has `$replaced`
  when one of its ids lives on (as an incremental run that compares every entity
  decides it);
* numbers `_updated` without repeats, never going back.

Runs that die at a commit boundary (DBT_MERGE_FAIL_AT) leave every table readable,
and the next run catches up. The scripted deliveries at the start join components
through a bridging record and split them again (a missed split fails them).

Three merges share one change-following edges and components pair: identity
composite with strategy default, first with compact, composite with list.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import random
import re
from collections import Counter

import pytest
from dbt.tests.util import run_dbt

from dbt_merge.entity_merge.components import REBUILD_SHARE_ENV
from tests import sampling
from tests.conftest import dbt_env
from tests.entity_records import DATASETS, EntityRecords
from tests.functional.entity_merge_fixtures import NEVER, InstallsDbtMerge, merge_vars
from tests.functional.test_entity_merge import sql_recorder

# runs that die at a commit boundary (random delivery number -> failure point); two in
# a row before the components leave them two edges batches behind
FAILURES = {
    2: "entity_merge.before_edges",
    5: "entity_merge.before_components",
    6: "entity_merge.before_components",
    7: "entity_merge.before_digest",
    # a components batch that rewrites its table (REWRITES) did so on the run's
    # branch, the fast-forward of the table's main branch not
    8: "entity_merge.before_components_publish",
    9: "entity_merge.before_merged",
    # from round PLACEHOLDERS on, every state batch takes the placeholders' path; the
    # placeholders committed, the MERGE not
    10: "entity_merge.before_edges_merge",
    12: "entity_merge.before_components_merge",
    # the placeholders and the MERGE committed on the run's branch, the fast-forward of
    # the table's main branch not
    13: "entity_merge.before_edges_publish",
    14: "entity_merge.before_components_publish",
}
# the state table a run that died at these points was writing
DIED_IN = {
    "entity_merge.before_edges_merge": "f_edges",
    "entity_merge.before_components_merge": "f_components",
    "entity_merge.before_edges_publish": "f_edges",
    "entity_merge.before_components_publish": "f_components",
}
# the rounds whose components batch rewrites the table (no MERGE; every batch's keys
# over the filter limit and its rows over the rewrite limit, as a large batch is)
REWRITES = {3, 4, 8}
# the rounds whose merged runs compare every entity, as a large share written since
# makes them (compare_all_share)
COMPARE_ALL = {4, 11, 15}
# the rounds from which the state MERGEs list no keys (as batches over 20,000 keys
# do): new keys are inserted as placeholders, then a MERGE updates and deletes
PLACEHOLDERS = 10
# from round PLACEHOLDERS on, the session's broadcast threshold is this: every state
# MERGE raises it for its batch (so that the batch is broadcast) and puts it back
THRESHOLD = "spark.sql.autoBroadcastJoinThreshold"
SAVED_THRESHOLD = "spark.dbt_merge.broadcast_threshold"
LOW_THRESHOLD = "100b"
# a run after these failures finds the edges' digest describing an older snapshot (a
# run that dies between its placeholders and its MERGE, or before it publishes them,
# wrote both on a branch of its own: the table's main branch, which the digest
# describes, is as it was)
STALE_DIGEST = {"entity_merge.before_digest"}
# the edges model's staged buckets (their digest differed): a run that used the digest
USED_DIGEST = "f_edges__dbt_merge_buckets"
# a round's settings of the f_ models (what --vars would set for every model) reach
# them as environment variables that their configs read (settings_env, follow_models):
# a changed --vars makes dbt parse the project and the package's macros again, a
# changed environment variable only the files that read it
EDGES_SETTINGS = ("state_filter_limit", "state_rewrite_limit", "rebuild_share")
MERGED_SETTINGS = ("affected_join_rows", "compare_all_share")
COMBOS = {"cd": ("composite", "default"), "fc": ("first", "compact"), "cl": ("composite", "list")}
# a: email, score; b: email, f2, tags; c: f3 (its lower() equals b.f2), score
SCHEMAS = {
    "a": "_id string, email string, score int, gone boolean",
    "b": "_id string, email string, f2 string, tags array<string>",
    "c": "_id string, f3 string, score int, gone boolean",
}
# the kinds of change a test's deliveries must show (Deliveries.kinds, Following.kinds)
KINDS = {"join", "split", "new record", "update", "flag delete", "hard delete"}


def declaration(identity: str, strategy: str) -> dict:
    return {
        "datasets": ["raw_a a", "raw_b b", "raw_c c"],
        "equality_sets": [["a.email", "b.email"]],
        "equality": [["eq", "b.f2", ["lower", "c.f3"]]],
        "identity": identity,
        "strategy": strategy,
        "deleted_column": "gone",
    }


def follow_models(combos: dict = COMBOS) -> dict[str, str]:
    models = {
        f"raw_{name}.sql": (
            "{{ config(materialized='view') }} "
            f"select * from {{{{ target.schema }}}}.input_{name}"
        )
        for name in DATASETS
    }
    # one change-following edges and components pair, one reference pair of tables
    models["f_edges.sql"] = (
        "{{ config(materialized='incremental', incremental_strategy='entity_state',"
        " **fromjson(env_var('DBT_MERGE_TEST_EDGES_CONFIG', '{}'))) }}\n"
        "{{ dbt_merge.equality_edges('m_cd') }}"
    )
    # a Python model's config is literal: its limits come from properties (NEVER when
    # not set: for these batches, the same path as the package's defaults)
    models["f_components.yml"] = (
        "version: 2\nmodels:\n  - name: f_components\n    config:\n"
        + "".join(
            f"      state_{name}_limit: \"{{{{ env_var('DBT_MERGE_TEST_COMPONENTS_{name.upper()}"
            f"_LIMIT', '{NEVER}') }}}}\"\n"
            for name in ("filter", "rewrite")
        )
    )
    models["f_components.py"] = (
        "from dbt_merge.entity_merge import entity_components\n\n\n"
        "def model(dbt, session):\n"
        "    dbt.config(materialized='incremental', incremental_strategy='entity_state')\n"
        "    previous = dbt.this if dbt.is_incremental else None\n"
        "    return entity_components(dbt.ref('f_edges'), previous=previous)\n"
    )
    models["r_edges.sql"] = (
        "{{ config(materialized='table') }}\n{{ dbt_merge.equality_edges('m_cd') }}"
    )
    models["r_components.py"] = (
        "from dbt_merge.entity_merge import entity_components\n\n\n"
        "def model(dbt, session):\n"
        "    dbt.config(materialized='table')\n"
        "    return entity_components(dbt.ref('r_edges'))\n"
    )
    incremental = (
        "{{ config(materialized='incremental', incremental_strategy='merge', unique_key='_id',"
        " **fromjson(env_var('DBT_MERGE_TEST_MERGED_CONFIG', '{}'))) }}"
    )
    for combo in combos:
        merge = f"'m_{combo}'"
        models[f"f_{combo}.sql"] = (
            f"{incremental}\n{{{{ dbt_merge.merge_entities({merge}, ref('f_components')) }}}}"
        )
        models[f"r_{combo}.sql"] = (
            "{{ config(materialized='table') }}\n"
            f"{{{{ dbt_merge.merge_entities({merge}, ref('r_components')) }}}}"
        )
    return models


def settings_env(settings: dict) -> dict:
    """The f_ models' settings (setting -> value, as their configs name them) as the
    variables of dbt_env that follow_models' models read."""
    unknown = set(settings) - set(EDGES_SETTINGS) - set(MERGED_SETTINGS)
    assert not unknown, unknown
    return {
        "edges_config": {k: v for k, v in settings.items() if k in EDGES_SETTINGS},
        "merged_config": {k: v for k, v in settings.items() if k in MERGED_SETTINGS},
        "components_filter_limit": settings.get("state_filter_limit", NEVER),
        "components_rewrite_limit": settings.get("state_rewrite_limit", NEVER),
    }


def used_digest(queries: list[str]) -> bool:
    """Whether the run's edges model compared the datasets' digest with the stored one."""
    return any("create table" in q and USED_DIGEST in q for q in queries)


class Deliveries(EntityRecords):
    """The three datasets as dicts of records, changed one delivery at a time."""

    def __init__(self, seed: int) -> None:
        super().__init__(random.Random(seed))

    def write(self, spark, schema: str) -> None:
        for name in DATASETS:
            rows = list(self.records[name].values())
            columns = [c.split()[0].strip("`") for c in SCHEMAS[name].split(", ")]
            frame = spark.createDataFrame(
                [tuple(r.get(c) for c in columns) for r in rows], SCHEMAS[name]
            )
            frame.writeTo(f"{schema}.input_{name}").using("iceberg").createOrReplace()


def three_deliveries_built(spark, schema: str, seed: int, select: str) -> Deliveries:
    """Three random deliveries (seeded) written to the inputs, and `dbt run -s select`
    on them (after `dbt deps`): where a test of one change starts."""
    run_dbt(["deps"])
    deliveries = Deliveries(seed=seed)
    for _ in range(3):
        deliveries.random_delivery()
    deliveries.write(spark, schema)
    run_dbt(["run", "-s", select])
    return deliveries


def scripted(deliveries: Deliveries):
    """The first deliveries: components join through a bridging record and split when
    it changes or goes. Yields what happened and the live ids of merge m_cd."""
    a, b, c = (deliveries.records[name] for name in DATASETS)
    a["a1"] = {"_id": "a1", "email": "e1", "score": 1, "gone": False}
    a["a2"] = {"_id": "a2", "email": "e2", "score": 2, "gone": False}
    b["b1"] = {"_id": "b1", "email": None, "f2": "x", "tags": ["t1"]}
    c["c1"] = {"_id": "c1", "f3": "X", "score": 3, "gone": False}
    c["c2"] = {"_id": "c2", "f3": "Y", "score": 4, "gone": True}
    yield "a1, a2 alone; b1 = c1 through x", {"0|a1", "0|a2", "1|b1|2|c1"}
    b["b1"]["email"] = "e1"
    yield "b1 takes a1's email: a1, b1, c1 join", {"0|a1|1|b1|2|c1", "0|a2"}
    a["a2"]["email"] = "e1"
    yield "a2 joins too", {"0|a1|0|a2|1|b1|2|c1"}
    b["b1"]["email"] = "e2"
    yield "b1 changes email: a1 + a2 (e1) split from b1 + c1", {"0|a1|0|a2", "1|b1|2|c1"}
    a["a2"]["email"] = "e2"
    yield "a2 follows b1", {"0|a1", "0|a2|1|b1|2|c1"}
    del b["b1"]
    yield "b1 is hard-deleted: the bridge is gone", {"0|a1", "0|a2", "2|c1"}
    c["c1"]["gone"] = True
    yield "c1 is flag-deleted", {"0|a1", "0|a2"}
    c["c2"]["gone"] = False
    c["c1"]["gone"] = False
    yield "c1 and c2 come back", {"0|a1", "0|a2", "2|c1", "2|c2"}


class Following(InstallsDbtMerge):
    """The project of the merges that follow the change, the checks against the
    from-scratch builds, and a delivery's run. A delivery here rewrites a large share of
    few entities: the runs follow the change (as for a small share of many) and rebuild
    nothing, but where a round says otherwise (settings_env, REBUILD_SHARE_ENV)."""

    # the merges whose merged models the project has (identity and strategy)
    combos = COMBOS

    @pytest.fixture(scope="class")
    def models(self):
        return follow_models(self.combos)

    @pytest.fixture(scope="class")
    def project_config_update(self):
        merges = {f"m_{combo}": declaration(*settings) for combo, settings in self.combos.items()}
        variables = {
            **merge_vars(**merges)["vars"],
            "dbt_merge_compare_all_share": NEVER,
            "dbt_merge_rebuild_share": NEVER,
            # a delivery here deletes a large share of few state rows: with the default
            # (a tenth of the rows) every run compacted both state tables; with half,
            # every few runs do (assert_row_deletes_compacted)
            "dbt_merge_state_compaction": {"deleted_ratio": 0.5},
        }
        return {"vars": variables, "models": {"+file_format": "iceberg"}}

    @pytest.fixture(autouse=True)
    def changes_seen(self):
        """What check() saw change between two of its calls: joins and splits of the
        from-scratch build's live entities (kinds), from their ids (partitions)."""
        self.kinds: Counter = Counter()
        self.partitions: dict[str, list[set]] = {}

    @pytest.fixture(scope="class", autouse=True)
    def components_never_rebuild(self):
        saved = os.environ.get(REBUILD_SHARE_ENV)
        os.environ[REBUILD_SHARE_ENV] = str(NEVER)
        yield
        if saved is None:
            del os.environ[REBUILD_SHARE_ENV]
        else:
            os.environ[REBUILD_SHARE_ENV] = saved

    def check(self, spark, schema: str, step: str, last_updated: dict) -> None:
        self.check_state(spark, schema, step)
        columns = "`_id`, `$ids`, `$deleted`, `$replaced`, entity"
        for combo in self.combos:
            # one read of f_combo: the compared columns, then `_updated`
            stored = spark.sql(f"select {columns}, `_updated` from {schema}.f_{combo}").collect()
            follow = {row[0]: tuple(row[1:5]) for row in stored}
            scratch = self.table(spark, f"{schema}.r_{combo}", columns)
            assert {k: v for k, v in follow.items() if k in scratch} == scratch, (
                f"{step}: f_{combo} differs from the from-scratch build"
            )
            self.see_joins_and_splits(combo, scratch)
            # every other stored id was retired, $replaced when one of its ids lives on
            # (as an incremental run that compares every entity decides it)
            current_ids = {i for row in scratch.values() for i in row[0]}
            before = last_updated.get(combo, -1)
            retired = [(row[0], row[1], row[2], row[3], row[5]) for row in stored]
            for row in retired:
                if row[0] in scratch:
                    continue
                assert row[2], f"{step}: f_{combo} keeps {row[0]} live beyond scratch"
                if row[4] > before:
                    expected = bool(set(row[1]) & current_ids)
                    assert row[3] == expected, f"{step}: f_{combo} {row[0]} $replaced"
            updated = [row[4] for row in retired]
            assert len(set(updated)) == len(updated), f"{step}: _updated numbers repeat"
            assert max(updated) >= before, f"{step}: _updated went back"
            last_updated[combo] = max(updated)

    def see_joins_and_splits(self, combo: str, scratch: dict) -> None:
        """Counts in self.kinds the joins (a live entity that holds records of two
        earlier ones) and splits (an earlier one whose records are in two) since the
        last check of merge combo's from-scratch build (scratch, as check reads it)."""
        live = [set(row[0]) for row in scratch.values() if not row[1]]
        before = self.partitions.get(combo)
        self.partitions[combo] = live
        if before is None:
            return
        for entity in live:
            self.kinds["join"] += sum(bool(old & entity) for old in before) > 1
        for old in before:
            self.kinds["split"] += sum(bool(old & entity) for entity in live) > 1

    def assert_every_kind_of_change(self, deliveries: Deliveries, seed: int) -> None:
        """The deliveries of a test showed every kind of change (KINDS)."""
        seen = self.kinds + deliveries.kinds
        missing = KINDS - {kind for kind, count in seen.items() if count}
        assert not missing, f"{sampling.described(seed)}: no {sorted(missing)} in {dict(seen)}"

    @staticmethod
    def check_state(spark, schema: str, step: str) -> None:
        """The state tables hold what the from-scratch tables hold: every edge with its
        fingerprint, every node with its component, each key once. Besides: tombstones
        (null dst, null component) and placeholders that a run which died left for a
        record the next delivery changed back (no batch: readers skip them). One query;
        on a difference, the differing rows."""
        pairs = {
            "f_edges": (
                f"select src, dst, fingerprint from {schema}.f_edges"
                " where dst is not null and `_batch` is not null",
                f"select src, dst, fingerprint from {schema}.r_edges where dst is not null",
                "src, dst",
            ),
            "f_components": (
                f"select node, component from {schema}.f_components where component is not null",
                f"select node, component from {schema}.r_components",
                "node",
            ),
        }
        checks = []
        for table, (follow, scratch, key) in pairs.items():
            diff = (
                f"(({follow}) except all ({scratch})) union all (({scratch}) except all ({follow}))"
            )
            repeated = f"select {key} from {schema}.{table} group by {key} having count(*) > 1"
            checks.append(f"(select count(*) from ({diff})) as {table}_differs")
            checks.append(f"(select count(*) from ({repeated})) as {table}_repeats")
        found = spark.sql("select " + ", ".join(checks)).first().asDict()

        def samples() -> dict:  # the message of a failure only
            return {
                table: spark.sql(f"({follow}) except all ({scratch})").take(3)
                + spark.sql(f"({scratch}) except all ({follow})").take(3)
                for table, (follow, scratch, _) in pairs.items()
            }

        assert not any(found.values()), f"{step}: state tables {found}; rows: {samples()}"

    @staticmethod
    def snapshots(spark, schema: str, merged: tuple[str, ...] = ()) -> dict:
        """The current snapshot of each change-following state table (and of the
        merged models named)."""
        return {
            name: spark.sql(
                f"select snapshot_id from {schema}.{name}.history where is_current_ancestor "
                "order by made_current_at desc limit 1"
            ).collect()
            for name in ("f_edges", "f_components", *merged)
        }

    @staticmethod
    def run_branches(spark, schema: str, name: str) -> dict:
        """The branches runs made on state table name (`dbt_merge_*`) -> their snapshot."""
        rows = spark.sql(
            f"select name, snapshot_id from {schema}.{name}.refs where type = 'BRANCH'"
            " and startswith(name, 'dbt_merge_')"
        ).collect()
        return {row.name: row.snapshot_id for row in rows}

    @staticmethod
    def commits_since(spark, schema: str, name: str, head: int, base: int) -> int:
        """How many commits snapshot head of table name is ahead of its ancestor base."""
        parents = dict(
            spark.sql(f"select snapshot_id, parent_id from {schema}.{name}.snapshots").collect()
        )
        commits = 0
        while head != base:
            assert head is not None, f"{base} is not an ancestor"
            head = parents[head]
            commits += 1
        return commits

    @staticmethod
    def table(spark, name: str, columns: str) -> dict:
        """`_id` -> the other columns (columns starts with `_id`)."""
        return {
            row[0]: tuple(row[1:]) for row in spark.sql(f"select {columns} from {name}").collect()
        }

    @staticmethod
    def deliver(
        deliveries,
        spark,
        schema: str,
        queries: list[str],
        settings=None,
        expect_pass=True,
        reference=True,
    ) -> None:
        """Write the deliveries and `dbt run` the project, the f_ models with the
        settings given (settings_env). Without reference, the from-scratch models (r_)
        are left out: a run that dies is not checked against them (the next run
        rebuilds them from scratch), and a delivery that changes nothing finds them
        built from the same records already."""
        deliveries.write(spark, schema)
        queries.clear()
        skip = [] if reference else ["--exclude", "r_edges+"]
        with dbt_env(settings_env(settings or {})):
            run_dbt(["run", *skip], expect_pass=expect_pass, callbacks=[sql_recorder(queries)])

    def deliver_dying(self, deliveries, spark, schema: str, queries: list[str], settings, point):
        """deliver, in a run that dies at the failure point point (DBT_MERGE_FAIL_AT);
        the from-scratch models are left out."""
        os.environ["DBT_MERGE_FAIL_AT"] = point
        try:
            self.deliver(
                deliveries, spark, schema, queries, settings, expect_pass=False, reference=False
            )
        finally:
            del os.environ["DBT_MERGE_FAIL_AT"]


class TestFollowingTheChange(Following):
    def test_deliveries_equal_from_scratch_builds(self, project, spark):
        schema = project.test_schema
        run_dbt(["deps"])
        # the scripted deliveries draw nothing: the seed is the random deliveries'
        seed = sampling.seed(14)
        deliveries = Deliveries(seed=seed)
        last_updated: dict = {}
        steps = 0
        for step, live in scripted(deliveries):
            queries: list[str] = []
            self.deliver(deliveries, spark, schema, queries)
            self.check(spark, schema, step, last_updated)
            stored = spark.sql(f"select `_id` from {schema}.f_cd where not `$deleted`").collect()
            assert {row[0] for row in stored} == live, step
            # the first run computes the digest from the edges it wrote; every later
            # run compares the datasets' digest with it first
            assert used_digest(queries) == (steps > 0), step
            steps += 1
        # from the second run on, the merged models read only what changed: the
        # components as they were at their last run (time travel), as of a batch
        followed = {
            re.search(r'"node_id": "model\.test\.(\w+)"', q).group(1)
            for q in queries
            if "f_components version as of" in q
        }
        assert followed == {f"f_{combo}" for combo in self.combos}, (
            "the f_ models followed the change"
        )
        assert not [q for q in queries if "r_components version as of" in q]
        # a delivery that changes nothing: the edges and components write nothing, and
        # the merged models stop after reading the tables' history and write nothing
        # either (an empty batch of dbt-spark's merge is not merged)
        merged = tuple(f"f_{combo}" for combo in self.combos)
        snapshots = self.snapshots(spark, schema, merged)
        self.deliver(deliveries, spark, schema, queries, reference=False)
        self.check(spark, schema, "nothing changed", last_updated)
        assert self.snapshots(spark, schema, merged) == snapshots, "a model without change wrote"
        assert not [q for q in queries if "__dbt_merge_affected" in q or "version as of" in q]
        # no bucket's digest differed: no stored fingerprint was read
        assert used_digest(queries) and not [q for q in queries if "__dbt_merge_changed" in q]
        steps += 1
        # successful components runs since the merged models' last run: after one, the
        # merged models read the ids they held from its rows; after more, by time travel
        components_runs = 0
        # FAILURES, REWRITES, COMPARE_ALL and PLACEHOLDERS are of rounds 0 to 15: later
        # rounds (the long profile's) follow the change with the placeholders' MERGEs
        for round_number in range(sampling.rounds(16, 28)):
            deliveries.random_delivery()
            point = FAILURES.get(round_number)
            # from round PLACEHOLDERS on, the state MERGEs list no keys; in odd rounds
            # the merged models join every record with the affected nodes, as many
            # affected nodes make them (in even rounds each dataset is filtered by them)
            rewrites = round_number in REWRITES
            settings = {
                **({"state_filter_limit": 0} if round_number >= PLACEHOLDERS or rewrites else {}),
                **({"state_rewrite_limit": 0} if rewrites else {}),
                **({"affected_join_rows": 0} if round_number % 2 else {}),
                **({"compare_all_share": 0} if round_number in COMPARE_ALL else {}),
            }
            if round_number == PLACEHOLDERS:
                default_threshold = spark.conf.get(THRESHOLD)
                spark.conf.set(THRESHOLD, LOW_THRESHOLD)
            if point:
                # the run dies at a commit boundary: every table stays readable, and
                # the next run (with the next delivery) catches up
                before = self.snapshots(spark, schema)
                died_in = DIED_IN.get(point)
                branches_before = died_in and self.run_branches(spark, schema, died_in)
                self.deliver_dying(deliveries, spark, schema, queries, settings, point)
                for name in ("f_edges", "f_components", *(f"f_{c}" for c in self.combos)):
                    spark.sql(f"select count(*) from {schema}.{name}").collect()
                if died_in:
                    # the placeholders (and the MERGE) went to the run's own branch: the
                    # table (its main branch) is as it was, and the dead run's branch
                    # is left, ahead of main by the commits the run made
                    assert self.snapshots(spark, schema)[died_in] == before[died_in], point
                    branches = self.run_branches(spark, schema, died_in)
                    (left,) = set(branches) - set(branches_before)
                    main = before[died_in][0][0]
                    made = self.commits_since(spark, schema, died_in, branches[left], main)
                    # a rewrite is one commit on the branch; placeholders and a MERGE two
                    two = point.endswith("_publish") and not rewrites
                    assert made == (2 if two else 1), (point, made)
                if not rewrites and point in (
                    "entity_merge.before_components_merge",
                    "entity_merge.before_components_publish",
                ):
                    # the MERGE raised the threshold and died: the value it replaced
                    # is kept, and the next run puts it back
                    assert spark.conf.get(THRESHOLD) != LOW_THRESHOLD, round_number
                    assert spark.conf.get(SAVED_THRESHOLD, None) == LOW_THRESHOLD, round_number
                components_runs += point == "entity_merge.before_merged"
                steps += 1
                continue
            self.deliver(deliveries, spark, schema, queries, settings)
            self.check(spark, schema, f"random delivery {round_number}", last_updated)
            # after a run that died between the edges' commit and their digest's, the
            # stored digest describes an older snapshot: that run compares every record
            # (and stores a new digest), every other run uses it
            stale = FAILURES.get(round_number - 1) in STALE_DIGEST
            if round_number >= PLACEHOLDERS:
                # both state models inserted their new keys as placeholders first; a
                # batch that says which keys are stored (the components', and the
                # edges' when they read the stored rows of the changed buckets) has
                # them appended without a read of the table
                for model in ("f_edges", "f_components"):
                    inserts = [
                        q
                        for q in queries
                        if re.search(rf"insert into \S+\.{model}\.branch_dbt_merge_\w+ ", q)
                    ]
                    known = model == "f_components" or not stale
                    assert inserts, (round_number, model)
                    assert {"not source.`$stored`" in q for q in inserts} == {known}, (
                        round_number,
                        model,
                    )
                # each MERGE raised the broadcast threshold for its batch (256 bytes a
                # row), and put the session's value back after its commit
                raised = [q for q in queries if re.search(rf"set {THRESHOLD} = \d+$", q.strip())]
                assert len(raised) == 2, (round_number, raised)
                # both batches went to a branch, then main was fast-forwarded to it
                published = [q for q in queries if "system.fast_forward(" in q]
                assert len(published) == 2, (round_number, published)
                assert spark.conf.get(THRESHOLD) == LOW_THRESHOLD, round_number
                assert spark.conf.get(SAVED_THRESHOLD, None) is None, round_number
            if rewrites:
                # the components table was rewritten on the run's branch, which main
                # was fast-forwarded to; its batch was not MERGEd
                rewritten = [
                    q
                    for q in queries
                    if re.search(r"insert overwrite \S+\.f_components\.branch_dbt_merge_\w+\s", q)
                ]
                assert len(rewritten) == 1, round_number
                assert not [q for q in queries if re.search(r"merge into \S+\.f_components", q)]
                published = [q for q in queries if "system.fast_forward(" in q]
                assert len(published) == 2, (round_number, published)
            assert used_digest(queries) != stale, round_number
            components_runs += 1
            old_ids = [q for q in queries if re.search(r"create table \S+__dbt_merge_old_ids ", q)]
            current = [q for q in queries if re.search(r"create table \S+__dbt_merge_current ", q)]
            if round_number in COMPARE_ALL:
                # every entity compared: none of the change-following stages
                assert not old_ids and not current, round_number
                assert not [q for q in queries if "__dbt_merge_affected" in q], round_number
            else:
                assert len(old_ids) == len(self.combos), round_number
                travelled = {"version as of" in q for q in old_ids}
                assert travelled == {components_runs > 1}, round_number
                joined = {"join affected as c" in q for q in current}
                assert joined == {bool(round_number % 2)}, round_number
            components_runs = 0
            steps += 1
        spark.conf.set(THRESHOLD, default_threshold)
        assert steps >= 20, "at least 20 deliveries, 10 of them in runs that died"
        self.assert_every_kind_of_change(deliveries, seed)
        self.assert_row_deletes_compacted(spark, schema)

    @staticmethod
    def assert_row_deletes_compacted(spark, schema: str) -> None:
        """The state tables wrote row-level deletes (Iceberg's merge-on-read), and runs
        compacted them once they piled up: a rewrite that left no delete file."""
        for name in ("f_edges", "f_components"):
            properties = dict(spark.sql(f"show tblproperties {schema}.{name}").collect())
            modes = {properties.get(f"write.{kind}.mode") for kind in ("merge", "update", "delete")}
            assert modes == {"merge-on-read"}, (name, properties)
            snapshots = spark.sql(
                f"select operation, summary from {schema}.{name}.snapshots order by committed_at"
            ).collect()
            deletes = [
                row for row in snapshots if int(row.summary.get("added-position-deletes", 0)) > 0
            ]
            assert deletes, f"{name}: no MERGE wrote position deletes"
            compactions = [
                row
                for row in snapshots
                if row.operation == "replace" and int(row.summary.get("removed-delete-files", 0))
            ]
            assert compactions, f"{name}: no compaction removed the delete files"
            live = spark.sql(f"select count(*) from {schema}.{name}.delete_files").first()[0]
            last = snapshots.index(compactions[-1])
            later = sum(int(row.summary.get("added-delete-files", 0)) for row in snapshots[last:])
            assert live <= later, (name, live, later)

    def test_bad_ids_in_a_change_following_run_write_nothing(self, project, spark):
        """A change-following run checks ids on the records that changed (the same scan
        that finds them): a duplicate or a null id fails the edges model, naming the
        dataset and the id, and leaves the stored edges as they were."""
        schema = project.test_schema
        deliveries = three_deliveries_built(spark, schema, seed=7, select="+f_edges")
        run_dbt(["run", "-s", "f_edges"])  # an incremental run that finds no change
        snapshot = f"select snapshot_id from {schema}.f_edges.snapshots order by committed_at"
        before = spark.sql(snapshot).collect()
        existing = sorted(deliveries.records["a"])[0]
        for bad_id, problem in ((existing, f"the id {existing} 2 times"), (None, "a null id")):
            deliveries.write(spark, schema)
            spark.sql(
                f"insert into {schema}.input_a values "
                f"({'null' if bad_id is None else repr(bad_id)}, 'e9', 1, false)"
            )
            queries: list[str] = []
            results = run_dbt(
                ["run", "-s", "f_edges"], expect_pass=False, callbacks=[sql_recorder(queries)]
            )
            message = results[0].message
            # checked on the staged changed records, not by a scan of every dataset
            assert [q for q in queries if "where node is null or records > 1" in q]
            assert not [q for q in queries if "having entity_id is null" in q]
            assert "entity merge 'm_cd'" in message and "'id_column'" in message, message
            assert f"dataset raw_a (alias a) has {problem}" in message, message
            assert spark.sql(snapshot).collect() == before, "the edges were written"


# the rounds of TestRebuilding: what a run rebuilds ("edges": the edges, and so the
# components; "components": the components alone; None: nothing) and where it dies
REBUILDS = [
    ("edges", None),
    ("components", None),
    ("edges", "entity_merge.before_edges_publish"),
    ("components", "entity_merge.before_components_publish"),
    ("edges", "entity_merge.before_components"),
    (None, None),
    ("edges", "entity_merge.before_digest"),
    ("components", None),
    ("edges", None),
]


class TestRebuilding(Following):
    """A run that rebuilds the state (rebuild_share) leaves what a run that follows the
    change leaves: the merged models equal from-scratch builds after every delivery,
    also after a run that died in a rebuild, and the state tables were replaced (one
    insert overwrite on the run's branch, then published) rather than merged. One merged
    model: a rebuild is of the state the merged models share."""

    combos = {"cd": COMBOS["cd"]}

    def test_rebuilds_equal_from_scratch_builds(self, project, spark):
        schema = project.test_schema
        run_dbt(["deps"])
        seed = sampling.seed(21)
        deliveries = Deliveries(seed=seed)
        for _ in range(4):
            deliveries.random_delivery()
        queries: list[str] = []
        last_updated: dict = {}
        self.deliver(deliveries, spark, schema, queries)
        self.check(spark, schema, "the first run", last_updated)
        prior = self.batches(spark, schema, deliveries)
        for number, (rebuilt, point) in enumerate(REBUILDS):
            deliveries.random_delivery()
            deliveries.insert("a")  # at least one record changes
            share = {"rebuild_share": 0} if rebuilt == "edges" else {}
            os.environ[REBUILD_SHARE_ENV] = "0" if rebuilt else str(NEVER)
            step = f"round {number}: {rebuilt} rebuilt"
            if point:
                before = self.snapshots(spark, schema)
                self.deliver_dying(deliveries, spark, schema, queries, share, point)
                if point in DIED_IN:
                    # the replacing commit went to the run's branch: main is as it was
                    died_in = DIED_IN[point]
                    assert self.snapshots(spark, schema)[died_in] == before[died_in], step
                prior = None
                continue
            self.deliver(deliveries, spark, schema, queries, share)
            self.check(spark, schema, step, last_updated)
            # the rows a rebuild wrote are those a run that writes the changes writes
            current = self.batches(spark, schema, deliveries)
            if prior is not None:
                self.check_batches(prior, current, step)
            prior = current
            replaced = {
                name
                for name in ("f_edges", "f_components")
                for q in queries
                if re.search(rf"insert overwrite \S+\.{name}\.branch_dbt_merge_\w+\s", q)
                and "left anti join" not in q
            }
            merged = {
                name
                for name in ("f_edges", "f_components")
                for q in queries
                if re.search(rf"merge into \S+\.{name}[\s.]", q)
            }
            expected = {"edges": {"f_edges", "f_components"}, "components": {"f_components"}}
            assert replaced == expected.get(rebuilt, set()), (step, replaced)
            assert not replaced & merged, (step, merged)

    @staticmethod
    def batches(spark, schema: str, deliveries: Deliveries) -> tuple:
        """The input records, and the batch of every edges row and components row (with
        the component), as a run left them."""
        edges = spark.sql(f"select src, dst, `_batch` from {schema}.f_edges").collect()
        components = spark.sql(
            f"select node, component, `_batch` from {schema}.f_components"
        ).collect()
        return (
            copy.deepcopy(deliveries.records),
            {(row[0], row[1]): row[2] for row in edges},
            {row[0]: (row[1], row[2]) for row in components},
        )

    @staticmethod
    def check_batches(prior: tuple, current: tuple, step: str) -> None:
        """Between two runs that did not die: every row of a record that changed, and
        every node whose component changed (or whose record changed, or that is new), is
        of the new batch; every other row keeps its batch."""
        records, edges, components = current
        before_records, before_edges, before_components = prior
        changed = {
            f"{offset}|{key}"
            for offset, name in enumerate(DATASETS)
            for key in before_records[name].keys() | records[name].keys()
            if before_records[name].get(key) != records[name].get(key)
        }
        newest = max(edges.values())
        for (src, dst), batch in edges.items():
            expected = newest if src in changed else before_edges.get((src, dst))
            assert batch == expected, (step, src, dst, batch, expected)
        newest = max(batch for _, batch in components.values())
        for node, (component, batch) in components.items():
            old = before_components.get(node)
            written = old is None or old[0] != component or node in changed
            expected = newest if written else old[1]
            assert batch == expected, (step, node, component, batch, old)

    def test_a_bad_rebuild_share_or_bad_ids_in_a_rebuild_write_nothing(self, project, spark):
        """A rebuild_share that is not a share fails the model that reads it, naming
        the model (or the environment variable), the setting and the value; a rebuild
        checks every record's id. Nothing is written."""
        schema = project.test_schema
        deliveries = three_deliveries_built(spark, schema, seed=9, select="+f_components")
        deliveries.insert("a")
        deliveries.write(spark, schema)
        before = self.snapshots(spark, schema)
        results = run_dbt(
            ["run", "-s", "f_edges", "--vars", json.dumps({"dbt_merge_rebuild_share": -1})],
            expect_pass=False,
        )
        message = results[0].message
        assert "model f_edges" in message and "'rebuild_share'" in message, message
        assert "got -1" in message, message
        os.environ[REBUILD_SHARE_ENV] = "most"
        try:
            results = run_dbt(["run", "-s", "f_components"], expect_pass=False)
        finally:
            os.environ[REBUILD_SHARE_ENV] = str(NEVER)
        message = results[0].message
        assert f"the environment variable {REBUILD_SHARE_ENV}" in message, message
        assert "'rebuild_share'" in message and "got 'most'" in message, message
        assert self.snapshots(spark, schema)["f_components"] == before["f_components"]
        # so does a state_compaction that is not a dict of shares, in either state model
        bad = {"dbt_merge_state_compaction": {"deleted_ratio": "most"}}
        for name in ("f_edges", "f_components"):
            results = run_dbt(["run", "-s", name, "--vars", json.dumps(bad)], expect_pass=False)
            message = results[0].message
            assert f"model {name}" in message and "'state_compaction'" in message, message
            assert "'deleted_ratio': 'most'" in message, message
        assert self.snapshots(spark, schema) == before, "a bad state_compaction wrote"
        # a rebuild reads every record: a duplicate id fails it, naming the dataset
        edges = self.snapshots(spark, schema)["f_edges"]
        existing = sorted(deliveries.records["a"])[0]
        spark.sql(f"insert into {schema}.input_a values ({existing!r}, 'e9', 1, false)")
        results = run_dbt(
            ["run", "-s", "f_edges", "--vars", json.dumps({"dbt_merge_rebuild_share": 0})],
            expect_pass=False,
        )
        message = results[0].message
        assert f"dataset raw_a (alias a) has the id {existing} 2 times" in message, message
        assert self.snapshots(spark, schema)["f_edges"] == edges, "the edges were written"


CHANGE_SCHEMAS = {
    "t": "_id string, email string, updated_at timestamp",
    "u": "_id string, email string",
}


class TestChangeColumns(InstallsDbtMerge):
    """A dataset declared in change_columns is read from the largest change mark stored
    on: a change that moves its column forward is seen, one that does not is not, nor
    is a record gone from it (as the README says); the other datasets are compared in
    full. A --full-refresh then sees everything."""

    @pytest.fixture(scope="class")
    def models(self):
        models = {
            f"raw_{name}.sql": (
                "{{ config(materialized='view') }} "
                f"select * from {{{{ target.schema }}}}.input_{name}"
            )
            for name in CHANGE_SCHEMAS
        }
        models["c_edges.sql"] = (
            "{{ config(materialized='incremental', incremental_strategy='entity_state') }}\n"
            "{{ dbt_merge.equality_edges('m_ch') }}"
        )
        models["c_components.py"] = (
            "from dbt_merge.entity_merge import entity_components\n\n\n"
            "def model(dbt, session):\n"
            "    dbt.config(materialized='incremental', incremental_strategy='entity_state')\n"
            # the table as a DataFrame, the form before the table by name: still works
            "    previous = session.table(str(dbt.this)) if dbt.is_incremental else None\n"
            "    return entity_components(dbt.ref('c_edges'), previous=previous)\n"
        )
        models["c_merged.sql"] = (
            "{{ config(materialized='incremental', incremental_strategy='merge',"
            " unique_key='_id') }}\n"
            "{{ dbt_merge.merge_entities('m_ch', ref('c_components')) }}"
        )
        return models

    @pytest.fixture(scope="class")
    def project_config_update(self):
        merge = {
            "datasets": ["raw_t t", "raw_u u"],
            "equality_sets": [["t.email", "u.email"]],
            "change_columns": {"t": "updated_at"},
        }
        return {**merge_vars(m_ch=merge), "models": {"+file_format": "iceberg"}}

    @staticmethod
    def deliver(spark, schema: str, t_rows: list[tuple], u_rows: list[tuple], *args: str):
        for name, rows in (("t", t_rows), ("u", u_rows)):
            frame = spark.createDataFrame(rows, CHANGE_SCHEMAS[name])
            frame.writeTo(f"{schema}.input_{name}").using("iceberg").createOrReplace()
        queries: list[str] = []
        run_dbt(["run", *args], callbacks=[sql_recorder(queries)])
        live = spark.sql(f"select `_id` from {schema}.c_merged where not `$deleted`").collect()
        return {row[0] for row in live}, queries

    def test_a_change_column_limits_what_is_read(self, project, spark):
        schema = project.test_schema
        run_dbt(["deps"])
        day = [dt.datetime(2026, 1, d) for d in (1, 2, 3)]
        t1, t2, t3 = ("t1", "e1", day[0]), ("t2", "e2", day[0]), ("t3", "e3", day[0])
        u = [("u1", "e1"), ("u2", "e3")]
        live, _ = self.deliver(spark, schema, [t1, t2, t3], u)
        assert live == {"0|t1|1|u1", "0|t2", "0|t3|1|u2"}

        # t2 takes e1 and moves its change column forward: read, and t2 joins t1 + u1
        t2 = ("t2", "e1", day[1])
        live, queries = self.deliver(spark, schema, [t1, t2, t3], u)
        assert live == {"0|t1|0|t2|1|u1", "0|t3|1|u2"}
        detect = [q for q in queries if "c_edges__dbt_merge_changed" in q and "count_if" in q]
        assert detect and ">= timestamp_micros(" in detect[0], "t was read from its mark on"

        # t3 changes without moving its change column (behind the mark: not read, not
        # seen), t1 is hard-deleted from t (not seen); u2 is hard-deleted from u, which
        # is compared in full: seen, so t3 leaves u2
        live, _ = self.deliver(spark, schema, [t2, ("t3", "e9", day[0])], u[:1])
        assert live == {"0|t1|0|t2|1|u1", "0|t3"}
        edges = spark.sql(
            f"select dst from {schema}.c_edges where src = '0|t3' and dst like '=%'"
        ).collect()
        assert [row[0] for row in edges] == ["=0:string:e3"], "t3's change was not read"

        # a --full-refresh reads everything again
        live, _ = self.deliver(spark, schema, [t2, ("t3", "e9", day[0])], u[:1], "--full-refresh")
        assert live == {"0|t2|1|u1", "0|t3"}
        # every edges row of a t record carries its change column (as microseconds), a u
        # record none
        marks = spark.sql(
            f"select src, change_mark, (select max(unix_micros(updated_at)) from {schema}.input_t"
            f" where concat('0|', _id) = src) from {schema}.c_edges where src = dst"
        ).collect()
        assert {row[0]: row[1] for row in marks} == {row[0]: row[2] for row in marks}
        assert sorted(row[0] for row in marks if row[1] is not None) == ["0|t2", "0|t3"]
