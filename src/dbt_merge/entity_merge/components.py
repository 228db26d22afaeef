"""The Python step of an entity merge: the closure of its equality edges.

A merge is three dbt nodes: ``dbt_merge.equality_edges(name)`` (SQL) writes the
equality graph, a Python model turns it into components with ``entity_components``,
and ``dbt_merge.merge_entities(name, ref(<components>))`` (SQL) builds the golden
records. A components model is two lines::

    from dbt_merge.entity_merge import entity_components

    def model(dbt, session):
        dbt.config(materialized="table")
        return entity_components(dbt.ref("customers_edges"))
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dbt_merge.entity_merge.closure import connected_components

# value nodes of the equality graph start with it; the macros write it with
# _entity_value_node_prefix() (macros/entity_merge/_entity_nodes.sql), the same string
VALUE_NODE_PREFIX = "="


def entity_components(edges: DataFrame, **closure_options: Any) -> DataFrame:
    """Component of every entity node of an ``equality_edges`` table.

    Args:
        edges: the edges model (columns ``src``, ``dst``). Entity nodes are named
            ``<offset>|<id>``; value nodes start with ``VALUE_NODE_PREFIX`` (``=``)
            and are dropped from the result, they only connect entities.
        **closure_options: passed to ``dbt_merge.closure.connected_components``
            (``max_driver_edges``, ``max_rounds``, ``stats``).

    Returns:
        One row per entity node: ``node``, ``component`` (the smallest node name of
        the component, so the same graph always gives the same labels).
    """
    components = connected_components(edges, "src", "dst", **closure_options)
    return components.where(~F.col("node").startswith(VALUE_NODE_PREFIX))
