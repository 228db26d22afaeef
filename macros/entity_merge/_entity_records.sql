{#--
    One row per entity from its sorted members: the identity (_id), $ids, $deleted, and
    the strategy's entity JSON and typed columns.
--#}

{#-- The CTEs identified, valued, entities, checked and current_entities, over the
     CTE grouped (_entity_members_ctes); strategy is what the merge's strategy macro
     returned (strategies/_entity_strategies.sql). --#}
{% macro _entity_records_ctes(spec, props, strategy) %}
-- identity, $ids and, per property, the members that have it
identified as (
    select
        {{ dbt_merge._entity_identity_sql(spec, 'members') }} as `_id`,
        array_join(transform(members, m -> {{ dbt_merge._member_node_sql('m') }}), '|') as composite_id,
        array_distinct(flatten(transform(members, m -> m.member_ids))) as `$ids`,
        exists(members, m -> m.member_deleted) as `$deleted`,
        members
        {%- for prop in props %},
        filter(members, m -> m.v_{{ prop.index }} is not null) as having_{{ prop.index }}
        {%- endfor %}
    from grouped
),

-- the strategy: values per property, and their JSON
valued as (
    select
        *
        {%- for values_sql in strategy.values_sql %},
        {{ values_sql }} as values_{{ loop.index0 }}
        {%- endfor %}
    from identified
),

entities as (
    select
        `_id`,
        composite_id,
        `$ids`,
        `$deleted`,
        {{ strategy.entity_sql }} as entity
        {%- for column in strategy.columns %},
        {{ column.sql }} as {{ adapter.quote(column.name) }}
        {%- endfor %}
    from valued
),

{{ dbt_merge._entity_checked_cte(spec) }},

current_entities as (
    select `_id`, `$ids`, `$deleted`, false as `$replaced`, entity
        {%- for column in strategy.columns %}, {{ adapter.quote(column.name) }}{% endfor %}
    from checked
)
{%- endmacro %}


{#-- The CTE checked: the entities, and with identity first the query fails when two
     of them get the same id (their datasets share ids that no equality rule joins). --#}
{% macro _entity_checked_cte(spec) %}
{%- if spec.identity == 'first' %}
-- identity first: two entities may not get the same id
checked as (
    select *
    from (
        select
            *,
            collect_list(composite_id) over (partition by `_id`) as same_id_members
        from entities
    )
    where assert_true(
        size(same_id_members) = 1,
        concat(
            {{ dbt_merge._sql_string("dbt_merge: entity merge '" ~ spec.name ~ "', setting 'identity': first gives the id ") }},
            `_id`, ' to ', size(same_id_members), ' entities: ', array_join(array_sort(same_id_members), ', '),
            '. Put the id columns in an equality rule so that they merge, or use identity: composite'
        )
    ) is null
)
{%- else %}
checked as (
    select * from entities
)
{%- endif %}
{%- endmacro %}
