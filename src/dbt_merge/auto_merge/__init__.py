"""Auto-merge of small contiguous ranges (SPEC §4), after Accumulo: the planner a dbt
Python model calls, on an Iceberg or a Delta table. The runner is the run-operation
``dbt_merge.execute_auto_merge``."""

from dbt_merge.auto_merge.errors import AutoMergeError
from dbt_merge.auto_merge.iceberg import plan_table, table_files

__all__ = ["AutoMergeError", "plan_table", "table_files"]
