"""entity_components in a merge that follows the change, without dbt: random sequences
of edges batches over an Iceberg state table, where each run's batch is computed twice,
with the state read into the driver and with the hops in Spark, and both must be the
same rows; the same run rebuilding the state (rebuild_share 0) gives the whole table
that those rows leave; applied to the state (as the entity_state strategy applies them), the state
must label every live node as a from-scratch closure does. The dbt runs of the same
models are proven in test_entity_merge_following.py."""

from __future__ import annotations

import logging
import random

import pytest

from dbt_merge.entity_merge import components_driver
from dbt_merge.entity_merge.closure import ClosureError, ClosureStats
from dbt_merge.entity_merge.closure_memory import DriverMemory, state_fits
from dbt_merge.entity_merge.components import STATE_IN_DRIVER_ENV, entity_components
from dbt_merge.entity_merge.state import PREVIOUS_COMPONENT, READ_AT, STORED, WHOLE
from tests import sampling
from tests.functional.test_closure import reference_components

SCHEMA = "components_state_test"
EDGES_SCHEMA = "src string, dst string, `_batch` bigint"
STATE_SCHEMA = f"node string, component string, `_batch` bigint, {PREVIOUS_COMPONENT} string"
VALUES = [f"=v{i}" for i in range(12)]


class Graph:
    """Records with the values they link to (None: deleted, or gone from the input), and
    their edges rows, each stamped with the batch that wrote it."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.rows: dict[str, list[tuple]] = {}
        self.records = 0

    def change(self, batch: int, count: int) -> None:
        """count records inserted, changed, deleted or gone, in one batch."""
        for _ in range(count):
            if not self.rows or self.random.random() < 0.4:
                self.records += 1
                node = f"0|r{self.records:03d}"
            else:
                node = self.random.choice(sorted(self.rows))
            if self.random.random() < 0.2:
                self.rows[node] = [(node, None, batch)]  # deleted or gone: no edge
            else:
                values = self.random.sample(VALUES, self.random.randrange(0, 3))
                self.rows[node] = [(node, dst, batch) for dst in [node, *values]]

    def edges(self) -> list[tuple]:
        return [row for rows in self.rows.values() for row in rows]


def write(spark, name: str, rows: list[tuple], schema: str) -> str:
    table = f"{SCHEMA}.{name}"
    spark.createDataFrame(rows, schema).writeTo(table).using("iceberg").createOrReplace()
    return table


def apply(state: dict, batch_rows: list) -> None:
    """The batch written as the entity_state strategy writes it: a drop deletes the
    node's row, any other row replaces it."""
    for row in batch_rows:
        if row["$drop"]:
            state.pop(row["node"], None)
        else:
            state[row["node"]] = (row["component"], row["_batch"], row[PREVIOUS_COMPONENT])


def batch_rows(
    spark, edges: str, state: str, in_driver: bool, rebuild_share: float = 1.0, **closure_options
) -> list:
    """The rows of a run (rebuild_share 1: the changes, never the whole state)."""
    out = entity_components(
        spark.table(edges),
        previous=state,
        state_in_driver=in_driver,
        rebuild_share=rebuild_share,
        **closure_options,
    )
    assert READ_AT in out.columns
    return sorted(out.drop(READ_AT).collect(), key=lambda row: row["node"])


@pytest.fixture(scope="module")
def schema(spark):
    spark.sql(f"create schema if not exists {SCHEMA}")
    yield SCHEMA
    spark.sql(f"drop schema if exists {SCHEMA} cascade")


@pytest.mark.parametrize("seed", sampling.seeds([3]))
def test_the_state_in_the_driver_writes_what_the_hops_in_spark_write(
    spark, schema, seed, monkeypatch
):
    graph = Graph(seed)
    graph.change(batch=1, count=30)
    edges = write(spark, "edges", graph.edges(), EDGES_SCHEMA)
    first = entity_components(spark.table(edges)).collect()
    state = {row["node"]: (row["component"], row["_batch"], None) for row in first}
    in_spark_closures = 0
    for batch in range(2, 12):
        graph.change(batch=batch, count=graph.random.randrange(1, 6))
        edges = write(spark, "edges", graph.edges(), EDGES_SCHEMA)
        stored = write(
            spark, "state", [(n, *values) for n, values in sorted(state.items())], STATE_SCHEMA
        )
        in_driver = batch_rows(spark, edges, stored, in_driver=True)
        in_spark = batch_rows(spark, edges, stored, in_driver=False)
        assert in_driver == in_spark, f"batch {batch}"
        # the keys given to the scans as a broadcast join rather than an `in` list
        with monkeypatch.context() as patched:
            patched.setattr(components_driver, "IN_LIST_ROWS", 0)
            by_join = batch_rows(spark, edges, stored, in_driver=True)
        assert by_join == in_driver, f"batch {batch}, the keys joined"
        # the affected subgraph too large for the driver: connected_components closes it
        stats = ClosureStats()
        in_both = batch_rows(spark, edges, stored, True, max_driver_edges=0, stats=stats)
        assert in_both == in_spark, f"batch {batch}, the subgraph closed in Spark"
        assert stats.method == "distributed" or stats.edges == 0, stats
        in_spark_closures += stats.method == "distributed"
        assert in_driver, f"batch {batch} wrote nothing"
        assert all(row["_batch"] == batch for row in in_driver)
        assert {row["node"] for row in in_driver if not row[STORED]} <= {
            row[0] for row in graph.edges()
        } | set(VALUES)
        # the same run rebuilding the state: the whole table, as the changes leave it
        whole = batch_rows(spark, edges, stored, True, rebuild_share=0)
        apply(state, in_driver)
        assert all(row[WHOLE] and not row["$drop"] for row in whole), f"batch {batch}"
        replaced = {
            row["node"]: (row["component"], row["_batch"], row[PREVIOUS_COMPONENT]) for row in whole
        }
        assert replaced == state, f"batch {batch}: the rebuilt state differs"
        live = [(src, dst) for src, dst, _ in graph.edges() if dst is not None]
        expected = reference_components(live)
        labelled = {node: values[0] for node, values in state.items() if values[0] is not None}
        assert labelled == expected, f"batch {batch}: the state differs from a closure"
        # a record without an edge keeps its row, without a component (a tombstone)
        for node, rows in graph.rows.items():
            if rows[0][1] is None and node in state:
                assert state[node][0] is None, (batch, node)
    assert in_spark_closures > 0, "no subgraph was closed in Spark"


def test_the_choice_is_logged_and_bad_choices_are_named(spark, schema, caplog, monkeypatch):
    graph = Graph(5)
    graph.change(batch=1, count=8)
    edges = write(spark, "edges", graph.edges(), EDGES_SCHEMA)
    first = entity_components(spark.table(edges)).collect()
    stored = write(
        spark,
        "state",
        [(row["node"], row["component"], row["_batch"], None) for row in first],
        STATE_SCHEMA,
    )
    graph.change(batch=2, count=2)
    edges = write(spark, "edges", graph.edges(), EDGES_SCHEMA)
    with caplog.at_level(logging.INFO, logger="dbt_merge.entity_merge"):
        entity_components(spark.table(edges), previous=stored).collect()
        monkeypatch.setenv(STATE_IN_DRIVER_ENV, "0")
        entity_components(spark.table(edges), previous=stored).collect()
    said = [r.getMessage() for r in caplog.records if "entity_components: " in r.getMessage()]
    assert any("the state in the driver: a state of" in m and "bytes a row" in m for m in said)
    assert any(f"hops in Spark: {STATE_IN_DRIVER_ENV} says so" in m for m in said)
    assert any("nodes affected" in m for m in said)
    monkeypatch.setenv(STATE_IN_DRIVER_ENV, "yes")
    with pytest.raises(ClosureError, match=rf"{STATE_IN_DRIVER_ENV} must be 0 or 1 .*'yes'"):
        entity_components(spark.table(edges), previous=stored)
    monkeypatch.delenv(STATE_IN_DRIVER_ENV)
    with pytest.raises(ClosureError, match=r"argument 'state_in_driver': .* \(got 'auto'\)"):
        entity_components(spark.table(edges), previous=stored, state_in_driver="auto")


def test_the_state_fits_by_its_rows_and_the_free_memory():
    free = DriverMemory(jvm_free=1 << 30, python_free=8 << 30)
    fits, why = state_fits(1_000_000, free)
    assert fits and "a state of 1,000,000 rows needs about" in why
    fits, why = state_fits(10_000_000, free)
    assert not fits and "of driver JVM heap (spark.driver.memory)" in why
    fits, why = state_fits(10_000_000, DriverMemory(jvm_free=8 << 30, python_free=1 << 30))
    assert not fits and "of driver Python memory" in why
