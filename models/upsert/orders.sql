{{
    config(
        materialized='incremental',
        incremental_strategy='upsert',
        unique_key='order_id',
        precombine_key='updated_at',
        arrival_column='ingested_at',
        merge_mode='event_time_ordering',
        partial_update=true,
        delete_column='is_deleted',
        provenance=true,
    )
}}

select * from {{ ref('stg_order_changes') }}
