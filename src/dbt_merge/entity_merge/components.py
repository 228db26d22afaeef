"""The Python step of an entity merge: the closure of its equality edges.

A merge is three dbt nodes: ``dbt_merge.equality_edges(name)`` (SQL) writes the
equality graph, a Python model turns it into components with ``entity_components``,
and ``dbt_merge.merge_entities(name, ref(<components>))`` (SQL) builds the golden
records. A components model is two lines::

    from dbt_merge.entity_merge import entity_components

    def model(dbt, session):
        dbt.config(materialized="table")
        return entity_components(dbt.ref("customers_edges"))

A merge that follows the change keeps its components as state (the edges model is
incremental too, see ``equality_edges``)::

    def model(dbt, session):
        dbt.config(materialized="incremental", incremental_strategy="entity_state")
        previous = dbt.this if dbt.is_incremental else None
        return entity_components(dbt.ref("customers_edges"), previous=previous)

Then a run closes again only the components that the edges' new batches touch. Given
by name (``dbt.this``), an Iceberg table is read at one snapshot, which the batch
carries to the ``entity_state`` strategy (``READ_AT``): the batch is then written only
if no other run committed to the table since (see ``get_incremental_entity_state_sql``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dbt_merge.core.errors import failpoint
from dbt_merge.core.spark import materialize
from dbt_merge.entity_merge.closure import (
    ClosureError,
    ClosureStats,
    choose_driver,
    connected_components,
    from_driver,
    label_arrow,
)
from dbt_merge.entity_merge.closure_memory import driver_memory, state_fits

logger = logging.getLogger(__name__)

# value nodes of the equality graph start with it; the macros write it with
# _entity_value_node_prefix() (macros/entity_merge/_entity_nodes.sql), the same string
VALUE_NODE_PREFIX = "="

# the column of a components row with the component its node had before the run that
# wrote the row (null: new, or a first run); the merged model reads the ids it held
# from it (dbt_merge._entity_old_ids_sql)
PREVIOUS_COMPONENT = "previous_component"

# the column of a batch row that says whether the table holds a row of its node (the
# entity_state strategy then appends the placeholders of new nodes without reading
# the table: get_incremental_entity_state_sql)
STORED = "$stored"

# a column of the affected nodes of a run: whether the run writes the node's row even
# when its component did not change (a node of the new edges batches, or a placeholder;
# see _changes)
TOUCHED = "$touched"

# the column of a batch row with the Iceberg snapshot of the components table that the
# run read (given by name: entity_components' previous); the strategy writes the batch
# only if the table is still there (a batch on a branch starts the branch there), so
# that another run's commit since is not overwritten (_entity_state_read_base)
READ_AT = "$read_at"

# the environment variable that chooses where a run that follows the change works when
# the model does not (entity_components' state_in_driver): 1 the driver, 0 Spark
STATE_IN_DRIVER_ENV = "DBT_MERGE_STATE_IN_DRIVER"

# the share of the state's nodes that a run may find affected and still write only the
# changed rows; above it the run closes everything and replaces the table
# (entity_components' rebuild_share). On the 3M benchmark's 4.6M-node state: with 53%
# affected, 17.2 s writing the changes and 22.0 s replacing the table; with 96%, 39.6 s
# and 26.3 s (bench/entity_merge_bench.py --incremental, one run each)
REBUILD_SHARE = 0.6

# the environment variable that sets rebuild_share when the model does not
REBUILD_SHARE_ENV = "DBT_MERGE_REBUILD_SHARE"

# the column of a batch that holds the whole state (a run that rebuilt it): the
# entity_state strategy replaces the table with it (get_incremental_entity_state_sql)
WHOLE = "$whole"

# a set of at most this many nodes (or labels) is broadcast to the join that reads
# the stored edges or components (some tens of MB of names)
BROADCAST_ROWS = 1_000_000


def entity_components(
    edges: DataFrame,
    previous: DataFrame | str | None = None,
    state_in_driver: bool | None = None,
    rebuild_share: float | None = None,
    **closure_options: Any,
) -> DataFrame:
    """Component of every node of an ``equality_edges`` table.

    Args:
        edges: the edges model (columns ``src``, ``dst``; an edges table of this
            version also has ``fingerprint`` and ``_batch``). Entity nodes are named
            ``<offset>|<id>``; value nodes start with ``VALUE_NODE_PREFIX`` (``=``).
        previous: the components model's stored table, in an incremental run of a
            merge that follows the change; None for a full build. Best given by name
            (``dbt.this``, or its string): an Iceberg table is then read at the
            snapshot current when the run starts, and every row of the batch says
            which (``READ_AT``), so that the strategy refuses to write the batch over
            another run's commit since. A DataFrame of the table works as before,
            without that check of the Python step's seconds.
        state_in_driver: where a run that follows the change works, when previous is
            an Iceberg table given by name: True reads the state once into the
            driver and finds the affected components there (``_closed_in_driver``),
            False takes the hops in Spark, one scan each; None (the default) chooses
            by the driver's free memory (``state_fits``), unless the environment
            variable ``DBT_MERGE_STATE_IN_DRIVER`` says ``1`` or ``0``. The log says
            which was taken and why.
        rebuild_share: in a run that works in the driver, the share of the graph's
            nodes above which the run closes the whole graph again and replaces the
            table (one overwrite) rather than writing the changed rows of the
            affected components (a MERGE that finds each of them); the same rows
            either way. A run that finds every edges row new (the edges built again
            from scratch) always does. 0 or more (1 or more: only then);
            None (the default) takes the environment variable
            ``DBT_MERGE_REBUILD_SHARE`` when set, else ``REBUILD_SHARE``.
        **closure_options: passed to ``dbt_merge.closure.connected_components``
            (``max_driver_edges``, ``max_rounds``, ``stats``).

    Returns:
        Without ``previous``: one row per node: ``node``, ``component`` (the smallest
        node name of the component, so the same graph always gives the same labels)
        and, from an edges table with batches, ``_batch`` (the edges' last batch).
        With ``previous``: the rows that change, for the ``entity_state`` strategy
        (a ``$drop`` column; a gone entity node keeps a row with a null component),
        and whether the table holds a row of the node (``$stored``).
        Rows of a merge that follows the change also carry ``previous_component``:
        the component the node had before the run (null when new, or on a first run).
        Old edges tables without batches give entity nodes only, as before.
    """
    failpoint("entity_merge.before_components")  # the edges committed, the components not
    _check_state_choice(state_in_driver)
    rebuild_share = _check_rebuild_share(rebuild_share)
    read_at = table = None
    if previous is not None and not isinstance(previous, DataFrame):
        table = _table_name(previous)
        previous, read_at = _read_pinned(edges.sparkSession, table)

    def in_driver() -> bool:  # asked once a run has new batches to close
        return read_at is not None and _state_in_driver(edges.sparkSession, table, state_in_driver)

    rows = _components(edges, previous, in_driver, rebuild_share, **closure_options)
    return rows if read_at is None else rows.withColumn(READ_AT, F.lit(read_at).cast("bigint"))


def _table_name(previous: Any) -> str:
    """The name of the table that previous (a string or dbt's ``this``) names."""
    if isinstance(previous, str) or hasattr(previous, "identifier"):
        return str(previous)
    raise ClosureError(
        "entity_components, argument 'previous': must be the components model's own"
        " table, by name (dbt.this) or as a DataFrame, or None on a full build"
        f" (got {previous!r})"
    )


def _read_pinned(session: SparkSession, name: str) -> tuple[DataFrame, int | None]:
    """The table name as of its current snapshot, and that snapshot's id; a table that
    is not Iceberg (or has no snapshot yet) as it is, and None."""
    if not session.catalog.tableExists(name):
        raise ClosureError(
            f"entity_components, argument 'previous': no table {name!r}; pass the"
            " components model's own table (dbt.this) on incremental runs, else None"
        )
    details = session.sql(f"describe table extended {name}").collect()
    provider = next((row[1] for row in details if row[0] == "Provider"), None)
    if str(provider).lower() != "iceberg":
        return session.table(name), None
    # the table's version as the strategy reads it to compare (macro _table_version)
    current = session.sql(
        f"select snapshot_id from {name}.history where is_current_ancestor"
        " order by made_current_at desc limit 1"
    ).first()
    if current is None:
        return session.table(name), None
    return session.sql(f"select * from {name} version as of {current[0]}"), current[0]


def _components(
    edges: DataFrame,
    previous: DataFrame | None,
    in_driver: Callable[[], bool] = lambda: False,
    rebuild_share: float = 1.0,
    **closure_options: Any,
) -> DataFrame:
    """entity_components' rows, from previous as a DataFrame; in_driver: asked when a
    run that follows the change has new batches to close, whether it finds the affected
    components in the driver (``_closed_in_driver``) or in Spark; rebuild_share: see
    ``entity_components``."""
    if "_batch" not in edges.columns:
        components = connected_components(edges, "src", "dst", **closure_options)
        return _for_writing(components.where(~F.col("node").startswith(VALUE_NODE_PREFIX)))
    # deleted and gone records have a row without an edge (null dst); a row without a
    # batch is a placeholder of a state MERGE that has not happened (a run died
    # between the two commits of a large batch: see the entity_state strategy)
    live = edges.where(F.col("dst").isNotNull() & F.col("_batch").isNotNull()).select("src", "dst")
    seen = previous.agg(F.max("_batch")).first()[0] if previous is not None else None
    if seen is None:
        # a first run, or an empty state: close everything
        batch = edges.agg(F.max("_batch")).first()[0]
        closed = connected_components(live, "src", "dst", **closure_options)
        if previous is None or batch is None:
            return _for_writing(_state_rows(closed, batch or 0))
        return _changes(closed, _previous_labels(previous), batch)

    # the edges rows of batches after the last one closed: the data files of earlier
    # batches are skipped by their statistics of _batch, so this reads few rows
    new = materialize(edges.where(F.col("_batch") > seen).select("src", "dst", "_batch"))
    batch = new.agg(F.max("_batch")).first()[0]
    if batch is None:
        logger.info("entity_components: edges batch %s already closed: nothing to do", seen)
        return _changes(previous.limit(0), _previous_labels(previous.limit(0)), seen)
    rebuilt = edges.where(F.col("_batch") <= seen).limit(1).count() == 0
    if rebuilt:
        # the edges were rebuilt (every batch is new): close everything again
        logger.info("entity_components: edges rebuilt since batch %s: closing all", seen)
    if in_driver():
        return _closed_in_driver(
            live, previous, None if rebuilt else new, batch, rebuild_share, **closure_options
        )
    if rebuilt:
        closed = connected_components(live, "src", "dst", **closure_options)
        return _changes(closed, _previous_labels(previous), batch)
    # each step is computed once and joined by broadcast while it is small: the stored
    # edges and components are then read without a shuffle
    touched = materialize(
        new.select(F.col("src").alias("node"))
        .union(new.where(F.col("dst").isNotNull()).select(F.col("dst").alias("node")))
        .distinct()
    )
    # the stored rows of the touched nodes, and in the same scan the placeholders that a
    # run which died between its two commits left (no batch: see the entity_state
    # strategy), which are closed again too
    stored = materialize(
        previous.join(_small(touched.withColumn(TOUCHED, F.lit(True))), "node", "left")
        .where(F.col(TOUCHED).isNotNull() | F.col("_batch").isNull())
        .select("node", "component", F.col(TOUCHED).isNotNull().alias(TOUCHED))
    )
    labels = materialize(
        stored.where(F.col(TOUCHED) & F.col("component").isNotNull()).select("component").distinct()
    )
    # every node of a touched component, with the component it had and whether the
    # table holds a row of it (STORED: every node of a touched component, every stored
    # row read above; a node of the new edges that is not among them is new), and
    # whether it is written whatever its component (TOUCHED: an entity node of the new
    # edges, whose record changed, or a placeholder, read above; the others only when
    # their component changed). One scan of the stored rows, the labels and the rows
    # read above broadcast to it: no shuffle
    read = _small(
        stored.select(
            "node",
            F.lit(True).alias("$read"),
            (~F.col(TOUCHED) | ~F.col("node").startswith(VALUE_NODE_PREFIX)).alias("$forced"),
        )
    )
    affected = materialize(
        previous.join(_small(labels.withColumn("$labelled", F.lit(True))), "component", "left")
        .join(read, "node", "left")
        .where(F.col("$labelled").isNotNull() | F.col("$read").isNotNull())
        .select(
            "node",
            F.col("component").alias(PREVIOUS_COMPONENT),
            F.lit(True).alias(STORED),
            F.coalesce("$forced", F.lit(False)).alias(TOUCHED),
        )
        .union(
            new.select(F.col("src").alias("node"))
            .distinct()
            .join(read, "node", "left_anti")
            .select(
                "node",
                F.lit(None).cast("string").alias(PREVIOUS_COMPONENT),
                F.lit(False).alias(STORED),
                F.lit(True).alias(TOUCHED),
            )
        )
    )
    entity_nodes = affected.where(~F.col("node").startswith(VALUE_NODE_PREFIX))
    subgraph = materialize(
        live.join(_small(entity_nodes.withColumnRenamed("node", "src")), "src", "left_semi")
    )
    closed = connected_components(subgraph, "src", "dst", **closure_options)
    return _changes(closed, affected, batch)


def _check_rebuild_share(share: Any) -> float:
    """rebuild_share, else the environment variable REBUILD_SHARE_ENV, else
    REBUILD_SHARE; fails on a value that is not a share."""
    where = "argument 'rebuild_share'"
    if share is None and os.environ.get(REBUILD_SHARE_ENV, ""):
        where = f"setting 'rebuild_share' (the environment variable {REBUILD_SHARE_ENV})"
        share = os.environ[REBUILD_SHARE_ENV]
        try:
            share = float(share)
        except ValueError:
            pass
    if share is None:
        return REBUILD_SHARE
    if isinstance(share, bool) or not isinstance(share, int | float) or not share >= 0:
        raise ClosureError(
            f"entity_components, {where}: must be a number of 0 or more (a share of the"
            f" graph's nodes; 1 or more: only when every edges row is new), got {share!r}"
        )
    return float(share)


def _check_state_choice(choice: Any) -> None:
    """Fails on a state_in_driver, or a STATE_IN_DRIVER_ENV, that is not a choice."""
    if choice is not None and not isinstance(choice, bool):
        raise ClosureError(
            "entity_components, argument 'state_in_driver': must be True, False or None"
            f" (got {choice!r})"
        )
    said = os.environ.get(STATE_IN_DRIVER_ENV, "")
    if said not in ("", "0", "1"):
        raise ClosureError(
            f"entity_components: the environment variable {STATE_IN_DRIVER_ENV} must be 0 or 1"
            f" (or unset), got {said!r}"
        )


def _state_in_driver(session: SparkSession, table: str, choice: bool | None) -> bool:
    """Whether a run that follows the change reads the components table (an Iceberg
    table named table) into the driver: choice when given, else the environment
    variable STATE_IN_DRIVER_ENV, else whether the state fits the driver's free memory
    (``closure_memory.state_fits``, from the rows of its data files: no scan). The log
    says which and why."""
    if choice is not None:
        why = f"state_in_driver={choice}"
    elif os.environ.get(STATE_IN_DRIVER_ENV, ""):
        choice, why = os.environ[STATE_IN_DRIVER_ENV] == "1", f"{STATE_IN_DRIVER_ENV} says so"
    else:
        rows = session.sql(f"select sum(record_count) from {table}.data_files").first()[0]
        choice, why = state_fits(int(rows or 0), driver_memory(session))
    logger.info(
        "entity_components: %s: %s", "the state in the driver" if choice else "hops in Spark", why
    )
    return bool(choice)


def _arrow(df: DataFrame):
    """The rows of df in the driver, as an Arrow table (its schema when empty)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    batches = df._collect_as_arrow()
    if not batches:
        return to_arrow_schema(df.schema).empty_table()
    return pa.Table.from_batches(batches)


def _closed_in_driver(
    live: DataFrame,
    previous: DataFrame,
    new: DataFrame | None,
    batch: int,
    rebuild_share: float = 1.0,
    **closure_options: Any,
) -> DataFrame:
    """The rows of a run that follows the change, found in the driver: the state (node,
    component, batch) is read once, and each hop of the Spark path (the touched nodes,
    their stored rows and placeholders, their components, every node of those) is an
    Arrow filter on it. Then the live edges of the affected entity nodes come from one
    scan, their closure is labelled in the driver (``closure.label_arrow``) unless it
    does not fit (``connected_components`` then chooses), and the rows to write are
    the full outer join of the two (``_changes_arrow``). The same rows as the Spark
    path, which the property test of tests/functional holds to a from-scratch build.
    new: the edges of the new batches, or None when every edges row is new; then, or
    when more than rebuild_share of the graph's nodes are affected, the whole graph is
    closed again and replaces the table (``_whole_in_driver``), from the state as read
    here: it is read once either way.
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
    state = _arrow(previous.select("node", "component", "_batch", had))
    read_s = time.monotonic() - started
    if new is None:
        logger.info(
            "entity_components: the whole state in the driver: %s rows, read in %.1fs",
            f"{state.num_rows:,}",
            read_s,
        )
        return _whole_in_driver(live, state, None, None, batch, **closure_options)
    added = _arrow(new.select("src", "dst"))
    node, component = state.column("node"), state.column("component")
    touched = pc.unique(
        pa.chunked_array(
            added.column("src").chunks + pc.drop_null(added.column("dst")).chunks, pa.string()
        )
    )
    forced, affected_rows, read = _forced(state, touched)
    sources = pc.unique(added.column("src"))
    fresh = pc.filter(sources, pc.invert(pc.is_in(sources, value_set=pc.filter(node, read))))
    affected_count = (pc.sum(affected_rows).as_py() or 0) + len(fresh)
    # of the graph's nodes after the run (the stored ones and the new)
    share = affected_count / max(1, state.num_rows + len(fresh))
    logger.info(
        "entity_components: the state in the driver: %s rows, %s of Arrow, read in %.1fs;"
        " %s nodes affected (%.2f%%)",
        f"{state.num_rows:,}",
        f"{state.nbytes / 2**20:.1f} MiB",
        read_s,
        f"{affected_count:,}",
        100 * share,
    )
    if share > rebuild_share:
        logger.info(
            "entity_components: over rebuild_share=%s of the nodes affected: the whole graph"
            " is closed again and replaces the table",
            rebuild_share,
        )
        del node, component, affected_rows, read
        return _whole_in_driver(live, state, forced, touched, batch, **closure_options)
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
    return _for_writing(from_driver(spark, _changes_arrow(closed, affected, batch), CHANGES_SCHEMA))


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
    ``_closed_in_driver`` read it). The rows equal the table a run that writes only the
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
    subgraph_rows = live
    if nodes is not None:
        chosen = from_driver(spark, pa.table({"src": nodes}), "src string")
        subgraph_rows = live.join(F.broadcast(chosen) if few else chosen, "src", "left_semi")
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


# the columns of a batch of entity_components (_changes, _changes_arrow), as Spark DDL
CHANGES_SCHEMA = (
    f"node string, component string, `_batch` bigint, {PREVIOUS_COMPONENT} string,"
    f" `$drop` boolean, `{STORED}` boolean"
)


def _changes_arrow(closed, affected, batch: int):
    """``_changes`` on Arrow tables in the driver: closed (node, component), affected
    (node, PREVIOUS_COMPONENT, TOUCHED, STORED); the same rows. The full outer join of
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


def _small(df: DataFrame) -> DataFrame:
    """A materialized frame, marked for a broadcast join when it has few rows (Spark
    cannot tell: a materialized frame has no size estimate)."""
    return F.broadcast(df) if df.count() <= BROADCAST_ROWS else df


def _previous_labels(previous: DataFrame) -> DataFrame:
    """Stored rows as (node, previous_component, STORED, TOUCHED), each written whether
    or not its component changed."""
    return previous.select(
        "node",
        F.col("component").alias(PREVIOUS_COMPONENT),
        F.lit(True).alias(STORED),
        F.lit(True).alias(TOUCHED),
    )


def _state_rows(components: DataFrame, batch: int) -> DataFrame:
    """The rows of a first run (no component before)."""
    return components.select(
        "node",
        "component",
        F.lit(batch).cast("bigint").alias("_batch"),
        F.lit(None).cast("string").alias(PREVIOUS_COMPONENT),
    )


def _for_writing(df: DataFrame) -> DataFrame:
    """The rows as few files of Spark's advisory size (a rebalance, which adaptive
    execution coalesces). A closure's frame has the partitions of its checkpointed
    rounds (``materialize``), hundreds of them: written as they are, a 3M-record
    merge's components were 459 files of 10k rows, every scan of the state opened them
    all, and every merge-on-read MERGE that touched them wrote a delete file for each."""
    return df.hint("rebalance")


def _changes(closed: DataFrame, affected: DataFrame, batch: int) -> DataFrame:
    """The state rows of a run: every closed node with its component, and for every
    affected node that is no longer in the graph a tombstone (an entity node: null
    component, so the merged model sees it go) or a drop (a value node); each with the
    component it had before the run (affected: node, previous_component; a closed node
    outside it is new) and whether the table holds a row of the node (STORED; a closed
    node outside affected is new). Of the affected nodes that are not TOUCHED (the other
    nodes of a component closed again), only those whose component changed: the merged
    model finds the others by their component (a batch of a run that changed 1% of 3M
    records was 608,000 rows when it wrote them all, and its MERGE took 11 s). One
    outer join: the closure's frame is read once (a frame the driver method built is
    read again from its broadcast on every read)."""
    closed = closed.select("node", "component", F.lit(True).alias("$closed"))
    drop = F.col("$closed").isNull() & F.col("node").startswith(VALUE_NODE_PREFIX)
    changed = F.coalesce(TOUCHED, F.lit(True)) | ~F.col("component").eqNullSafe(
        F.col(PREVIOUS_COMPONENT)
    )
    return _for_writing(
        closed.join(affected, "node", "full")
        .where(changed | drop)
        .select(
            "node",
            "component",
            F.lit(batch).cast("bigint").alias("_batch"),
            PREVIOUS_COMPONENT,
            drop.alias("$drop"),
            F.coalesce(STORED, F.lit(False)).alias(STORED),
        )
    )
