{#--
    Provenance of an entity merge (SPEC §5): one event per emitted version of a merged
    entity, for an incremental model with incremental_strategy='append'.
      JOIN     a live entity: its members ($ids) joined into child_id;
      REPLACED an id retired because its members now form another entity;
      DELETE   a deleted input stored alone, or an id whose members are all gone.
    A version is recorded once: rows of the merged model whose (_id, _updated) is not
    in the provenance table yet, so a failed or skipped run is caught up by the next
    one, and a --full-refresh of the merged model (which renumbers) is recorded again.
--#}
{% macro entity_provenance(merge_name, merged) %}
    {{ return(adapter.dispatch('entity_provenance', 'dbt_merge')(merge_name, merged)) }}
{% endmacro %}


{% macro default__entity_provenance(merge_name, merged) %}
with

emitted as (
    select * from {{ merged }}
),

{%- if is_incremental() %}

new_versions as (
    select emitted.*
    from emitted
    left anti join {{ this }} as recorded
        on recorded.child_id = emitted.`_id`
        and recorded.child_updated = emitted.`_updated`
),
{%- else %}

new_versions as (
    select * from emitted
),
{%- endif %}

events as (
    select
        case
            when not `$deleted` then 'JOIN'
            when `$replaced` then 'REPLACED'
            else 'DELETE'
        end as event_type,
        {{ dbt_merge._sql_string(merge_name) }} as merge_name,
        {{ dbt_merge._sql_string(merged.identifier) }} as model_name,
        `$ids` as parent_ids,
        `_id` as child_id,
        `_updated` as child_updated,
        {{- dbt_merge._provenance_stamp_sql() }}
    from new_versions
)

select * from events
{% endmacro %}
