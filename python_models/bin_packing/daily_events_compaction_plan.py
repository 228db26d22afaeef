"""Offline bin packing of a table's data files (NiFi's bins, planned all at once).

The data files of daily_events (its Iceberg `files` metadata table) packed into
compaction groups of at most 64 KiB, first-fit-decreasing, per partition: the files
a compaction job would rewrite together. daily_events_compaction_report compares the
plan with the lower bound ceil(total bytes / max bytes).
"""

from dbt_merge.bin_packing import plan_offline


def model(dbt, session):
    dbt.config(materialized="table")
    dbt.ref("daily_events")  # lineage: the files below are this table's
    files = session.table(f"{dbt.this.schema}.daily_events.files")
    # an unpartitioned table's files table has no partition column: one group
    partition = "partition" if "partition" in files.columns else "null"
    files = files.selectExpr(
        "file_path", "file_size_in_bytes", f"cast({partition} as string) as partition_value"
    )
    return plan_offline(
        files,
        id_column="file_path",
        size_column="file_size_in_bytes",
        correlation_column="partition_value",
        max_bytes=64 * 1024,
        model_name="daily_events_compaction_plan",
    )
