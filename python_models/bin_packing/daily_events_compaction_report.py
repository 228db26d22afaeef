"""daily_events_compaction_plan against the lower bound ceil(total bytes / max bytes)."""

from dbt_merge.bin_packing import offline_report


def model(dbt, session):
    dbt.config(materialized="table")
    return offline_report(
        dbt.ref("daily_events_compaction_plan"),
        max_bytes=64 * 1024,
        model_name="daily_events_compaction_report",
    )
