"""The driver path of a components run that follows the change (``entity_components``
with its state in the driver): the stored rows the change affects are found in Spark
and read as Arrow, the Spark path's hops (``components._components``) are Arrow
filters on them, the affected edges are closed in the driver, and the rows to write are
array lookups on the nodes' numbers in one dictionary. The same rows as the Spark path,
which the property test of tests/functional holds to a from-scratch build."""

from __future__ import annotations

import logging
import time
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dbt_merge.entity_merge.closure import (
    ClosureStats,
    choose_driver,
    connected_components,
    from_driver,
    label_arrow,
)
from dbt_merge.entity_merge.state import (
    BROADCAST_ROWS,
    CHANGES_SCHEMA,
    IN_LIST_ROWS,
    PREVIOUS_COMPONENT,
    STORED,
    TOUCHED,
    VALUE_NODE_PREFIX,
    WHOLE,
    for_writing,
)

logger = logging.getLogger(__name__)


def _arrow(df: DataFrame):
    """The rows of df in the driver, as an Arrow table (its schema when empty)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    batches = df._collect_as_arrow()
    if not batches:
        return to_arrow_schema(df.schema).empty_table()
    return pa.Table.from_batches(batches)


def closed_in_driver(
    live: DataFrame,
    previous: DataFrame,
    new: DataFrame | None,
    batch: int,
    rebuild_share: float = 1.0,
    **closure_options: Any,
) -> DataFrame:
    """The rows of a run that follows the change, found in the driver: the stored rows
    the run reads (the touched nodes', the placeholders, every node of the touched
    nodes' components) come from two scans in Spark (``_affected_state``), never the
    whole state, and the rest of the Spark path's hops are Arrow filters on them
    (``_forced``). Then the live edges of the affected entity nodes come from one
    scan, their closure is labelled in the driver (``closure.label_arrow``) unless it
    does not fit (``connected_components`` then chooses), and the rows to write are
    the full outer join of the two (``_changes_arrow``). The same rows as the Spark
    path, which the property test of tests/functional holds to a from-scratch build.
    new: the edges of the new batches, or None when every edges row is new; then, or
    when more than rebuild_share of the graph's nodes are affected, the whole graph is
    closed again and replaces the table (``_whole_in_driver``), from the whole state,
    read then.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    spark = live.sparkSession
    started = time.monotonic()
    had = (
        F.col(PREVIOUS_COMPONENT)
        if PREVIOUS_COMPONENT in previous.columns
        else F.lit(None).cast("string").alias(PREVIOUS_COMPONENT)
    )
    columns = previous.select("node", "component", "_batch", had)
    if new is None:
        state = _arrow(columns)
        logger.info(
            "entity_components: the whole state in the driver: %s rows, read in %.1fs",
            f"{state.num_rows:,}",
            time.monotonic() - started,
        )
        return _whole_in_driver(live, state, None, None, batch, **closure_options)
    added = _arrow(new.select("src", "dst"))
    touched = pc.unique(
        pa.chunked_array(
            added.column("src").chunks + pc.drop_null(added.column("dst")).chunks, pa.string()
        )
    )
    sources = pc.unique(added.column("src"))
    state, total = _affected_state(columns, touched)
    read_s = time.monotonic() - started
    node, component = state.column("node"), state.column("component")
    forced, affected_rows, read = _forced(state, touched)
    fresh = pc.filter(sources, pc.invert(pc.is_in(sources, value_set=pc.filter(node, read))))
    affected_count = (pc.sum(affected_rows).as_py() or 0) + len(fresh)
    # of the graph's nodes after the run (the stored ones and the new)
    share = affected_count / max(1, total + len(fresh))
    logger.info(
        "entity_components: %s nodes affected (%.2f%% of %s stored), their %s stored rows"
        " found in Spark and read in %.1fs",
        f"{affected_count:,}",
        100 * share,
        f"{total:,}",
        f"{state.num_rows:,}",
        read_s,
    )
    if share > rebuild_share:
        logger.info(
            "entity_components: over rebuild_share=%s of the nodes affected: the whole graph"
            " is closed again and replaces the table, the state read whole",
            rebuild_share,
        )
        del state, node, component, forced, affected_rows, read
        whole = _arrow(columns)
        forced, _, _ = _forced(whole, touched)
        return _whole_in_driver(live, whole, forced, touched, batch, **closure_options)
    stored = pa.table(
        {
            "node": pc.filter(node, affected_rows),
            PREVIOUS_COMPONENT: pc.filter(component, affected_rows),
            TOUCHED: pc.filter(forced, affected_rows),
        }
    )
    del state, node, component
    affected = pa.concat_tables(
        [
            stored.append_column(STORED, pa.array(np.ones(stored.num_rows, dtype=bool))),
            pa.table(
                {
                    "node": fresh,
                    PREVIOUS_COMPONENT: pa.nulls(len(fresh), pa.string()),
                    TOUCHED: pa.array(np.ones(len(fresh), dtype=bool)),
                    STORED: pa.array(np.zeros(len(fresh), dtype=bool)),
                }
            ),
        ]
    )
    names = affected.column("node")
    nodes = pc.filter(names, pc.invert(pc.starts_with(names, VALUE_NODE_PREFIX)))
    closed = _close_in_driver(live, nodes, **closure_options)
    return for_writing(from_driver(spark, _changes_arrow(closed, affected, batch), CHANGES_SCHEMA))


def _affected_state(columns: DataFrame, touched) -> tuple:
    """The stored rows (node, component, batch, previous component) that a run whose new
    edges touch the nodes ``touched`` (an Arrow array) reads: the rows of the touched
    nodes, the placeholders a run that died left (no batch), and every row of a
    component of a touched node. Two scans of the state in Spark, the touched nodes and
    then their components given to them (``_keyed``; the first also counts the state's
    rows), and only those rows come to the driver, as an Arrow table; with the row
    count."""
    import pyarrow as pa

    chosen = _keyed(columns, "node", touched, "$chosen")
    # one scan: the state's rows, and the components of the touched nodes
    total, labels = chosen.agg(
        F.count(F.lit(1)), F.collect_set(F.when(F.col("$chosen"), F.col("component")))
    ).first()
    labelled = _keyed(chosen, "component", pa.array(labels, pa.string()), "$labelled")
    read = F.col("$labelled") | F.col("$chosen") | F.col("_batch").isNull()
    rows = labelled.where(read).select(*columns.columns)
    # read whole: this path is taken when the whole state fits the driver (a limit
    # would gather the rows in one task first: 16 s for 1.95M rows at 10M records)
    return _arrow(rows), total


def _keyed(df: DataFrame, column: str, keys, flag: str | None = None) -> DataFrame:
    """The rows of df whose string column is one of keys (an Arrow array): a literal
    ``in`` list while they are at most ``IN_LIST_ROWS``, else a semi join with them
    broadcast (``BROADCAST_ROWS`` at most) or shuffled. With flag: every row of df,
    with a boolean column of that name that says whether it is one of them."""
    import pyarrow as pa

    if len(keys) <= IN_LIST_ROWS:
        found = F.col(column).isin(keys.to_pylist())
        return df.withColumn(flag, found) if flag else df.where(found)
    wanted = from_driver(df.sparkSession, pa.table({column: keys}), f"`{column}` string")
    wanted = F.broadcast(wanted) if len(keys) <= BROADCAST_ROWS else wanted
    if not flag:
        return df.join(wanted, column, "left_semi")
    marked = wanted.withColumn(flag, F.lit(True))
    return df.join(marked, column, "left").withColumn(flag, F.col(flag).isNotNull())


def _forced(state, touched) -> tuple:
    """Of each row of the state (an Arrow table with node, component, _batch) given the
    touched nodes (those of the new edges): whether it is written whatever its component
    (an entity node of the new edges, or a placeholder a run that died left), and
    whether it is affected (its component is one of the touched nodes', or it is read
    as touched or a placeholder), and whether it is read (touched, or a placeholder).
    Three boolean arrays."""
    import pyarrow.compute as pc

    node, component = state.column("node"), state.column("component")
    is_touched = pc.is_in(node, value_set=touched)
    # the stored rows of the touched nodes, and the placeholders a run that died left
    read = pc.or_(is_touched, pc.is_null(state.column("_batch")))
    labels = pc.unique(pc.drop_null(pc.filter(component, is_touched)))
    affected_rows = pc.or_(pc.is_in(component, value_set=labels), read)
    entity = pc.invert(pc.starts_with(node, VALUE_NODE_PREFIX))
    return pc.and_(read, pc.or_(pc.invert(is_touched), entity)), affected_rows, read


def _whole_in_driver(
    live: DataFrame, state, forced, touched, batch: int, **closure_options: Any
) -> DataFrame:
    """The whole state after a run, to replace the table (``WHOLE``): every live edge
    closed again in the driver (``_close_in_driver``), joined with the stored state
    (an Arrow table with node, component, batch and previous component, as
    ``closed_in_driver`` read it). The rows equal the table a run that writes only the
    changes leaves: a node written by the run (its component changed, or it is forced:
    ``forced``, from ``_forced``; every node when forced is None, every edges row new)
    has this batch and the component it had; every other stored row is kept as it is;
    value nodes out of the graph are gone; a new entity node of the new edges without
    an edge (a deleted record) has a tombstone."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    spark = live.sparkSession
    started = time.monotonic()
    if forced is None:
        forced = pa.array(np.ones(state.num_rows, dtype=bool))
    closed = _close_in_driver(live, None, **closure_options)
    names = closed.column("node").cast(pa.large_string())
    labels = closed.column("component").cast(pa.large_string())
    del closed
    node = state.column("node").cast(pa.large_string())
    # the closed names, the stored nodes and the touched ones as numbers of one
    # dictionary: each stored node's row among the closed names (-1: out of the graph),
    # and which names are stored, are then array lookups
    alone = None
    if touched is not None:
        # a new record without an edge (deleted, or gone): its tombstone, as a run that
        # writes the changes writes it
        alone = pc.filter(touched, pc.invert(pc.starts_with(touched, VALUE_NODE_PREFIX)))
    size, codes = _codes(names, node, *([] if alone is None else [alone]))
    closed_row = _positions(codes[0], size)
    at = closed_row[codes[1]]
    stored_code = np.zeros(size, dtype=bool)
    stored_code[codes[1]] = True
    component = pc.take(labels, pa.array(at, mask=at < 0))
    before = state.column("component").cast(pa.large_string())
    kept = pc.invert(
        pc.and_(pc.is_null(component), pc.starts_with(node, VALUE_NODE_PREFIX))
    )  # a value node out of the graph is gone
    written = pc.or_(forced, pc.invert(_same(component, before)))
    stored = pa.table(
        {
            "node": pc.filter(node, kept),
            "component": pc.filter(component, kept),
            "_batch": pc.filter(
                pc.if_else(written, pa.scalar(batch, pa.int64()), state.column("_batch")), kept
            ),
            PREVIOUS_COMPONENT: pc.filter(
                pc.if_else(
                    written, before, state.column(PREVIOUS_COMPONENT).cast(pa.large_string())
                ),
                kept,
            ),
            STORED: pc.filter(pa.array(np.ones(state.num_rows, dtype=bool)), kept),
        }
    )
    fresh = pa.array(~stored_code[codes[0]])
    added_names = pc.filter(names, fresh)
    added_labels = pc.filter(labels, fresh)
    if alone is not None:
        lone = pa.array((closed_row[codes[2]] < 0) & ~stored_code[codes[2]])
        alone = pc.filter(alone, lone).cast(pa.large_string())
        added_names = pa.chunked_array([*added_names.chunks, alone], pa.large_string())
        added_labels = pa.chunked_array(
            [*added_labels.chunks, pa.nulls(len(alone), pa.large_string())], pa.large_string()
        )
    added = len(added_names)
    rows = pa.concat_tables(
        [
            stored,
            pa.table(
                {
                    "node": added_names,
                    "component": added_labels,
                    "_batch": pa.array(np.full(added, batch, dtype=np.int64)),
                    PREVIOUS_COMPONENT: pa.nulls(added, pa.large_string()),
                    STORED: pa.array(np.zeros(added, dtype=bool)),
                }
            ),
        ]
    )
    count = rows.num_rows
    rows = rows.add_column(4, "$drop", pa.array(np.zeros(count, dtype=bool)))
    rows = rows.append_column(WHOLE, pa.array(np.ones(count, dtype=bool)))
    logger.info(
        "entity_components: the whole state: %s rows, %s written by this run, in %.1fs",
        f"{count:,}",
        f"{(pc.sum(pc.filter(written, kept)).as_py() or 0) + added:,}",
        time.monotonic() - started,
    )
    del state, names, labels, node, component, before, codes
    # from the driver in a few partitions, written as they are (no rebalance)
    return from_driver(spark, rows, f"{CHANGES_SCHEMA}, `{WHOLE}` boolean")


def _codes(*arrays) -> tuple:
    """Each string array (Arrow, without nulls) as the numbers of its strings in one
    dictionary of all their strings: ``(size, codes)``, the number of distinct strings
    and a NumPy array per array. One hash of each string, after which lookups between
    the arrays are NumPy indexing (``_positions``) where Arrow's ``is_in`` and
    ``index_in`` would hash the value set again on every call."""
    import numpy as np
    import pyarrow as pa

    chunks = [
        chunk.cast(pa.large_string())
        for array in arrays
        for chunk in (array.chunks if isinstance(array, pa.ChunkedArray) else [array])
    ]
    encoded = pa.chunked_array(chunks, pa.large_string()).combine_chunks().dictionary_encode()
    numbers = encoded.indices.to_numpy().astype(np.int64, copy=False)
    return len(encoded.dictionary), np.split(
        numbers, np.cumsum([len(array) for array in arrays])[:-1]
    )


def _positions(codes, size: int):
    """For each of size numbers, its position in codes (distinct numbers), else -1."""
    import numpy as np

    positions = np.full(size, -1, dtype=np.int64)
    positions[codes] = np.arange(len(codes), dtype=np.int64)
    return positions


def _close_in_driver(live: DataFrame, nodes, **closure_options: Any):
    """The components of the live edges whose src is one of the entity nodes ``nodes``
    (an Arrow array; None: every live edge): one scan of the edges (the nodes broadcast
    to it while they are few, else every live edge read and filtered here), labelled in
    the driver when the closure's memory check lets it, else by
    ``connected_components``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    spark = live.sparkSession
    stats = closure_options.get("stats") or ClosureStats()
    started = time.monotonic()
    few = nodes is not None and len(nodes) <= BROADCAST_ROWS
    subgraph_rows = live if nodes is None else _keyed(live, "src", nodes)
    if few:
        subgraph = _arrow(subgraph_rows)
    else:
        subgraph = _arrow(live)
        if nodes is not None:
            subgraph = subgraph.filter(pc.is_in(subgraph.column("src"), value_set=nodes))
    sources, targets = subgraph.column("src"), subgraph.column("dst")
    name_bytes = pc.sum(pc.binary_length(sources)).as_py() or 0
    name_bytes += pc.sum(pc.binary_length(targets)).as_py() or 0
    fits, stats.reason = choose_driver(
        spark,
        subgraph.num_rows,
        name_bytes,
        closure_options.get("max_driver_edges"),
        closure_options.get("driver_free"),
    )
    if not fits:
        logger.info("entity_components: the affected subgraph closed in Spark: %s", stats.reason)
        del subgraph, sources, targets
        return _arrow(connected_components(subgraph_rows, "src", "dst", **closure_options))
    names, components = label_arrow(sources, targets)
    stats.method, stats.rounds = "driver", 1
    stats.edges, stats.nodes = subgraph.num_rows, len(names)
    stats.seconds = time.monotonic() - started
    logger.info(
        "entity_components: %s edges of the affected nodes closed in the driver in %.1fs",
        f"{subgraph.num_rows:,}",
        stats.seconds,
    )
    return pa.table({"node": names, "component": components})


def _changes_arrow(closed, affected, batch: int):
    """``components._changes`` on Arrow tables in the driver: closed (node, component),
    affected (node, PREVIOUS_COMPONENT, TOUCHED, STORED); the same rows. The full outer join of
    the two by node is array lookups on the nodes' numbers in one dictionary
    (``_codes``; Arrow's hash join of the names took 3.5 s of a run that affected 2.1M
    nodes): every closed node, with its affected row when it has one, then the affected
    nodes outside the closure."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    text = pa.large_string()
    closed_nodes = closed.column("node").cast(text)
    affected_nodes = affected.column("node").cast(text)
    size, codes = _codes(closed_nodes, affected_nodes)
    at = _positions(codes[1], size)[codes[0]]
    closed_code = np.zeros(size, dtype=bool)
    closed_code[codes[0]] = True
    outside = pa.array(~closed_code[codes[1]])
    outside_rows = pc.sum(outside).as_py() or 0
    matched = pa.array(at, mask=at < 0)

    def joined(name: str, cast=None):
        # the column of affected for every closed node (null: none), then outside it
        column = affected.column(name)
        column = column.cast(cast) if cast is not None else column
        return pa.chunked_array(
            [*pc.take(column, matched).chunks, *pc.filter(column, outside).chunks], column.type
        )

    node = pa.chunked_array(
        [*closed_nodes.chunks, *pc.filter(affected_nodes, outside).chunks], text
    )
    component = pa.chunked_array(
        [*closed.column("component").cast(text).chunks, pa.nulls(outside_rows, text)], text
    )
    previous = joined(PREVIOUS_COMPONENT, text)
    in_closure = pa.array(
        np.concatenate([np.ones(closed.num_rows, dtype=bool), np.zeros(outside_rows, dtype=bool)])
    )
    drop = pc.and_(pc.invert(in_closure), pc.starts_with(node, VALUE_NODE_PREFIX))
    changed = pc.or_(pc.fill_null(joined(TOUCHED), True), pc.invert(_same(component, previous)))
    keep = pc.or_(changed, drop)
    rows = pc.sum(keep).as_py() or 0
    return pa.table(
        {
            "node": pc.filter(node, keep),
            "component": pc.filter(component, keep),
            "_batch": pa.array(np.full(rows, batch, dtype=np.int64)),
            PREVIOUS_COMPONENT: pc.filter(previous, keep),
            "$drop": pc.filter(drop, keep),
            STORED: pc.filter(pc.fill_null(joined(STORED), False), keep),
        }
    )


def _same(left, right):
    """Arrow: whether left and right are equal, null-safe (two nulls are equal)."""
    import pyarrow.compute as pc

    return pc.or_(
        pc.and_(pc.is_null(left), pc.is_null(right)), pc.fill_null(pc.equal(left, right), False)
    )
