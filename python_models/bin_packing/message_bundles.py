"""Messages bundled per customer for delivery (NiFi MergeContent's bin packing).

Each run packs the messages no bundle holds yet, after reopening the bundles the last
run left pending, and merges the changed bundles into this table by bin_id. The run's
clock is the config `bundle_clock` (a var in the demo, so the demo is repeatable).
"""

from datetime import UTC, datetime, timedelta

from dbt_merge.bin_packing import bin_pack


def model(dbt, session):
    dbt.config(
        materialized="incremental",
        incremental_strategy="merge",
        unique_key="bin_id",
    )
    clock = dbt.config.get("bundle_clock")
    return bin_pack(
        dbt.ref("stg_message_events"),
        id_column="message_id",
        size_column="size_bytes",
        arrival_column="arrived_at",
        correlation_column="customer_id",
        min_entries=3,
        max_entries=5,
        min_bytes=1000,
        max_bytes=4000,
        max_bin_age=timedelta(minutes=30),
        max_bins=4,
        now=datetime.fromisoformat(clock).replace(tzinfo=UTC) if clock else None,
        previous=session.table(str(dbt.this)) if dbt.is_incremental else None,
        model_name="message_bundles",
    )
