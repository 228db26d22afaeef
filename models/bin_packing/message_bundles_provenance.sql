{{ config(materialized='incremental', incremental_strategy='append') }}

{{ dbt_merge.bin_provenance(ref('message_bundles')) }}
