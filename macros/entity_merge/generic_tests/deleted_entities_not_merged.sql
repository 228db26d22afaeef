{#--
    Deleted inputs never merge: each deleted input entity is stored as an entity of its
    own (identity from itself alone, $deleted true, $ids its own ids), and none of them
    is in a component (the closure never saw it). Rows returned are the
    deleted inputs for which this does not hold.
--#}
{% test deleted_entities_not_merged(model, merge, components) %}
    {{ return(adapter.dispatch('test_deleted_entities_not_merged', 'dbt_merge')(model, merge, components)) }}
{% endtest %}


{% macro default__test_deleted_entities_not_merged(model, merge, components) %}
    {% set spec = dbt_merge._entity_merge_spec(merge) %}
    {% set deleted = [] %}
    {% for dataset in spec.datasets if dataset.deleted_sql %}
        {% set select_deleted -%}
            select
                {{ dbt_merge._entity_node_sql(dataset) }} as node,
                {#-- alone, composite identity is the node name, first identity the id --#}
                {{ dbt_merge._entity_node_sql(dataset) if spec.identity == 'composite' else dbt_merge._entity_id_sql(dataset) }} as expected_id,
                {{ dbt_merge._entity_ids_sql(dataset) }} as expected_ids
            from {{ dataset.relation }} as {{ dataset.alias }}
            where {{ dbt_merge._entity_is_deleted_sql(dataset) }}
        {%- endset %}
        {% do deleted.append(select_deleted) %}
    {% endfor %}
    {% if not execute or not deleted %}
        {{ return('select 1 as problem where false') }}
    {% endif %}

with

deleted_inputs as (
    {{ deleted | join('\nunion all\n') }}
),

not_alone as (
    select 'not stored alone and deleted' as problem, deleted_inputs.node, stored.`_id`
    from deleted_inputs
    left join {{ model }} as stored
        on stored.`_id` = deleted_inputs.expected_id
    where stored.`_id` is null
        or not stored.`$deleted`
        or stored.`$ids` != deleted_inputs.expected_ids
),

in_closure as (
    select 'merged by the closure' as problem, deleted_inputs.node, components.component as `_id`
    from deleted_inputs
    inner join {{ components }} as components
        on components.node = deleted_inputs.node
    -- a change-following merge keeps a row without a component for a deleted entity
    where components.component is not null
)

select * from not_alone
union all
select * from in_closure
{% endmacro %}
