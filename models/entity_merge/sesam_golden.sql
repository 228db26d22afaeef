{{ config(materialized='table') }}

{{ dbt_merge.merge_entities('sesam', ref('sesam_components')) }}
