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
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dbt_merge.core.errors import failpoint
from dbt_merge.core.spark import materialize
from dbt_merge.entity_merge.closure import ClosureError, connected_components
from dbt_merge.entity_merge.closure_memory import driver_memory, state_fits
from dbt_merge.entity_merge.components_driver import closed_in_driver
from dbt_merge.entity_merge.state import (
    BROADCAST_ROWS,
    PREVIOUS_COMPONENT,
    READ_AT,
    STORED,
    TOUCHED,
    VALUE_NODE_PREFIX,
    for_writing,
)

logger = logging.getLogger(__name__)

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
            an Iceberg table given by name: True finds the stored rows the change
            affects in Spark, reads only those into the driver and closes them there
            (``closed_in_driver``; the whole state comes to the driver only for a
            rebuild, see rebuild_share), False takes every hop and the rows to write in
            Spark, one scan each; None (the default) chooses
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
    components in the driver (``closed_in_driver``) or in Spark; rebuild_share: see
    ``entity_components``."""
    if "_batch" not in edges.columns:
        components = connected_components(edges, "src", "dst", **closure_options)
        return for_writing(components.where(~F.col("node").startswith(VALUE_NODE_PREFIX)))
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
            return for_writing(_state_rows(closed, batch or 0))
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
        return closed_in_driver(
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
    return for_writing(
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
