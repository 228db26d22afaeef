"""Two processes that commit to one Iceberg table (SPEC §5, README "Guarantees").

The test run's session and another process (its own JVM, `other_writer.py`) write to
the same upsert table. Iceberg commits optimistically: a write that was planned on a
snapshot another process has since replaced fails its commit validation. The dbt run
then fails cleanly (nothing of it is stored: no table change, no provenance event), and
`dbt retry` completes it on top of the other process's commit, as if the two had run
one after the other. An entity merge's edges and components models fail without
writing when the other process stands for another run of the merge that committed a
new key first (the components' also when it committed while their Python step ran).
"""

from __future__ import annotations

import json
import os

import pytest
from dbt.tests.util import run_dbt

from tests.conftest import WAREHOUSE, dbt_env
from tests.functional.entity_merge_fixtures import NEVER, InstallsDbtMerge, merge_vars
from tests.functional.other_writer import OtherWriter
from tests.functional.test_entity_merge_following import (
    declaration,
    follow_models,
    settings_env,
    three_deliveries_built,
)
from tests.functional.test_upsert import AUDITED_MODELS, events, table

# a statement of the other run that the components model below has the other process
# commit while its Python step runs (after its batch is computed, before its strategy)
OTHER_RUN = "DBT_MERGE_TEST_OTHER_RUN"
# the other process of this module's tests, while they run (the fixture below)
OTHER: OtherWriter | None = None


@pytest.fixture(scope="module", autouse=True)
def other_writer(tmp_path_factory):
    """The other process: one for every statement of the module, started before the
    first project so that its JVM starts while dbt works."""
    global OTHER
    OTHER = OtherWriter(WAREHOUSE, tmp_path_factory.mktemp("other_writer") / "stderr.log")
    yield OTHER
    OTHER.close()
    OTHER = None


def other_process(statement: str) -> list[str]:
    """Run statement in the other process (it must succeed); returns its rows."""
    assert OTHER is not None, "the other process runs during this module's tests"
    return OTHER.run(statement)


def commit_elsewhere(spark, table: str, statement: str) -> None:
    """The other process commits statement while this session goes on planning on the
    snapshot of table it has read. Iceberg's catalog cache forgets a table 30 s after
    its last read (`cache.expiration-interval-ms`), and the other process can take that
    long on a busy machine (its JVM may still be starting): table is read here every
    few seconds until it is done."""
    assert OTHER is not None, "the other process runs during this module's tests"
    OTHER.run(statement, while_waiting=lambda: spark.table(table).schema)
    spark.table(table).schema  # noqa: B018 - the read keeps the cached snapshot


def snapshots(spark, schema, name) -> list[tuple[int, str]]:
    """(snapshot id, the Spark application that committed it), oldest first."""
    return [
        (r.snapshot_id, r.app)
        for r in spark.sql(
            f"select snapshot_id, summary['spark.app.id'] as app"
            f" from {schema}.{name}.snapshots order by committed_at"
        ).collect()
    ]


class TestTwoWritersOnOneTable(InstallsDbtMerge):
    @pytest.fixture(scope="class")
    def models(self):
        return AUDITED_MODELS

    def test_a_conflicting_commit_fails_cleanly_and_its_retry_succeeds(self, project, spark):
        schema = project.test_schema
        run_dbt(["deps"])
        run_dbt(["run", "--vars", json.dumps({"batch": 1})])
        assert table(spark, schema, "audited") == [
            (1, 2, "name_2", "price_2"),
            (2, 7, "y", None),
            (3, 2, "name_1", None),
            (4, 5, "s", None),
        ]
        events_before = set(events(spark, schema, "audited"))
        ours = snapshots(spark, schema, "audited")
        this_app = spark.sparkContext.applicationId

        # the other process commits while this session still plans on the snapshot it
        # has read (Iceberg's catalog cache, as a long-running session would)
        commit_elsewhere(
            spark,
            f"{schema}.audited",
            f"update other.{schema}.audited set name = 'other' where id = 1",
        )

        # --write-json: `dbt retry` below reads the run_results.json of this run
        results = run_dbt(
            ["run", "--write-json", "--vars", json.dumps({"batch": 2})], expect_pass=False
        )
        failed = next(r for r in results if r.node.name == "audited")
        message = " ".join(str(failed.message).split())
        assert failed.status == "error"
        assert "ValidationException" in message and "conflicting files" in message, message

        spark.sql(f"refresh table {schema}.audited")
        after_other = snapshots(spark, schema, "audited")
        assert after_other[:-1] == ours and after_other[-1][1] != this_app, (
            "one new snapshot, the other process's: the failed run stored nothing"
        )
        assert table(spark, schema, "audited") == [
            (1, 2, "other", "price_2"),
            (2, 7, "y", None),
            (3, 2, "name_1", None),
            (4, 5, "s", None),
        ], "the table is readable, at the other process's commit"
        assert set(events(spark, schema, "audited")) == events_before, "no event of its own"

        retried = run_dbt(["retry"])
        assert [r.node.name for r in retried] == ["audited"]
        assert table(spark, schema, "audited") == [
            (1, 2, "other", "price_2"),
            (2, 7, "y", None),
            (3, 2, "name_1", None),
            (4, 5, "s", None),
            (5, 1, "new", None),
        ], "batch 2 applied on top of the other process's commit"
        new = [r for r in events(spark, schema, "audited") if r not in events_before]
        assert sorted((r.event_type, r.record_key) for r in new) == [
            ("CREATE", "5"),
            ("UPDATE", "1"),
        ], "the other process's change and the retried run's, each recorded once"
        update = next(r for r in new if r.event_type == "UPDATE")
        assert (json.loads(update.old_row)["name"], json.loads(update.new_row)["name"]) == (
            "name_2",
            "other",
        )
        retried_snapshots = snapshots(spark, schema, "audited")
        assert retried_snapshots[:-1] == after_other and retried_snapshots[-1][1] == this_app


class TestTwoRunsOfOneEntityMerge(InstallsDbtMerge):
    """Two runs of one change-following entity merge at once (README "Guarantees"). The
    other process stands for the other run: it commits the edge of a new record to
    itself while this session still plans on the snapshot it read (Iceberg's catalog
    cache). A batch written in one MERGE fails its commit validation; a batch of more
    keys than the state filter lists, whose placeholders and MERGE go to a branch,
    fails before its branch is published (an append alone is not validated: before
    the branch, this stored the key twice). Either way the next run stores the key
    once. The components model is also checked against a commit of the other run made
    while its Python step ran (after its read): both paths refuse to write over it."""

    @pytest.fixture(scope="class")
    def models(self):
        models = follow_models()
        # the components model as users write it, and, when the test names a statement,
        # the other run commits it once this run's batch is computed; this session then
        # sees that commit, as a run on a cluster would (no stale catalog cache)
        models["f_components.py"] = (
            "import os\n\n"
            "from dbt_merge.entity_merge import entity_components\n"
            "from tests.functional.test_concurrent_writers import other_process\n\n\n"
            "def model(dbt, session):\n"
            "    dbt.config(materialized='incremental', incremental_strategy='entity_state')\n"
            "    previous = dbt.this if dbt.is_incremental else None\n"
            "    batch = entity_components(dbt.ref('f_edges'), previous=previous).cache()\n"
            "    batch.count()\n"
            f"    statement = os.environ.get({OTHER_RUN!r})\n"
            "    if statement:\n"
            "        other_process(statement)\n"
            "        session.sql(f'refresh table {dbt.this}')\n"
            "    return batch\n"
        )
        return models

    @pytest.fixture(scope="class")
    def project_config_update(self):
        # a new record here is a large share of few: the edges compare the records (no
        # rebuild, but where a test says so)
        variables = {
            **merge_vars(m_cd=declaration("composite", "default"))["vars"],
            "dbt_merge_rebuild_share": NEVER,
        }
        return {"vars": variables, "models": {"+file_format": "iceberg"}}

    @staticmethod
    def collide(project, spark, seed: int, settings: dict) -> tuple[bool, str, int]:
        """A run of +f_edges (with the f_ models' settings, settings_env) after the other
        process committed the edge of a new record to itself, then a plain one. Returns
        whether the colliding run succeeded, its edges model's message, and how often
        the edge is stored."""
        schema = project.test_schema
        deliveries = three_deliveries_built(spark, schema, seed=seed, select="+f_edges")
        record = deliveries.insert("a")
        deliveries.write(spark, schema)
        node = f"0|{record['_id']}"
        # the other run commits the new record's edge to itself first
        commit_elsewhere(
            spark,
            f"{schema}.f_edges",
            f"insert into other.{schema}.f_edges select '{node}', '{node}', fingerprint,"
            f" `_batch`, declaration, change_mark from other.{schema}.f_edges limit 1",
        )
        with dbt_env(settings_env(settings)):
            results = run_dbt(["run", "-s", "+f_edges"], expect_pass=None)
            edges = next(r for r in results if r.node.name == "f_edges")
            run_dbt(["run", "-s", "+f_edges"])
        spark.sql(f"refresh table {schema}.f_edges")
        stored = spark.sql(
            f"select count(*) from {schema}.f_edges where src = '{node}' and dst = '{node}'"
        ).first()[0]
        return edges.status == "success", " ".join(str(edges.message).split()), stored

    def test_a_batch_in_one_merge_fails_its_commit_then_stores_the_key_once(self, project, spark):
        succeeded, message, stored = self.collide(project, spark, seed=3, settings={})
        assert not succeeded and "ValidationException" in message, message
        assert stored == 1, f"the new key is stored {stored} times"

    @pytest.mark.parametrize(
        "seed, settings",
        [
            # this run lists no keys in its MERGE (as a batch over 20,000 keys does): its
            # new keys are appended as placeholders first, on a branch of the run's own
            (4, {"state_filter_limit": 0}),
            # this run rebuilds the edges: every row, one overwrite on such a branch
            (6, {"rebuild_share": 0}),
        ],
        ids=["placeholders", "rebuild"],
    )
    def test_a_batch_on_a_branch_is_not_published_over_another_runs_commit(
        self, project, spark, seed, settings
    ):
        succeeded, message, stored = self.collide(project, spark, seed, settings)
        assert not succeeded and "another writer committed" in message, message
        assert "nothing of this run's batch was written" in message, message
        assert stored == 1, f"the new key is stored {stored} times"
        branches = spark.sql(
            f"select name from {project.test_schema}.f_edges.refs where type = 'BRANCH'"
            " and name != 'main'"
        ).collect()
        assert branches == [], "the branches of both runs were dropped"

    def test_a_components_batch_is_not_written_over_a_commit_made_while_it_was_computed(
        self, project, spark
    ):
        # the components model is given its table by name: it reads one snapshot and its
        # batch says which; the other run commits a row of the new record's node after
        # that read, before this run's strategy starts (on a cluster, in the seconds of
        # the Python step). Neither a batch in one MERGE (which Iceberg validates only
        # from the snapshot it is planned on, the other run's) nor a batch on a branch
        # may be written over it
        schema = project.test_schema
        deliveries = three_deliveries_built(spark, schema, seed=5, select="+f_components")
        columns = spark.table(f"{schema}.f_components").columns
        nodes = []
        for settings in ({}, {"state_filter_limit": 0}):
            record = deliveries.insert("a")
            deliveries.write(spark, schema)
            node = f"0|{record['_id']}"
            with dbt_env(settings_env(settings)):
                run_dbt(["run", "-s", "+f_edges"])
                values = {"node": f"'{node}'", "component": "'other'"}
                row = ", ".join(values.get(c, f"`{c}`") for c in columns)
                os.environ[OTHER_RUN] = (
                    f"insert into other.{schema}.f_components"
                    f" select {row} from other.{schema}.f_components limit 1"
                )
                try:
                    results = run_dbt(["run", "-s", "f_components"], expect_pass=False)
                finally:
                    del os.environ[OTHER_RUN]
                message = " ".join(str(results[0].message).split())
                assert "another writer committed" in message, (settings, message)
                assert "nothing of this run's batch was written" in message, (settings, message)
                stored = spark.sql(
                    f"select component from {schema}.f_components where node = '{node}'"
                ).collect()
                assert [r.component for r in stored] == ["other"], (settings, stored)
                run_dbt(["run", "-s", "f_components"])
            nodes.append(node)
        # the runs after them stored each node once, with the component a build from
        # scratch gives it
        run_dbt(["run", "-s", "+r_components"])
        spark.sql(f"refresh table {schema}.f_components")
        for node in nodes:
            stored, expected = (
                spark.sql(f"select component from {schema}.{name} where node = '{node}'").collect()
                for name in ("f_components", "r_components")
            )
            assert len(stored) == 1 and stored == expected, (node, stored, expected)
