{#-- provenance events: where the adapter can write them (the spark_session adapter's
     materialization), so the same model runs on dbt-spark --#}
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
        provenance=(target.type == 'spark_session'),
    )
}}

{#-- on adapters that build the first run themselves (dbt-spark, dbt-databricks) the
     block gives it the upsert's precombine; the spark_session adapter needs none --#}
{% call dbt_merge.precombined() %}
    select * from {{ ref('stg_order_changes') }}
{% endcall %}
