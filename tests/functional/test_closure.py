"""dbt_merge.closure.connected_components on the shared SparkSession."""

from __future__ import annotations

import importlib.util
import logging
import math
import random
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from dbt_merge.entity_merge import closure, closure_memory
from dbt_merge.entity_merge.closure import ClosureError, ClosureStats, connected_components
from dbt_merge.entity_merge.closure_memory import DriverMemory
from dbt_merge.entity_merge.components import entity_components
from tests import sampling

# each method forced: the driver, the distributed (which closes graphs this small in
# one task) and the distributed one's rounds to the end (no task closes the rest)
METHODS = {
    "driver": {"max_driver_edges": 1 << 40},
    "distributed": {"max_driver_edges": 0},
    "rounds": {"max_driver_edges": 0, "max_task_edges": 0},
}


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
    out = connected_components(df, stats=stats, **METHODS[method], **kwargs)
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
@pytest.mark.parametrize("seed", sampling.seeds([1, 2, 3]))
def test_random_graphs_match_union_find(spark, method, seed):
    rng = random.Random(seed)
    n = 400
    edges = [
        (f"n{rng.randrange(n)}", f"n{rng.randrange(n)}") for _ in range(rng.choice([150, 300, 600]))
    ]
    got, stats = run(spark, edges, method)
    assert got == reference_components(edges)
    assert stats.method == ("driver" if method == "driver" else "distributed")
    assert stats.nodes == len(got)


def test_labels_do_not_depend_on_order_or_partitioning(spark):
    rng = random.Random(7)
    edges = [(f"k{rng.randrange(300)}", f"k{rng.randrange(300)}") for _ in range(400)]
    base = spark.createDataFrame(edges, "src string, dst string")
    shuffled = spark.createDataFrame(rng.sample(edges, len(edges)), "src string, dst string")
    outputs = []
    for df in (base, shuffled.repartition(7), base.coalesce(1)):
        for options in METHODS.values():
            out = connected_components(df, **options)
            outputs.append(sorted(tuple(r) for r in out.collect()))
    assert all(o == outputs[0] for o in outputs)


def test_rounds_grow_with_log_n_not_with_the_chain_length(spark):
    n = 1 << 14
    chain = spark.range(n - 1).select(
        F.concat(F.lit("c"), F.col("id").cast("string")).alias("src"),
        F.concat(F.lit("c"), (F.col("id") + 1).cast("string")).alias("dst"),
    )
    # consecutive edges in different partitions: no partition holds a piece of it
    chain = chain.repartition(8)
    stats = ClosureStats()
    out = connected_components(chain, stats=stats, **METHODS["rounds"])
    assert out.select("component").distinct().collect()[0][0] == "c0"
    assert out.count() == n
    assert stats.rounds <= 2 * math.log2(n), f"{stats.rounds} rounds for a chain of {n}"


@pytest.mark.parametrize("method", list(METHODS))
def test_one_giant_component_and_many_tiny_ones(spark, method):
    rng = random.Random(5)
    giant = [(f"g{rng.randrange(3000)}", f"g{rng.randrange(3000)}") for _ in range(6000)]
    giant += [(f"g{i}", f"g{i + 1}") for i in range(2999)]  # one component for sure
    tiny = [(f"t{i}a", f"t{i}b") for i in range(700)] + [(f"s{i}", f"s{i}") for i in range(300)]
    edges = rng.sample(giant + tiny, len(giant) + len(tiny))
    df = spark.createDataFrame(edges, "src string, dst string").repartition(5)
    stats = ClosureStats()
    out = connected_components(df, stats=stats, **METHODS[method])
    got = {r["node"]: r["component"] for r in out.collect()}
    want = reference_components(edges)
    assert got == want
    assert len(set(want.values())) == 1 + 700 + 300
    assert sum(1 for c in want.values() if c == "g0") == 3000


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
        # consecutive edges in different partitions: no partition holds a piece of it
        df = spark.createDataFrame(chain, "src string, dst string").repartition(8)
        connected_components(df, max_rounds=1, **METHODS["rounds"])


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


def test_a_small_driver_budget_forces_the_distributed_method_and_says_why(spark, caplog):
    edges = [(f"name-{i:04d}", f"name-{i + 1:04d}") for i in range(50)]
    df = spark.createDataFrame(edges, "src string, dst string")
    stats = ClosureStats()
    tiny = DriverMemory(jvm_free=1 << 30, python_free=10_000)
    with caplog.at_level(logging.INFO, logger=closure.__name__):
        out = connected_components(df, stats=stats, driver_free=tiny)
        got = {r["node"]: r["component"] for r in out.collect()}
    assert got == reference_components(edges)
    assert stats.method == "distributed"
    assert "Python memory for 50 edges, about 51 nodes, names of 9.0 bytes" in stats.reason
    assert "more than 50% of the 9.8 KiB free" in stats.reason
    assert f"closure: distributed method: {stats.reason}" in caplog.text


def test_the_driver_method_is_chosen_when_its_estimate_fits(spark):
    df = spark.createDataFrame([("a", "b"), ("b", "c")], "src string, dst string")
    stats = ClosureStats()
    connected_components(df, stats=stats)  # measured: the test driver has room
    assert stats.method == "driver"
    assert stats.reason.startswith("the driver method needs about ")
    stats = ClosureStats()
    connected_components(df, stats=stats, driver_free=DriverMemory(jvm_free=1, python_free=1))
    assert stats.method == "distributed" and "JVM heap (spark.driver.memory)" in stats.reason


def test_max_driver_edges_overrides_the_memory_estimate(spark):
    df = spark.createDataFrame([("a", "b"), ("b", "c")], "src string, dst string")
    nothing = DriverMemory(jvm_free=0, python_free=0)
    stats = ClosureStats()
    connected_components(df, stats=stats, driver_free=nothing, max_driver_edges=2)
    assert (stats.method, stats.reason) == ("driver", "2 edges <= max_driver_edges=2")
    stats = ClosureStats()
    connected_components(df, stats=stats, max_driver_edges=1)
    assert (stats.method, stats.reason) == ("distributed", "2 edges > max_driver_edges=1")


def test_the_estimate_grows_with_edges_and_name_widths():
    small = closure_memory.driver_need(1_000_000, 2 * 8 * 1_000_000)
    wide = closure_memory.driver_need(1_000_000, 2 * 64 * 1_000_000)
    more = closure_memory.driver_need(2_000_000, 2 * 8 * 2_000_000)
    assert wide.python > small.python and wide.jvm > small.jvm
    # past the fixed shares, twice the edges of the same names need twice the memory
    python_fixed, jvm_fixed = closure_memory.PYTHON_FIXED_BYTES, closure_memory.JVM_FIXED_BYTES
    assert more.python - python_fixed == 2 * (small.python - python_fixed)
    assert more.jvm - jvm_fixed == 2 * (small.jvm - jvm_fixed)
    # 1M edges of 8-byte names: some hundreds of MB in Python, not GBs
    assert 200e6 < small.python < 1e9
    fits, _ = closure_memory.decide(1_000_000, 16_000_000, DriverMemory(8 << 30, 8 << 30))
    assert fits


def test_the_estimate_is_its_formula_and_counted_nodes_lower_it():
    """driver_need on small inputs against its formula: 10 edges of 4 names, names of
    3 bytes (60 bytes of names, both ends)."""
    need = closure_memory.driver_need(10, 60, nodes=4)
    assert need.python == (
        closure_memory.PYTHON_FIXED_BYTES
        + closure_memory.PYTHON_BYTES_PER_EDGE * 10
        + closure_memory.PYTHON_NAME_COPIES * 60
        + closure_memory.PYTHON_BYTES_PER_NODE * 4
        + 2 * 4 * 3
    )
    assert need.jvm == (
        closure_memory.JVM_FIXED_BYTES
        + 60
        + closure_memory.JVM_BYTES_PER_EDGE * 10
        + 2 * (4 * 3 + 4 * 4)
    )
    worst = closure_memory.driver_need(10, 60)  # no count: two new names an edge
    assert worst == closure_memory.driver_need(10, 60, nodes=20)
    assert worst.python > need.python and worst.jvm > need.jvm
    # a count above the worst case (HyperLogLog's error) is capped at it
    assert closure_memory.driver_need(10, 60, nodes=21) == worst


def test_the_choice_names_the_counted_nodes(spark):
    df = spark.createDataFrame([("a", "b"), ("b", "c"), ("x", "y")], "src string, dst string")
    stats = ClosureStats()
    connected_components(df, stats=stats, driver_free=DriverMemory(8 << 30, 8 << 30))
    assert stats.method == "driver"
    assert "3 edges, about 5 nodes, names of 1.0 bytes on average" in stats.reason, stats.reason


def _bench_baselines():
    path = Path(__file__).resolve().parents[2] / "bench" / "baselines.py"
    spec = importlib.util.spec_from_file_location("bench_baselines", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("seed", sampling.seeds([1, 2]))
def test_the_benchmarks_large_star_small_star_baseline_matches_union_find(spark, seed):
    rng = random.Random(seed)
    edges = [(f"n{rng.randrange(300)}", f"n{rng.randrange(300)}") for _ in range(250)]
    edges += [(f"c{i:03d}", f"c{i + 1:03d}") for i in range(60)] + [("solo", "solo")]
    df = spark.createDataFrame(edges, "src string, dst string").repartition(3)
    labels, rounds = _bench_baselines().large_star_small_star(df, cap_seconds=600)
    got = {r["node"]: r["component"] for r in labels.collect()}
    assert got == reference_components(edges)
    assert 1 <= rounds <= 12


def test_entity_components_names_a_previous_that_is_not_its_table(spark):
    edges = spark.createDataFrame([("0|a", "0|a", 1)], "src string, dst string, _batch bigint")
    with pytest.raises(ClosureError, match=r"argument 'previous': must be .* \(got 42\)"):
        entity_components(edges, previous=42)
    with pytest.raises(ClosureError, match="argument 'previous': no table 'no_such_schema.f'"):
        entity_components(edges, previous="no_such_schema.f")
