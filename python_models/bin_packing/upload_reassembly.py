"""Split uploads reassembled from their fragments (NiFi MergeContent's defragment).

A set of fragments of one upload is merged, in index order, once it holds every index
1..fragment_count. Broken sets (conflicting counts, duplicate or out-of-range indexes,
incomplete after max bin age) are kept with status 'failed' and a reason, and
upload_failures lists them. Incomplete sets stay pending for the next run.
"""

from datetime import UTC, datetime, timedelta

from dbt_merge.bin_packing import defragment


def model(dbt, session):
    dbt.config(
        materialized="incremental",
        incremental_strategy="merge",
        unique_key="bin_id",
    )
    clock = dbt.config.get("bundle_clock")
    return defragment(
        dbt.ref("stg_upload_fragments"),
        id_column="fragment_id",
        arrival_column="arrived_at",
        identifier_column="upload_id",
        count_column="fragment_count",
        index_column="fragment_index",
        size_column="size_bytes",
        max_bin_age=timedelta(minutes=30),
        now=datetime.fromisoformat(clock).replace(tzinfo=UTC) if clock else None,
        previous=session.table(str(dbt.this)) if dbt.is_incremental else None,
        model_name="upload_reassembly",
    )
