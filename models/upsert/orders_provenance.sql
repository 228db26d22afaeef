{{ config(materialized='view') }}

{#-- the events the upsert strategy wrote for orders (config provenance=true) --#}
select * from {{ dbt_merge.upsert_provenance(ref('orders')) }}
