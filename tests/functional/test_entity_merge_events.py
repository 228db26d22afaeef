"""A merge that follows the change of an upsert model: the pipeline upserts → entity
merge (SPEC §1 'Change-driven runs', §5 provenance). Dataset a of the merge is an upsert
model with provenance=true keyed by the merge's id column, so a change-following edges
run finds a's changed records from the upsert's events (the versions after the one its
digest describes) instead of hashing every record of a.

Proven as the other change-following runs are, over random deliveries that change a
every time: after every delivery the merged model equals a from-scratch build, the state
tables hold what the from-scratch ones hold, and the edges rows and components rows a
run wrote are exactly those of the records that changed (joins and splits of
components are the property test's, tests/functional/test_entity_merge_following.py).
Where the events may not hold a's change, the run hashes a instead, with the same
results: a write to a outside the upsert (the events are behind), a rebuild of the
upsert (--full-refresh: its events do not show the keys it dropped), its versions
expired past the one the last run read, and a run of the upsert that died after its
MERGE and before its events.
"""

from __future__ import annotations

import copy
import os
import re

import pytest
from dbt.tests.util import run_dbt

from tests import sampling
from tests.functional import test_entity_merge_following as following
from tests.functional.entity_merge_fixtures import expire_all_but_current
from tests.functional.test_entity_merge import sql_recorder
from tests.functional.test_entity_merge_following import (
    COMBOS,
    SCHEMAS,
    Deliveries,
    Following,
    follow_models,
)

# what the rows of a run are checked with (not imported by name: pytest would collect
# the test class here too)
Rebuilding = following.TestRebuilding

# dataset a's upsert: every record of a delivery (an unchanged one records no event)
# and a delete row for each record gone since the last
UPSERT_A = (
    "{{ config(materialized='incremental', incremental_strategy='upsert', unique_key='_id',"
    " merge_mode='commit_time_ordering', delete_column='_removed', provenance=true,"
    " file_format='iceberg') }}\n"
    "select * from {{ target.schema }}.batch_a"
)


class UpsertDeliveries(Deliveries):
    """Deliveries whose dataset a reaches the merge through an upsert: each write puts
    a's records and the delete rows of those gone into the upsert's batch."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.written_a: set[str] = set()

    def write(self, spark, schema: str) -> None:
        super().write(spark, schema)
        columns = [c.split()[0] for c in SCHEMAS["a"].split(", ")]
        records = self.records["a"]
        rows = [(*(r.get(c) for c in columns), False) for r in records.values()]
        gone = sorted(self.written_a - set(records))
        rows += [(key, *[None] * (len(columns) - 1), True) for key in gone]
        frame = spark.createDataFrame(rows, f"{SCHEMAS['a']}, _removed boolean")
        frame.writeTo(f"{schema}.batch_a").using("iceberg").createOrReplace()
        self.written_a = set(records)


# the kinds of change to a's records that the random deliveries must show, so that the
# upsert's events of every kind (a new key, an update, a delete row, a flagged record)
# are read by the merge
A_KINDS = {"new record", "update", "flag delete", "hard delete"}


def changes_between(before: dict, after: dict) -> set[str]:
    """The kinds of change (A_KINDS) from one state of a dataset's records to another."""
    kinds = {"new record"} if after.keys() - before.keys() else set()
    if before.keys() - after.keys():
        kinds.add("hard delete")
    for key in before.keys() & after.keys():
        old, new = before[key], after[key]
        if not old.get("gone") and new.get("gone"):
            kinds.add("flag delete")
        elif {k: v for k, v in old.items() if k != "gone"} != {
            k: v for k, v in new.items() if k != "gone"
        }:
            kinds.add("update")
    return kinds


def buckets_of(queries: list[str]) -> str:
    """The statement of the run's edges model that staged the changed buckets ('' when
    the run did not compare them)."""
    found = [q for q in queries if re.search(r"create table \S+\.f_edges__dbt_merge_buckets ", q)]
    assert len(found) <= 1, found
    return found[0] if found else ""


class TestUpsertEvents(Following):
    combos = {"cd": COMBOS["cd"]}

    @pytest.fixture(scope="class")
    def models(self):
        models = follow_models(self.combos)
        models["raw_a.sql"] = UPSERT_A
        return models

    def run(self, spark, schema, deliveries, queries, *args: str, expect_pass=True) -> str:
        """Write the deliveries, run dbt (args select), return the buckets statement."""
        deliveries.write(spark, schema)
        queries.clear()
        run_dbt(["run", *args], expect_pass=expect_pass, callbacks=[sql_recorder(queries)])
        return buckets_of(queries)

    @staticmethod
    def merge_without_upsert(queries) -> str:
        """Run every model but the upsert of a (a reads as it is); the buckets statement."""
        queries.clear()
        run_dbt(["run", "--exclude", "raw_a"], callbacks=[sql_recorder(queries)])
        return buckets_of(queries)

    def hashed_then_events(self, spark, schema, deliveries, queries, last_updated, why):
        """A run of every model but the upsert hashes a, whose events do not hold its
        change since the last run (why); after a delivery through the upsert, the next
        run reads a's change from its events again."""
        hashed_a, events = f"from {schema}.raw_a version as of", f"from {schema}.raw_a__provenance"
        buckets = self.merge_without_upsert(queries)
        self.check(spark, schema, f"after the {why}", last_updated)
        assert hashed_a in buckets and events not in buckets, why
        deliveries.insert("a")
        buckets = self.run(spark, schema, deliveries, queries)
        self.check(spark, schema, f"the delivery after the {why}", last_updated)
        assert events in buckets and hashed_a not in buckets, why

    def test_the_upserts_events_say_what_changed(self, project, spark):
        schema = project.test_schema
        run_dbt(["deps"])
        # seed 12: its three CI rounds change a in every way (A_KINDS)
        seed = sampling.seed(12)
        deliveries = UpsertDeliveries(seed=seed)
        queries: list[str] = []
        last_updated: dict = {}
        hashed_a = f"from {schema}.raw_a version as of"
        events = f"from {schema}.raw_a__provenance"
        for _ in range(3):
            deliveries.random_delivery()
        deliveries.insert("a")
        steps = [("the first run", self.run(spark, schema, deliveries, queries))]
        self.check(spark, schema, "the first run", last_updated)
        prior = Rebuilding.batches(spark, schema, deliveries)
        kinds_of_a: set[str] = set()
        for number in range(sampling.rounds(3, 12)):
            records_of_a = copy.deepcopy(deliveries.records["a"])
            deliveries.random_delivery()
            deliveries.insert("a")  # a changes in every delivery
            kinds_of_a |= changes_between(records_of_a, deliveries.records["a"])
            step = f"random delivery {number}"
            buckets = self.run(spark, schema, deliveries, queries)
            self.check(spark, schema, step, last_updated)
            current = Rebuilding.batches(spark, schema, deliveries)
            Rebuilding.check_batches(prior, current, step)
            prior = current
            steps.append((step, buckets))
        missing = A_KINDS - kinds_of_a
        assert not missing, f"{sampling.described(seed)}: a had no {sorted(missing)}"
        # the first run builds; every later one found a's change from its events and
        # hashed no record of a (b and c, views, are hashed every run)
        assert steps[0][1] == ""
        for step, buckets in steps[1:]:
            assert events in buckets and hashed_a not in buckets, step
            assert f"from {schema}.raw_b as b" in buckets, step

        # a write to a outside the upsert, read before the upsert runs again: its
        # events are behind a's snapshot, so a is hashed; the upsert's next run
        # records that write's diff first: events again
        spark.sql(f"update {schema}.raw_a set score = score + 1 where score is not null")
        self.hashed_then_events(
            spark, schema, deliveries, queries, last_updated, "write outside the upsert"
        )

        # a rebuild of the upsert drops the keys of its old table without events: the
        # next run hashes a; the one after reads events again
        deliveries.random_delivery()
        del deliveries.records["a"][sorted(deliveries.records["a"])[0]]
        deliveries.write(spark, schema)
        run_dbt(["run", "-s", "raw_a", "--full-refresh"])
        for step in ("after a rebuild of the upsert", "the next delivery"):
            buckets = self.merge_without_upsert(queries)
            self.check(spark, schema, step, last_updated)
            assert (hashed_a in buckets) == (step != "the next delivery"), step
            assert (events in buckets) == (step == "the next delivery"), step
            deliveries.insert("a")
            deliveries.write(spark, schema)
            run_dbt(["run", "-s", "raw_a"])

        # the upsert's versions expired up to its current one, which the merge has not
        # read yet (its events are recorded, as above), the one the edges' digest
        # describes among them: the events cannot say what changed since that version,
        # so a is hashed; the next delivery reads events again
        expire_all_but_current(spark, f"{schema}.raw_a")
        self.hashed_then_events(spark, schema, deliveries, queries, last_updated, "expiry")

        # an upsert run that died after its MERGE, before its events: the merge reads a
        # at the MERGE's snapshot, which no event records yet, and hashes a
        deliveries.insert("a")
        os.environ["DBT_MERGE_FAIL_AT"] = "upsert.before_provenance"
        try:
            self.run(spark, schema, deliveries, queries, "-s", "raw_a", expect_pass=False)
        finally:
            del os.environ["DBT_MERGE_FAIL_AT"]
        buckets = self.merge_without_upsert(queries)
        self.check(spark, schema, "after an upsert that died", last_updated)
        assert hashed_a in buckets and events not in buckets
