"""Entity merge (SPEC §1): the Python step of a merge, the closure of its equality
edges. The SQL steps are the macros in ``macros/entity_merge/``."""

from dbt_merge.entity_merge.components import entity_components
from dbt_merge.entity_merge.state import VALUE_NODE_PREFIX

__all__ = ["VALUE_NODE_PREFIX", "entity_components"]
