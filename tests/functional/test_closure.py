"""dbt_merge.closure.connected_components on the shared SparkSession."""

from __future__ import annotations

import math
import random

import pytest
from pyspark.sql import functions as F

from dbt_merge.entity_merge import closure
from dbt_merge.entity_merge.closure import ClosureError, ClosureStats, connected_components

METHODS = {"driver": closure.MAX_DRIVER_EDGES_DEFAULT, "distributed": 0}


def reference_components(edges):
    """Plain union-find; label = smallest node name of the component."""
    parent = {}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        a, b = (a if a is not None else b), (b if b is not None else a)
        if a is None:
            continue
        for n in (a, b):
            parent.setdefault(n, n)
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups = {}
    for n in parent:
        groups.setdefault(find(n), []).append(n)
    return {n: min(members) for members in groups.values() for n in members}


def run(spark, edges, method, **kwargs):
    df = spark.createDataFrame(edges, "src string, dst string")
    stats = ClosureStats()
    out = connected_components(df, max_driver_edges=METHODS[method], stats=stats, **kwargs)
    rows = out.collect()
    labels = {r["node"]: r["component"] for r in rows}
    assert len(labels) == len(rows), "exactly one row per node"
    return labels, stats


CASES = [
    ("chain a-b-c merges transitively", [("a", "b"), ("b", "c")]),
    ("two components stay apart", [("a", "b"), ("x", "y")]),
    ("reversed and duplicate edges", [("b", "a"), ("a", "b"), ("a", "b")]),
    ("self edge keeps an isolated node", [("solo", "solo"), ("a", "b")]),
    ("null end keeps the other node alone", [("lonely", None), (None, None), ("a", "b")]),
    ("star through a value node", [(f"e{i}", "v:x") for i in range(5)]),
    ("label is the smallest name, not the first seen", [("z", "m"), ("m", "b"), ("q", "z")]),
    ("byte order: 'Zulu' < 'zeta' < 'éclair'", [("zeta", "éclair"), ("éclair", "Zulu")]),
]


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("why, edges", CASES, ids=[c[0] for c in CASES])
def test_small_graphs(spark, method, why, edges):
    got, _ = run(spark, edges, method)
    assert got == reference_components(edges), why


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_graphs_match_union_find(spark, method, seed):
    rng = random.Random(seed)
    n = 400
    edges = [
        (f"n{rng.randrange(n)}", f"n{rng.randrange(n)}") for _ in range(rng.choice([150, 300, 600]))
    ]
    got, stats = run(spark, edges, method)
    assert got == reference_components(edges)
    assert stats.method == method
    assert stats.nodes == len(got)


def test_labels_do_not_depend_on_order_or_partitioning(spark):
    rng = random.Random(7)
    edges = [(f"k{rng.randrange(300)}", f"k{rng.randrange(300)}") for _ in range(400)]
    base = spark.createDataFrame(edges, "src string, dst string")
    shuffled = spark.createDataFrame(rng.sample(edges, len(edges)), "src string, dst string")
    outputs = []
    for df in (base, shuffled.repartition(7), base.coalesce(1)):
        for limit in METHODS.values():
            out = connected_components(df, max_driver_edges=limit)
            outputs.append(sorted(tuple(r) for r in out.collect()))
    assert all(o == outputs[0] for o in outputs)


def test_rounds_grow_with_log_n_not_with_the_chain_length(spark):
    n = 1 << 14
    chain = spark.range(n - 1).select(
        F.concat(F.lit("c"), F.col("id").cast("string")).alias("src"),
        F.concat(F.lit("c"), (F.col("id") + 1).cast("string")).alias("dst"),
    )
    stats = ClosureStats()
    out = connected_components(chain, max_driver_edges=0, stats=stats)
    assert out.select("component").distinct().collect()[0][0] == "c0"
    assert out.count() == n
    assert stats.rounds <= 2 * math.log2(n), f"{stats.rounds} rounds for a chain of {n}"


def test_hash_collisions_fall_back_to_dense_ids(spark, monkeypatch):
    # every name of the same length collides; the answer must not change
    monkeypatch.setattr(closure.F, "xxhash64", lambda c: F.length(c).cast("long"))
    edges = [("aa", "bb"), ("cc", "dd"), ("dd", "ee"), ("x", "x")]
    for method in METHODS:
        got, _ = run(spark, edges, method)
        assert got == reference_components(edges)


def test_empty_edges_give_no_rows(spark):
    got, stats = run(spark, [], "driver")
    assert got == {} and stats.nodes == 0


def test_too_few_rounds_fail_with_the_setting_named(spark):
    chain = [(f"c{i:03d}", f"c{i + 1:03d}") for i in range(200)]
    with pytest.raises(ClosureError, match="did not converge in max_rounds=1; raise 'max_rounds'"):
        run(spark, chain, "distributed", max_rounds=1)


def test_bad_arguments(spark):
    df = spark.createDataFrame([("a", "b")], "src string, dst string")
    with pytest.raises(
        ClosureError, match="expected a pyspark DataFrame but received the value: 3"
    ):  # noqa: E501
        connected_components(3)
    with pytest.raises(ClosureError, match=r"edge column\(s\) \['to'\] not found"):
        connected_components(df, "src", "to")
    with pytest.raises(ClosureError, match="node_col and component_col are both 'x'"):
        connected_components(df, node_col="x", component_col="x")
    with pytest.raises(ClosureError, match="'max_driver_edges' is set to -1 but must be >= 0"):
        connected_components(df, max_driver_edges=-1)
    with pytest.raises(ClosureError, match="'max_rounds' is set to 0 but must be > 0"):
        connected_components(df, max_rounds=0)
