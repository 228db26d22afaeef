{#--
    Provenance of bin packing or defragment (SPEC §5): one JOIN event per merged bin,
    parents = its members (in bin order), child = the bin, for an incremental model
    with incremental_strategy='append'. A bin is recorded once, when it is merged:
    merged bins not in the provenance table yet, so a skipped run is caught up.
--#}
{% macro bin_provenance(bins) %}
    {{ return(adapter.dispatch('bin_provenance', 'dbt_merge')(bins)) }}
{% endmacro %}


{% macro default__bin_provenance(bins) %}
with

merged as (
    select * from {{ bins }}
    where status = 'merged'
),

{%- if is_incremental() %}

new_bins as (
    select merged.*
    from merged
    left anti join {{ this }} as recorded
        on recorded.child_id = merged.bin_id
),
{%- else %}

new_bins as (
    select * from merged
),
{%- endif %}

events as (
    select
        'JOIN' as event_type,
        {{ dbt_merge._sql_string(bins.identifier) }} as model_name,
        members as parent_ids,
        bin_id as child_id,
        merge_reason,
        merged_at,
        {{- dbt_merge._provenance_stamp_sql() }}
    from new_bins
)

select * from events
{% endmacro %}
