{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key='_id',
        on_schema_change='append_new_columns',
    )
}}

{{ dbt_merge.merge_entities('customers', ref('customers_components')) }}
