{#--
    One row per entity from its sorted members: the identity (_id), $ids, $deleted, and
    the strategy's entity JSON and typed columns.
--#}

{#-- The CTEs identified, valued, entities, checked and current_entities, over the
     CTE grouped (_entity_members_ctes). --#}
{% macro _entity_records_ctes(spec, props) %}
-- identity, $ids and, per property, the members that have it
identified as (
    select
        {%- if spec.identity == 'first' %}
        members[0].member_id as `_id`,
        {%- else %}
        array_join(transform(members, m -> {{ dbt_merge._member_node_sql('m') }}), '|') as `_id`,
        {%- endif %}
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
        {%- for prop in props %},
        {%- if spec.strategy == 'compact' %}
        array_distinct(flatten(transform(having_{{ prop.index }}, m -> m.v_{{ prop.index }}))) as values_{{ prop.index }}
        {%- else %}
        flatten(transform(having_{{ prop.index }}, m -> m.v_{{ prop.index }})) as values_{{ prop.index }}
        {%- endif %}
        {%- endfor %}
    from identified
),

entities as (
    select
        `_id`,
        composite_id,
        `$ids`,
        `$deleted`,
        {%- if spec.strategy == 'list' %}
        concat('{"$merged":[', array_join(transform(members, m -> m.member_json), ','), ']}') as entity,
        transform(members, m -> m.member_json) as `$merged`
        {%- else %}
        concat('{', concat_ws(','
            {%- for prop in props %},
            case
                {%- if spec.strategy == 'compact' %}
                when size(values_{{ prop.index }}) = 1 then concat({{ dbt_merge._sql_string(prop.name | tojson ~ ':') }}, {{ dbt_merge._json_scalar_sql('values_' ~ prop.index) }})
                when size(values_{{ prop.index }}) > 1 then concat({{ dbt_merge._sql_string(prop.name | tojson ~ ':') }}, to_json(values_{{ prop.index }}))
                {%- else %}
                when size(having_{{ prop.index }}) = 1 then concat({{ dbt_merge._sql_string(prop.name | tojson ~ ':') }}, having_{{ prop.index }}[0].j_{{ prop.index }})
                when size(having_{{ prop.index }}) > 1 then concat({{ dbt_merge._sql_string(prop.name | tojson ~ ':') }}, to_json(values_{{ prop.index }}))
                {%- endif %}
            end
            {%- endfor %}
        ), '}') as entity
        {%- for prop in props %},
        case when size({{ 'values_' if spec.strategy == 'compact' else 'having_' }}{{ prop.index }}) > 0 then values_{{ prop.index }} end as {{ adapter.quote(prop.name) }}
        {%- endfor %}
        {%- endif %}
    from valued
),

{{ dbt_merge._entity_checked_cte(spec) }},

current_entities as (
    select `_id`, `$ids`, `$deleted`, false as `$replaced`, entity
        {%- if spec.strategy == 'list' %}, `$merged`{% else %}{% for prop in props %}, {{ adapter.quote(prop.name) }}{% endfor %}{% endif %}
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
