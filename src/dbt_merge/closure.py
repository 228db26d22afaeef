"""The transitive closure's public import path (SPEC §1):
``dbt_merge.closure.connected_components``. It lives in the entity merge slice,
``dbt_merge.entity_merge.closure``."""

from dbt_merge.entity_merge.closure import ClosureError, ClosureStats, connected_components

__all__ = ["ClosureError", "ClosureStats", "connected_components"]
