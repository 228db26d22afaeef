"""The columns of an entity merge's components state and of the batches that change it,
shared by the Spark path (``components``) and the driver path (``components_driver``)
of a run that follows the change."""

from __future__ import annotations

from pyspark.sql import DataFrame

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

# the column of a batch that holds the whole state (a run that rebuilt it): the
# entity_state strategy replaces the table with it (get_incremental_entity_state_sql)
WHOLE = "$whole"

# a set of at most this many nodes (or labels) is broadcast to the join that reads
# the stored edges or components (some tens of MB of names)
BROADCAST_ROWS = 1_000_000

# a set of at most this many nodes (or labels) is a literal `in` list in the filter of
# the scan that reads the stored edges or components, a larger one a broadcast semi
# join. On the 10M benchmark's tables (15.3M state rows, 25.4M edges; read-only, two
# runs each): 200 keys 2.3 s against 2.7 s (state) and 2.9 s against 3.7 s (edges);
# 5,000 keys 5.1 s against 2.7 s; 50,000 keys 37.6 s against 3.1 s (Iceberg evaluates
# the list against every row group)
IN_LIST_ROWS = 256

# the columns of a batch of entity_components (components._changes,
# components_driver._changes_arrow), as Spark DDL
CHANGES_SCHEMA = (
    f"node string, component string, `_batch` bigint, {PREVIOUS_COMPONENT} string,"
    f" `$drop` boolean, `{STORED}` boolean"
)


def for_writing(df: DataFrame) -> DataFrame:
    """The rows as few files of Spark's advisory size (a rebalance, which adaptive
    execution coalesces). A closure's frame has the partitions of its checkpointed
    rounds (``materialize``), hundreds of them: written as they are, a 3M-record
    merge's components were 459 files of 10k rows, every scan of the state opened them
    all, and every merge-on-read MERGE that touched them wrote a delete file for each."""
    return df.hint("rebalance")
