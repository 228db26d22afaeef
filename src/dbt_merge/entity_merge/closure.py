"""Connected components of an equality graph: the transitive closure of entity merge.

``connected_components(edges)`` takes a DataFrame of edges between string nodes and
returns one row per node with its component, labelled by the component's smallest
node (ordinal string order), so labels depend only on the graph: not on row order,
partitioning or the number of executors.

Two ways to the same answer:

* **driver** (graphs whose names fit in the driver's memory): the name pairs come
  to the driver through Arrow, Arrow's dictionary encoding numbers the names
  exactly, scipy's ``connected_components`` labels them in one linear pass and the
  result goes back as Arrow batches in one broadcast. No shuffle; a few hundred
  bytes of driver memory an edge (``closure_memory`` estimates it from the edge
  count and the name widths).
* **distributed** (larger graphs): names are hashed to 64-bit ids (dense ids if two
  collide) and, from there on, only integers move until the names are joined back
  once at the end. First every partition's edges are contracted where they lie
  (``closure_local``: scipy in ``mapInArrow``, no shuffle) into one star per local
  component, which drops duplicate and cycle edges and the local diameters. Then
  rounds of min-label hooking with pointer jumping and graph contraction: every
  node hooks to the smallest of itself and its neighbours (a random order, since
  ids are hashes), hooks are followed to their roots (local minima) by pointer
  jumping, and every edge is renamed to its endpoints' roots; edges inside one
  tree vanish. Every non-minimum leaves the graph in that round and every
  remaining minimum has absorbed a neighbour, so the graph shrinks geometrically:
  rounds grow with log(n), not with the diameter. Once at most ``max_task_edges``
  edges are left (before the first round on graphs that small) they are closed in
  one executor task by the same scipy step; nothing of the graph comes to the
  driver. Every intermediate is materialized (lineage cut), and the parent
  pointers of all rounds are resolved at the end by pointer jumping.

Null endpoints are ignored: an edge ``(a, null)`` keeps ``a`` as a node of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dbt_merge.core.errors import DbtMergeError
from dbt_merge.core.spark import materialize
from dbt_merge.entity_merge.closure_local import ROOTS_SCHEMA, local_roots
from dbt_merge.entity_merge.closure_memory import DriverMemory, decide, driver_memory

logger = logging.getLogger(__name__)

MAX_ROUNDS_DEFAULT = 100
# the distributed method closes what is left in one task once it has at most this many
# edges (16 bytes each in the task's Arrow input, about 100 bytes in numpy and scipy)
MAX_TASK_EDGES_DEFAULT = 4_000_000
# relative standard error of the node count the memory estimate reads (HyperLogLog)
NODE_COUNT_ERROR = 0.02


class ClosureError(DbtMergeError):
    """Bad input to the closure (names the argument and the value)."""


@dataclass
class ClosureStats:
    """What one ``connected_components`` call did (filled in when passed in)."""

    method: str = ""
    edges: int = 0
    nodes: int = 0
    rounds: int = 0
    seconds: float = 0.0
    reason: str = ""  # why this method: the memory estimate, or max_driver_edges


def connected_components(
    edges: DataFrame,
    src: str = "src",
    dst: str = "dst",
    *,
    node_col: str = "node",
    component_col: str = "component",
    max_driver_edges: int | None = None,
    max_rounds: int = MAX_ROUNDS_DEFAULT,
    stats: ClosureStats | None = None,
    driver_free: DriverMemory | None = None,
    max_task_edges: int = MAX_TASK_EDGES_DEFAULT,
) -> DataFrame:
    """Label every node of ``edges`` with its connected component.

    Args:
        edges: one row per edge; ``src`` and ``dst`` hold node names (cast to string).
        src: column of one endpoint.
        dst: column of the other endpoint.
        node_col: name of the output's node column.
        component_col: name of the output's component column.
        max_driver_edges: an override of the choice by memory: graphs with at most
            this many edge rows are solved on the driver, larger ones (or 0 to force
            it) with the distributed algorithm. By default (None) the driver method
            is used when its estimated need fits in the driver's free memory: the
            need is estimated from the edge count and the bytes of the names
            (``closure_memory.driver_need``: Arrow batches in the driver JVM,
            Arrow and scipy arrays in the Python process) and
            compared with half of the JVM heap left free under
            ``spark.driver.memory`` and half of the memory the OS reports
            available; if either does not fit, the distributed method runs and
            the log (and ``stats.reason``) says which.
        max_rounds: the distributed algorithm fails rather than loop past this.
        stats: a ``ClosureStats`` to fill in (method, sizes, rounds, seconds, reason).
        driver_free: the driver's free memory to compare the estimate with, in
            place of the measured one (``closure_memory.driver_memory``).
        max_task_edges: the distributed method closes the graph in one executor
            task (scipy on integer ids) once at most this many edges are left;
            0 runs the rounds to the end.

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
    if not isinstance(max_task_edges, int) or max_task_edges < 0:
        raise ClosureError(f"'max_task_edges' is set to {max_task_edges!r} but must be >= 0")
    started = time.monotonic()
    stats = stats if stats is not None else ClosureStats()
    spark = edges.sparkSession

    pairs = edge_pairs(edges, src, dst)
    stats.edges, name_bytes, nodes = measure_pairs(pairs)
    on_driver, stats.reason = choose_driver(
        spark, stats.edges, name_bytes, max_driver_edges, driver_free, nodes
    )
    logger.info("closure: %s method: %s", "driver" if on_driver else "distributed", stats.reason)
    if on_driver:
        stats.method, stats.rounds = "driver", 1
        labelled = _driver_components(spark, pairs, node_col, component_col, stats)
    else:
        stats.method = "distributed"
        labelled = _distributed_components(
            pairs, node_col, component_col, max_rounds, max_task_edges, stats
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


def edge_pairs(edges: DataFrame, src: str, dst: str) -> DataFrame:
    """The edges as the closure takes them: ``(s, d)`` strings, rows with both ends null
    dropped, and an edge with one null end a self-edge (it keeps its node)."""
    pairs = edges.select(F.col(src).cast("string").alias("s"), F.col(dst).cast("string").alias("d"))
    return pairs.where(F.col("s").isNotNull() | F.col("d").isNotNull()).select(
        F.coalesce("s", "d").alias("s"), F.coalesce("d", "s").alias("d")
    )


def measure_pairs(pairs: DataFrame, exact: bool = False) -> tuple[int, int, int]:
    """``(edges, name bytes, nodes)`` of ``edge_pairs`` in one pass, which the memory
    estimate needs; the nodes by HyperLogLog (``NODE_COUNT_ERROR``), or exactly."""
    name = F.col("name")
    nodes = F.countDistinct(name) if exact else F.approx_count_distinct(name, NODE_COUNT_ERROR)
    measured = (
        pairs.select(F.explode(F.array("s", "d")).alias("name"))
        .agg(F.count(F.lit(1)), F.sum(F.octet_length(name)), nodes)
        .first()
    )
    return int(measured[0]) // 2, int(measured[1] or 0), int(measured[2])


def choose_driver(
    spark,
    edges: int,
    name_bytes: int,
    max_driver_edges: int | None,
    free: DriverMemory | None,
    nodes: int | None = None,
) -> tuple[bool, str]:
    """(driver method or not, why): max_driver_edges when given, else by memory."""
    if max_driver_edges is not None:
        fits = edges <= max_driver_edges
        relation = "<=" if fits else ">"
        return fits, f"{edges:,} edges {relation} max_driver_edges={max_driver_edges:,}"
    return decide(edges, name_bytes, free if free is not None else driver_memory(spark), nodes)


def _validate(
    edges: DataFrame,
    src: str,
    dst: str,
    node_col: str,
    component_col: str,
    max_driver_edges: int | None,
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
    if max_driver_edges is not None and (
        not isinstance(max_driver_edges, int) or max_driver_edges < 0
    ):
        raise ClosureError(f"'max_driver_edges' is set to {max_driver_edges!r} but must be >= 0")
    if not isinstance(max_rounds, int) or max_rounds <= 0:
        raise ClosureError(f"'max_rounds' is set to {max_rounds!r} but must be > 0")


def _canonical(pairs: DataFrame) -> DataFrame:
    """Undirected edges as (smaller id, larger id), deduplicated; self-edges kept once."""
    return pairs.select(F.least("a", "b").alias("a"), F.greatest("a", "b").alias("b")).distinct()


def _dense_ids(nodes: DataFrame) -> DataFrame:
    """0..n-1 ids in node order: the fallback when two names hash alike."""
    indexed = nodes.select("node").rdd.map(lambda r: r[0]).sortBy(lambda n: n).zipWithIndex()
    return indexed.toDF(["node", "nid"])


def _driver_components(
    spark, pairs: DataFrame, node_col: str, component_col: str, stats: ClosureStats
) -> DataFrame:
    """Everything on the driver: the names come as Arrow batches, ``label_arrow``
    labels them, and the labelled names go back as Arrow batches in a broadcast that
    the tasks of the returned DataFrame read.

    No pandas on either side: ``toPandas`` made a Python string of every name, and a
    DataFrame made from pandas is converted from Arrow again on every read, row by
    row; at 1M edges the two cost about 5 s of the 7 s this step took (now 2 s)."""
    import pyarrow as pa

    schema = f"`{node_col}` string, `{component_col}` string"
    batches = pairs._collect_as_arrow()  # what toPandas collects, without pandas
    if not batches:
        return spark.createDataFrame([], schema)
    frame = pa.Table.from_batches(batches)
    names, components = label_arrow(frame.column(0), frame.column(1))
    stats.nodes = len(names)
    labelled = pa.table([names, components], names=[node_col, component_col])
    return from_driver(spark, labelled, schema)


def label_arrow(sources, targets) -> tuple:
    """The components of the graph whose edges are the Arrow string arrays ``sources``
    and ``targets`` (no nulls), in the driver: ``(names, components)``, every node
    name once with the smallest name of its component. Arrow's dictionary encoding
    numbers the names exactly and scipy labels them in one linear pass."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components as scipy_components

    m = len(sources)
    # both ends in one array (64-bit offsets: a graph's names may pass 2 GB)
    chunks = [
        chunk.cast(pa.large_string())
        for column in (sources, targets)
        for chunk in (column.chunks if isinstance(column, pa.ChunkedArray) else [column])
    ]
    ends = pa.chunked_array(chunks, pa.large_string()).combine_chunks().dictionary_encode()
    names, codes = ends.dictionary, ends.indices.to_numpy()
    n = len(names)
    graph = coo_matrix((np.ones(m, dtype=np.int8), (codes[:m], codes[m:])), shape=(n, n)).tocsr()
    count, labels = scipy_components(graph, directed=False)
    # smallest name per component: rank names by byte order (= Spark's string order)
    order = pc.sort_indices(names).to_numpy()
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    smallest = np.full(count, n, dtype=np.int64)
    np.minimum.at(smallest, labels, rank)
    return names, names.take(pa.array(order[smallest[labels]]))


# rows per Arrow batch of a result the driver sends back (from_driver)
DRIVER_BATCH_ROWS = 1 << 16


def from_driver(spark, table, schema: str) -> DataFrame:
    """A DataFrame of an Arrow table the driver holds (``schema``: its Spark DDL, the
    table's columns in order; large strings are sent as strings): the batches go out
    in one broadcast (Arrow IPC), and each of a few tasks yields its share of them
    (``mapInArrow``, columnar into Spark). ``createDataFrame`` would put them in the
    tasks' closures and convert them row by row on every read."""
    import pyarrow as pa

    rows = table.num_rows
    batch_schema = pa.schema(
        [
            (field.name, pa.string() if pa.types.is_large_string(field.type) else field.type)
            for field in table.schema
        ]
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch_schema) as writer:
        # cast slice by slice: a column of large strings may pass 2 GB, a slice not
        for start in range(0, rows, DRIVER_BATCH_ROWS):
            part = table.slice(start, DRIVER_BATCH_ROWS).cast(batch_schema).combine_chunks()
            for batch in part.to_batches():
                writer.write_batch(batch)
    sc = spark.sparkContext
    shared = sc.broadcast(sink.getvalue().to_pybytes())
    tasks = max(1, min(sc.defaultParallelism, -(-rows // DRIVER_BATCH_ROWS)))

    def share(numbers: Iterator) -> Iterator:
        import pyarrow as pa

        for numbered in numbers:
            for task in numbered.column(0).to_pylist():
                stream = pa.ipc.open_stream(pa.py_buffer(shared.value))
                for index, batch in enumerate(stream):
                    if index % tasks == task:
                        yield batch

    return spark.range(tasks, numPartitions=tasks).mapInArrow(share, schema)


def _distributed_components(
    pairs: DataFrame,
    node_col: str,
    component_col: str,
    max_rounds: int,
    max_task_edges: int,
    stats: ClosureStats,
) -> DataFrame:
    """Names hashed to 64-bit ids (dense ids if two collide), then rounds in Spark."""
    started = time.monotonic()
    nodes = (
        pairs.select(F.col("s").alias("node"))
        .union(pairs.select(F.col("d").alias("node")))
        .distinct()
        .withColumn("nid", F.xxhash64("node"))
    )
    nodes = materialize(nodes)
    counts = nodes.agg(F.count(F.lit(1)).alias("n"), F.countDistinct("nid").alias("ids")).first()
    stats.nodes = int(counts["n"])
    if counts["n"] == counts["ids"]:
        hashed = pairs.select(F.xxhash64("s").alias("a"), F.xxhash64("d").alias("b"))
    else:
        logger.info("closure: 64-bit id collision among %s nodes; using dense ids", counts["n"])
        nodes = materialize(_dense_ids(nodes))
        hashed = (
            pairs.join(nodes.withColumnRenamed("node", "s").withColumnRenamed("nid", "a"), "s")
            .join(nodes.withColumnRenamed("node", "d").withColumnRenamed("nid", "b"), "d")
            .select("a", "b")
        )
    logger.info("closure: %d nodes numbered in %.1fs", stats.nodes, time.monotonic() - started)
    started = time.monotonic()
    graph = materialize(_local_stars(hashed))
    edges = graph.count()
    logger.info(
        "closure: %d edges contracted to %d in their partitions in %.1fs",
        stats.edges,
        edges,
        time.monotonic() - started,
    )
    roots, stats.rounds = _distributed_roots(graph, edges, max_rounds, max_task_edges)
    return _labels(nodes, roots, node_col, component_col)


def _local_stars(int_edges: DataFrame) -> DataFrame:
    """Each partition's edges replaced by one star per local component (no shuffle)."""
    stars = int_edges.select("a", "b").mapInArrow(local_roots, ROOTS_SCHEMA)
    return stars.select(F.col("p").alias("a"), F.col("x").alias("b"))


def _closed_in_one_task(graph: DataFrame) -> DataFrame:
    """Every node's final parent, the remaining graph closed in one task."""
    one = graph.select("a", "b").repartition(1)
    return one.mapInArrow(local_roots, ROOTS_SCHEMA).select(
        F.col("x").alias("nid"), F.col("p").alias("root")
    )


def _labels(nodes: DataFrame, roots: DataFrame, node_col: str, component_col: str) -> DataFrame:
    """Each named node with the smallest name of its root's component.

    The smallest name per root is an aggregation (partial in every task, so a giant
    component costs one row per task, not one task's sort as a window by root did),
    then joined back: where components are few that side is small and broadcast.
    """
    named = materialize(
        nodes.join(roots, "nid", "left").select("node", F.coalesce("root", "nid").alias("root"))
    )
    smallest = named.groupBy("root").agg(F.min("node").alias(component_col))
    return named.join(smallest, "root").select(F.col("node").alias(node_col), component_col)


def _distributed_roots(
    graph: DataFrame, edges: int, max_rounds: int, max_task_edges: int
) -> tuple[DataFrame, int]:
    """``(nid, root)`` of every node of ``graph`` (a, b; ``edges`` rows) that is not
    its component's root, and the rounds it took."""
    moved: list[DataFrame] = []
    rounds = 0
    while edges:
        rounds += 1
        started = time.monotonic()
        if edges <= max_task_edges:
            moved.append(materialize(_closed_in_one_task(graph)))
            logger.info(
                "closure round %d: the last %d edges closed in one task in %.1fs",
                rounds,
                edges,
                time.monotonic() - started,
            )
            break
        if rounds > max_rounds:
            raise ClosureError(
                f"connected_components did not converge in max_rounds={max_rounds}; "
                f"raise 'max_rounds' (the graph still has {edges} edges)"
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
        graph = materialize(_canonical(renamed).where(F.col("a") != F.col("b")))
        edges = graph.count()
        logger.info(
            "closure round %d: %d edges left in %.1fs", rounds, edges, time.monotonic() - started
        )

    if not moved:
        empty = graph.sparkSession.createDataFrame([], "nid long, root long")
        return empty, rounds
    if len(moved) == 1 and rounds == 1 and edges <= max_task_edges:
        return moved[0], rounds  # closed in one task: every parent is a root
    # every node moves at most once, always to a smaller id: a forest
    parent = moved[0]
    for step in moved[1:]:
        parent = parent.union(step)
    parent = parent.select(F.col("nid").alias("x"), F.col("root").alias("p"))
    return _resolve(materialize(parent)), rounds


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
        nxt = materialize(nxt)
        if nxt.where("moved").isEmpty():
            return nxt.select("nid", "root")
        current = nxt.select("nid", "root")
