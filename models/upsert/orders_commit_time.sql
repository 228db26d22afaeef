{{
    config(
        materialized='incremental',
        incremental_strategy='upsert',
        unique_key='order_id',
        precombine_key='updated_at',
        arrival_column='ingested_at',
        merge_mode='commit_time_ordering',
        partial_update=true,
        delete_column='is_deleted',
    )
}}

{#-- on adapters that build the first run themselves (dbt-spark, dbt-databricks) the
     block gives it the upsert's precombine; the spark_session adapter needs none --#}
{% call dbt_merge.precombined() %}
    select * from {{ ref('stg_order_changes') }}
{% endcall %}
