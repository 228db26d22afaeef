{#-- incremental: the merge follows the change (docs/entity-merge.md, "Following the change") --#}
{{ config(materialized='incremental', incremental_strategy='entity_state') }}

{{ dbt_merge.equality_edges('customers') }}
