"""Offline bin packing of a table's data files (NiFi's bins, planned all at once).

The data files of daily_events (its Iceberg `files` metadata table, or its Delta
snapshot's files: dbt_merge.auto_merge.table_files) packed into
compaction groups of at most 64 KiB, first-fit-decreasing, per partition: the files
a compaction job would rewrite together. daily_events_compaction_report compares the
plan with the lower bound ceil(total bytes / max bytes).
"""

from dbt_merge.auto_merge import table_files
from dbt_merge.bin_packing import plan_offline


def model(dbt, session):
    dbt.config(materialized="table")
    # an unpartitioned table's files have a null partition_value: one group
    files = table_files(session, dbt.ref("daily_events"), model_name=dbt.this.identifier)
    return plan_offline(
        files,
        id_column="file_path",
        size_column="file_size_in_bytes",
        correlation_column="partition_value",
        max_bytes=64 * 1024,
        model_name="daily_events_compaction_plan",
    )
