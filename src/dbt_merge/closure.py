"""Connected components of an equality graph: the transitive closure of entity merge.

``connected_components(edges)`` takes a DataFrame of edges between string nodes and
returns one row per node with its component, labelled by the component's smallest
node (ordinal string order), so labels depend only on the graph: not on row order,
partitioning or the number of executors.

Two ways to the same answer:

* **driver** (graphs up to ``max_driver_edges`` edges, default 20M): the edges, as
  two int64 columns, come to the driver through Arrow and scipy's
  ``connected_components`` labels them in one linear pass. 16 bytes an edge.
* **distributed** (larger graphs): min-label hooking with pointer jumping and graph
  contraction. Each round every node points at the smallest of itself and its
  neighbours (ids are 64-bit hashes, so "smallest" is a random order), the pointers
  are shortcut once, and every edge is renamed to its endpoints' pointers; edges
  inside one tree vanish. A node that is not a local minimum leaves the graph in
  that round, and a local minimum always absorbs a neighbour, so the graph shrinks
  geometrically: rounds grow with log(n), not with the diameter (a 100k-node chain
  takes a handful of rounds). Lineage is cut after every round (checkpoint), and the
  parent pointers are resolved at the end by pointer jumping.

Null endpoints are ignored: an edge ``(a, null)`` keeps ``a`` as a node of its own.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

logger = logging.getLogger(__name__)

MAX_DRIVER_EDGES_DEFAULT = 20_000_000
MAX_ROUNDS_DEFAULT = 100


class ClosureError(ValueError):
    """Bad input to the closure (names the argument and the value)."""


@dataclass
class ClosureStats:
    """What one ``connected_components`` call did (filled in when passed in)."""

    method: str = ""
    edges: int = 0
    nodes: int = 0
    components: int = 0
    rounds: int = 0
    seconds: float = 0.0


def connected_components(
    edges: DataFrame,
    src: str = "src",
    dst: str = "dst",
    *,
    node_col: str = "node",
    component_col: str = "component",
    max_driver_edges: int = MAX_DRIVER_EDGES_DEFAULT,
    max_rounds: int = MAX_ROUNDS_DEFAULT,
    stats: ClosureStats | None = None,
) -> DataFrame:
    """Label every node of ``edges`` with its connected component.

    Args:
        edges: one row per edge; ``src`` and ``dst`` hold node names (cast to string).
        src: column of one endpoint.
        dst: column of the other endpoint.
        node_col: name of the output's node column.
        component_col: name of the output's component column.
        max_driver_edges: graphs with at most this many edges are solved on the
            driver; larger ones (or 0 to force it) with the distributed algorithm.
        max_rounds: the distributed algorithm fails rather than loop past this.
        stats: a ``ClosureStats`` to fill in (method, sizes, rounds, seconds).

    Returns:
        A DataFrame ``(node_col string, component_col string)``, one row per distinct
        node; the component is the smallest node name in it.

    Examples:
        >>> edges = spark.createDataFrame([("a", "b"), ("c", "b"), ("x", "y")], ["src", "dst"])
        >>> connected_components(edges).orderBy("node").collect()
        [Row(node='a', component='a'), Row(node='b', component='a'),
         Row(node='c', component='a'), Row(node='x', component='x'),
         Row(node='y', component='x')]
    """
    _validate(edges, src, dst, node_col, component_col, max_driver_edges, max_rounds)
    started = time.monotonic()
    stats = stats if stats is not None else ClosureStats()
    spark = edges.sparkSession

    # 1. string nodes -> 64-bit ids; self-edges keep nodes whose other end is null
    pairs = edges.select(F.col(src).cast("string").alias("s"), F.col(dst).cast("string").alias("d"))
    pairs = pairs.where(F.col("s").isNotNull() | F.col("d").isNotNull()).select(
        F.coalesce("s", "d").alias("s"), F.coalesce("d", "s").alias("d")
    )
    nodes = (
        pairs.select(F.col("s").alias("node"))
        .union(pairs.select(F.col("d").alias("node")))
        .distinct()
        .withColumn("nid", F.xxhash64("node"))
    )
    nodes = _materialize(nodes)
    counts = nodes.agg(F.count(F.lit(1)).alias("n"), F.countDistinct("nid").alias("ids")).first()
    stats.nodes = int(counts["n"])
    if counts["n"] == counts["ids"]:
        hashed = pairs.select(F.xxhash64("s").alias("a"), F.xxhash64("d").alias("b"))
    else:
        logger.info("closure: 64-bit id collision among %s nodes; using dense ids", counts["n"])
        nodes = _materialize(_dense_ids(nodes))
        hashed = (
            pairs.join(nodes.withColumnRenamed("node", "s").withColumnRenamed("nid", "a"), "s")
            .join(nodes.withColumnRenamed("node", "d").withColumnRenamed("nid", "b"), "d")
            .select("a", "b")
        )
    int_edges = _materialize(_canonical(hashed))
    stats.edges = int_edges.count()

    # 2. root of every node that has an edge
    if stats.edges <= max_driver_edges:
        stats.method = "driver"
        roots = _driver_roots(spark, int_edges)
        stats.rounds = 1
    else:
        stats.method = "distributed"
        roots, stats.rounds = _distributed_roots(int_edges, max_rounds)

    # 3. label each component by its smallest node name
    labelled = (
        nodes.join(roots, "nid", "left")
        .select("node", F.coalesce("root", "nid").alias("root"))
        .withColumn(component_col, F.min("node").over(Window.partitionBy("root")))
        .select(F.col("node").alias(node_col), component_col)
    )
    stats.seconds = time.monotonic() - started
    logger.info(
        "closure: %s nodes, %s edges, %s rounds (%s) in %.1fs",
        stats.nodes,
        stats.edges,
        stats.rounds,
        stats.method,
        stats.seconds,
    )
    return labelled


def _validate(
    edges: DataFrame,
    src: str,
    dst: str,
    node_col: str,
    component_col: str,
    max_driver_edges: int,
    max_rounds: int,
) -> None:
    if not isinstance(edges, DataFrame):
        raise ClosureError(
            f"connected_components expected a pyspark DataFrame but received the value: {edges!r}"
        )
    missing = [c for c in (src, dst) if c not in edges.columns]
    if missing:
        raise ClosureError(
            f"connected_components: edge column(s) {missing} not found; "
            f"the edges have columns {edges.columns}"
        )
    if node_col == component_col:
        raise ClosureError(
            f"connected_components: node_col and component_col are both '{node_col}'"
        )
    if not isinstance(max_driver_edges, int) or max_driver_edges < 0:
        raise ClosureError(f"'max_driver_edges' is set to {max_driver_edges!r} but must be >= 0")
    if not isinstance(max_rounds, int) or max_rounds <= 0:
        raise ClosureError(f"'max_rounds' is set to {max_rounds!r} but must be > 0")


def _materialize(df: DataFrame) -> DataFrame:
    """Compute ``df`` once and cut its lineage *and* its size estimate.

    ``Dataset.localCheckpoint`` keeps the original plan's statistics, and a join's
    estimate is the product of its inputs': carried from round to round the
    estimate's BigInt grows exponentially and planning alone takes minutes after a
    few rounds (Spark 3.5, ``LogicalRDD.fromDataset``). A DataFrame rebuilt from the
    locally checkpointed JVM rows starts with fresh statistics; no row passes
    through Python.
    """
    rows = df._jdf.javaRDD()
    rows.rdd().localCheckpoint()
    rows.count()
    spark = df.sparkSession
    return DataFrame(spark._jsparkSession.createDataFrame(rows, df._jdf.schema()), spark)


def _canonical(pairs: DataFrame) -> DataFrame:
    """Undirected edges as (smaller id, larger id), deduplicated; self-edges kept once."""
    return pairs.select(F.least("a", "b").alias("a"), F.greatest("a", "b").alias("b")).distinct()


def _dense_ids(nodes: DataFrame) -> DataFrame:
    """0..n-1 ids in node order: the fallback when two names hash alike."""
    indexed = nodes.select("node").rdd.map(lambda r: r[0]).sortBy(lambda n: n).zipWithIndex()
    return indexed.toDF(["node", "nid"])


def _driver_roots(spark, int_edges: DataFrame) -> DataFrame:
    import numpy as np
    import pandas as pd
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components as scipy_components

    arrow_key = "spark.sql.execution.arrow.pyspark.enabled"
    previous = spark.conf.get(arrow_key, "false")
    spark.conf.set(arrow_key, "true")
    try:
        frame = int_edges.toPandas()
        a = frame["a"].to_numpy(dtype=np.int64)
        b = frame["b"].to_numpy(dtype=np.int64)
        ids, dense = np.unique(np.concatenate([a, b]), return_inverse=True)
        m = len(a)
        graph = coo_matrix(
            (np.ones(m, dtype=np.int8), (dense[:m], dense[m:])), shape=(len(ids), len(ids))
        ).tocsr()
        _, labels = scipy_components(graph, directed=False)
        # any member's id names the component; step 3 relabels by node name
        _, first_member = np.unique(labels, return_index=True)
        roots = pd.DataFrame({"nid": ids, "root": ids[first_member[labels]]})
        return _materialize(spark.createDataFrame(roots, "nid long, root long"))
    finally:
        spark.conf.set(arrow_key, previous)


def _distributed_roots(int_edges: DataFrame, max_rounds: int) -> tuple[DataFrame, int]:
    graph = int_edges.where(F.col("a") != F.col("b"))
    moved: list[DataFrame] = []
    rounds = 0
    while not graph.isEmpty():
        rounds += 1
        if rounds > max_rounds:
            raise ClosureError(
                f"connected_components did not converge in max_rounds={max_rounds}; "
                f"raise 'max_rounds' (the graph still has {graph.count()} edges)"
            )
        # 1. hook: every node points at the smallest of itself and its neighbours
        both = graph.select(F.col("a").alias("x"), F.col("b").alias("y")).union(
            graph.select(F.col("b").alias("x"), F.col("a").alias("y"))
        )
        hook = (
            both.groupBy("x").agg(F.min("y").alias("m")).select("x", F.least("x", "m").alias("p"))
        )
        # 2. follow the hooks to their roots (local minima, which stay in the graph),
        #    so every node is renamed exactly once in the whole run
        movers = _resolve(hook.where(F.col("x") != F.col("p")))
        moved.append(movers)
        # 3. contract: rename both ends, drop edges that fell inside one tree
        pa = movers.select(F.col("nid").alias("a"), F.col("root").alias("pa"))
        pb = movers.select(F.col("nid").alias("b"), F.col("root").alias("pb"))
        renamed = (
            graph.join(pa, "a", "left")
            .join(pb, "b", "left")
            .select(F.coalesce("pa", "a").alias("a"), F.coalesce("pb", "b").alias("b"))
        )
        graph = _materialize(_canonical(renamed).where(F.col("a") != F.col("b")))
        logger.info("closure round %d: %d edges left", rounds, graph.count())

    if not moved:
        empty = int_edges.sparkSession.createDataFrame([], "nid long, root long")
        return empty, rounds
    # every node moves at most once, always to a smaller id: a forest
    parent = moved[0]
    for step in moved[1:]:
        parent = parent.union(step)
    parent = parent.select(F.col("nid").alias("x"), F.col("root").alias("p"))
    return _resolve(_materialize(parent)), rounds


def _resolve(parent: DataFrame) -> DataFrame:
    """Follow parent pointers ``(x, p)`` to the roots by pointer jumping.

    Each pass doubles the distance covered, so a forest of depth d takes log2(d)
    passes. Returns ``(nid, root)`` for every ``x``.
    """
    current = parent.select(F.col("x").alias("nid"), F.col("p").alias("root"))
    while True:
        step = current.alias("c").join(
            current.alias("n"), F.col("c.root") == F.col("n.nid"), "left"
        )
        nxt = step.select(
            F.col("c.nid").alias("nid"),
            F.coalesce(F.col("n.root"), F.col("c.root")).alias("root"),
            F.col("n.root").isNotNull().alias("moved"),
        )
        nxt = _materialize(nxt)
        if nxt.where("moved").isEmpty():
            return nxt.select("nid", "root")
        current = nxt.select("nid", "root")
