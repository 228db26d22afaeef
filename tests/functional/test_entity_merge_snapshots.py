"""A merge that follows the change over datasets that are Iceberg tables: each run reads
a table dataset at its current snapshot, which the edges' digest records, and the next
run does not read a dataset whose snapshot has not moved (a run where none moved reads
no record). A view is read every run. A table rewritten with the same records, or
rolled back to an earlier snapshot, has a snapshot the digest does not describe: it is
read again. After every run the merged model equals a from-scratch build.

The merged model finds what changed since its rows were written from the history of its
own table: a rollback or a compaction of it, or a rollback of the components, does not
hide a change, and when the components' snapshot it was built from has expired it
compares every entity (TestStateHistory)."""

from __future__ import annotations

import re

import pytest
from dbt.tests.util import run_dbt

from tests.functional.entity_merge_fixtures import (
    NEVER,
    InstallsDbtMerge,
    Recorder,
    expire_all_but_current,
    merge_vars,
)
from tests.functional.test_entity_merge import sql_recorder

ROWS = {
    "a": [("a1", "e1"), ("a2", "e2"), ("a3", "e3")],
    "b": [("b1", "e1"), ("b2", "e4"), ("b3", None)],
    "v": [("v1", "e2"), ("v2", "e5")],
}
STATE = "{{ config(materialized='incremental', incremental_strategy='entity_state') }}\n"


def snapshot_models() -> dict[str, str]:
    """The models: a change-following merge and its from-scratch build."""
    return {
        # two Iceberg tables and a view over a table the test writes
        "a.sql": "select * from {{ target.schema }}.input_a",
        "b.sql": "select * from {{ target.schema }}.input_b",
        "raw_v.sql": (
            "{{ config(materialized='view') }} select * from {{ target.schema }}.input_v"
        ),
        "s_edges.sql": STATE + "{{ dbt_merge.equality_edges('m') }}",
        "s_components.py": (
            "from dbt_merge.entity_merge import entity_components\n\n\n"
            "def model(dbt, session):\n"
            "    dbt.config(materialized='incremental', incremental_strategy='entity_state')\n"
            "    previous = dbt.this if dbt.is_incremental else None\n"
            "    return entity_components(dbt.ref('s_edges'), previous=previous)\n"
        ),
        "s_merged.sql": (
            "{{ config(materialized='incremental', incremental_strategy='merge',"
            " unique_key='_id') }}\n"
            "{{ dbt_merge.merge_entities('m', ref('s_components')) }}"
        ),
        # the from-scratch build of the same inputs
        "r_edges.sql": "{{ dbt_merge.equality_edges('m') }}",
        "r_components.py": (
            "from dbt_merge.entity_merge import entity_components\n\n\n"
            "def model(dbt, session):\n"
            "    dbt.config(materialized='table')\n"
            "    return entity_components(dbt.ref('r_edges'))\n"
        ),
        "r_merged.sql": "{{ dbt_merge.merge_entities('m', ref('r_components')) }}",
    }


class SnapshotMerge(InstallsDbtMerge):
    """The project: a change-following merge over two Iceberg tables and a view, and the
    from-scratch build of the same inputs."""

    @pytest.fixture(scope="class")
    def models(self):
        return snapshot_models()

    @pytest.fixture(scope="class")
    def project_config_update(self):
        merge = {
            "datasets": ["a a", "b b", "raw_v v"],
            "equality_sets": [["a.email", "b.email", "v.email"]],
        }
        # deliveries here change a large share of few records: the edges compare them
        # (no rebuild), as they do a small share of many
        variables = {**merge_vars(m=merge)["vars"], "dbt_merge_rebuild_share": NEVER}
        return {
            "vars": variables,
            "models": {"+file_format": "iceberg", "+materialized": "table"},
        }

    @staticmethod
    def snapshot(spark, table: str) -> str:
        return str(
            spark.sql(
                f"select snapshot_id from {table}.history where is_current_ancestor"
                " order by made_current_at desc limit 1"
            ).first()[0]
        )

    @staticmethod
    def follow(spark, schema: str) -> dict[str, list[str]]:
        """A run of the change-following models, then the from-scratch build, which
        the merged model must equal (every live entity); returns the statements of
        the change-following edges, by the stage they make (or 'merge')."""
        queries: list[str] = []
        run_dbt(
            ["run", "-s", "s_edges", "s_components", "s_merged"], callbacks=[sql_recorder(queries)]
        )
        run_dbt(["run", "-s", "r_edges", "r_components", "r_merged"])
        columns = "`_id`, `$ids`, entity"
        follow, scratch = (
            spark.sql(f"select {columns} from {schema}.{name} where not `$deleted`").collect()
            for name in ("s_merged", "r_merged")
        )
        assert sorted(follow) == sorted(scratch), "the merged model differs from scratch"
        stages: dict[str, list[str]] = {}
        for query in queries:
            found = re.search(r"create table \S+\.s_edges__dbt_merge_(\w+) ", query)
            if found:
                stages.setdefault(found.group(1), []).append(query)
        return stages

    @staticmethod
    def write_inputs(spark, schema: str) -> None:
        for name, rows in ROWS.items():
            frame = spark.createDataFrame(rows, "_id string, email string")
            frame.writeTo(f"{schema}.input_{name}").using("iceberg").createOrReplace()

    @staticmethod
    def live(spark, table: str) -> set[str]:
        """The ids of the live entities of a merged table."""
        return {
            row[0] for row in spark.sql(f"select `_id` from {table} where not `$deleted`").collect()
        }


class TestDatasetSnapshots(SnapshotMerge):
    @staticmethod
    def reads(stage: list[str], schema: str, name: str) -> str | None:
        """How the stage reads the dataset name: 'pinned' (at a snapshot), 'current', or
        None when it does not."""
        text = " ".join(stage)
        if re.search(rf"{schema}\.{name} version as of \d+ as ", text):
            return "pinned"
        if re.search(rf"{schema}\.{name} as ", text):
            return "current"
        return None

    def test_a_dataset_whose_snapshot_has_not_moved_is_not_read(self, project, spark):
        schema = project.test_schema
        self.write_inputs(spark, schema)
        run_dbt(["deps"])
        run_dbt(["run", "-s", "a", "b", "raw_v"])
        self.follow(spark, schema)
        digest = f"{schema}.s_edges__dbt_merge_digest"

        def recorded() -> dict:
            found = spark.sql(
                f"show tblproperties {digest} ('dbt_merge.dataset_snapshots')"
            ).first()[1]
            return dict(re.findall(r'"(\d)": "(\d+)"', found))

        # the first run recorded the snapshot of each table (not of the view)
        assert recorded() == {
            "0": self.snapshot(spark, f"{schema}.a"),
            "1": self.snapshot(spark, f"{schema}.b"),
        }

        # nothing changed: only the view is read, and no record is compared
        edges_before = self.snapshot(spark, f"{schema}.s_edges")
        stages = self.follow(spark, schema)
        assert set(stages) == {"buckets"}, set(stages)
        assert [self.reads(stages["buckets"], schema, n) for n in ("a", "b", "raw_v")] == [
            None,
            None,
            "current",
        ]
        assert self.snapshot(spark, f"{schema}.s_edges") == edges_before, "the edges were written"

        # b changes: b is read at its new snapshot, a is not; b2 joins a1 and b1
        spark.sql(f"update {schema}.b set email = 'e1' where _id = 'b2'")
        b_snapshot = self.snapshot(spark, f"{schema}.b")
        stages = self.follow(spark, schema)
        assert {"buckets", "changed"} <= set(stages), set(stages)
        # the datasets are read by the digest (buckets) and by the comparison of the
        # records of the buckets that differ (changed)
        for stage in ("buckets", "changed"):
            assert self.reads(stages[stage], schema, "a") is None, stage
            assert self.reads(stages[stage], schema, "b") == "pinned", stage
        assert f"{schema}.b version as of {b_snapshot} as b" in " ".join(stages["buckets"])
        live = spark.sql(f"select `_id` from {schema}.s_merged where not `$deleted`").collect()
        assert "0|a1|1|b1|1|b2" in {row[0] for row in live}
        assert recorded()["1"] == b_snapshot

        # a is rewritten with the same records: read once (a new snapshot), nothing
        # written, and its new snapshot recorded; then not read again
        spark.sql(f"insert overwrite {schema}.a select * from {schema}.a")
        a_snapshot = self.snapshot(spark, f"{schema}.a")
        edges_before = self.snapshot(spark, f"{schema}.s_edges")
        stages = self.follow(spark, schema)
        assert set(stages) == {"buckets"}, set(stages)
        assert self.reads(stages["buckets"], schema, "a") == "pinned"
        assert self.snapshot(spark, f"{schema}.s_edges") == edges_before, "the edges were written"
        assert recorded() == {"0": a_snapshot, "1": b_snapshot}
        stages = self.follow(spark, schema)
        assert self.reads(stages["buckets"], schema, "a") is None

        # b rolled back to before its change: an earlier snapshot, read again, and b2
        # leaves the entity it joined
        before_change = spark.sql(
            f"select parent_id from {schema}.b.snapshots where snapshot_id = {b_snapshot}"
        ).first()[0]
        spark.sql(f"call spark_catalog.system.rollback_to_snapshot('{schema}.b', {before_change})")
        stages = self.follow(spark, schema)
        assert self.reads(stages["buckets"], schema, "b") == "pinned"
        live = spark.sql(f"select `_id` from {schema}.s_merged where not `$deleted`").collect()
        assert "0|a1|1|b1" in {row[0] for row in live}
        assert recorded()["1"] == str(before_change)


class TestStateHistory(SnapshotMerge):
    @pytest.fixture(scope="class")
    def models(self):
        # the merged records of the components as they are, from scratch
        return {
            **snapshot_models(),
            "c_merged.sql": "{{ dbt_merge.merge_entities('m', ref('s_components')) }}",
        }

    def test_rollbacks_and_compactions_hide_no_change(self, project, spark):
        schema = project.test_schema
        merged, components = f"{schema}.s_merged", f"{schema}.s_components"
        self.write_inputs(spark, schema)
        run_dbt(["deps"])
        following = ["run", "-s", "s_edges", "s_components", "s_merged"]
        run_dbt(["run", "-s", "a", "b", "raw_v"])
        run_dbt(following)
        built = self.snapshot(spark, merged)

        # b2 joins a1 and b1; then the merged table is rolled back to before that run:
        # made current after the components' last commit, its rows are older, and the
        # next run writes the join again
        spark.sql(f"update {schema}.b set email = 'e1' where _id = 'b2'")
        run_dbt(following)
        assert "0|a1|1|b1|1|b2" in self.live(spark, merged)
        spark.sql(f"call spark_catalog.system.rollback_to_snapshot('{merged}', {built})")
        assert "0|a1|1|b1|1|b2" not in self.live(spark, merged)
        self.follow(spark, schema)
        assert "0|a1|1|b1|1|b2" in self.live(spark, merged)

        # a3 joins v2 in the components, not yet in the merged table, which is then
        # compacted (an Iceberg 'replace' of the same rows, committed after the
        # components): the next run writes the join
        unjoined = self.snapshot(spark, components)
        spark.sql(f"update {schema}.a set email = 'e5' where _id = 'a3'")
        run_dbt(["run", "-s", "s_edges", "s_components"])
        spark.sql(
            f"call spark_catalog.system.rewrite_data_files(table => '{merged}',"
            " options => map('rewrite-all', 'true'))"
        )
        operation = spark.sql(
            f"select operation from {merged}.snapshots"
            f" where snapshot_id = {self.snapshot(spark, merged)}"
        ).first()[0]
        assert operation == "replace", operation
        self.follow(spark, schema)
        assert "0|a3|2|v2" in self.live(spark, merged)

        # the components rolled back past the snapshot the merged table was built
        # from (to before a3 joined v2): the merged table follows them as they are
        spark.sql(f"call spark_catalog.system.rollback_to_snapshot('{components}', {unjoined})")
        run_dbt(["run", "-s", "s_merged", "c_merged"])
        follow, scratch = (
            self.live(spark, f"{schema}.{name}") for name in ("s_merged", "c_merged")
        )
        assert follow == scratch
        assert {"0|a3", "2|v2"} <= follow and "0|a3|2|v2" not in follow

        # the components' snapshots expired up to their current one, after a run the
        # merged table has not read (a3 joins a2 and v1): the snapshot the merged table
        # was built from is gone, so it compares every entity (it stages no affected
        # nodes), and equals the merged records of the components built from scratch
        spark.sql(f"update {schema}.a set email = 'e2' where _id = 'a3'")
        run_dbt(["run", "-s", "s_edges", "s_components"])
        expire_all_but_current(spark, components)
        recorded = Recorder()
        run_dbt(["run", "-s", "s_merged", "c_merged"], callbacks=[recorded])
        queries = recorded.queries
        assert not [q for q in queries if "s_merged__dbt_merge_affected" in q]
        # and the log says why
        said = recorded.messages
        assert [m for m in said if "s_merged" in m and "keeps no snapshot" in m], said
        follow, scratch = (
            self.live(spark, f"{schema}.{name}") for name in ("s_merged", "c_merged")
        )
        assert follow == scratch
        assert "0|a2|0|a3|2|v1" in follow
        # and the run after it follows the change again: a3 leaves them
        spark.sql(f"update {schema}.a set email = 'e3' where _id = 'a3'")
        queries.clear()
        run_dbt(
            ["run", "-s", "s_edges", "s_components", "s_merged", "c_merged"],
            callbacks=[sql_recorder(queries)],
        )
        assert [q for q in queries if "s_merged__dbt_merge_affected" in q]
        follow, scratch = (
            self.live(spark, f"{schema}.{name}") for name in ("s_merged", "c_merged")
        )
        assert follow == scratch
        assert {"0|a2|2|v1", "0|a3"} <= follow
