{#--
    Recomputes the merge from its datasets and components with every dataset read in
    random partitions, and compares with the stored model: every recomputed entity must
    be stored byte for byte (_id, $ids, $deleted, entity), and every stored live entity
    must be recomputed. Rows returned are the differences.
--#}
{% test identity_is_deterministic(model, merge, components) %}
    {{ return(adapter.dispatch('test_identity_is_deterministic', 'dbt_merge')(model, merge, components)) }}
{% endtest %}


{% macro default__test_identity_is_deterministic(model, merge, components) %}
    {% set spec = dbt_merge._entity_merge_spec(merge) %}
    {% if not execute %}
        {{ return('select 1 as problem where false') }}
    {% endif %}

with

recomputed as (
    {{ dbt_merge._merge_entities_sql(spec, components, shuffle=true) }}
),

stored as (
    select * from {{ model }}
),

not_stored as (
    select 'recomputed but not stored identically' as problem, recomputed.`_id`, recomputed.entity
    from recomputed
    left anti join stored
        on stored.`_id` = recomputed.`_id`
        and stored.`$ids` = recomputed.`$ids`
        and stored.`$deleted` = recomputed.`$deleted`
        and stored.entity = recomputed.entity
),

not_recomputed as (
    select 'stored live but not recomputed' as problem, stored.`_id`, stored.entity
    from stored
    left anti join recomputed
        on recomputed.`_id` = stored.`_id`
    where not stored.`$deleted`
)

select * from not_stored
union all
select * from not_recomputed
{% endmacro %}
