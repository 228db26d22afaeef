{{ config(materialized='incremental', incremental_strategy='append') }}

{{ dbt_merge.entity_provenance('customers', ref('customers')) }}
