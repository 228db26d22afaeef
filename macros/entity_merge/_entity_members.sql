{#--
    The members of an entity merge's components: every input entity as a member of its
    component, the members of a component in one sorted array, each with its id, $ids,
    deleted flag, JSON and per property its values (a typed array) and their JSON.
--#}

{#-- The merge's properties in name order, each {key, index, name, type}: the index
     names the per-property columns (v_<i>, j_<i>, having_<i>, values_<i>). --#}
{% macro _entity_properties(spec) %}
    {% set props = [] %}
    {% for key in spec.properties | sort %}
        {% do props.append(spec.properties[key]) %}
        {% do props[-1].update({'key': key, 'index': loop.index0}) %}
    {% endfor %}
    {{ return(props) }}
{% endmacro %}


{#-- The order of a component's members: dataset offset, then id (a lambda for
     array_sort over structs with member_offset and member_id). --#}
{% macro _entity_member_order() %}
    {{- return('(l, r) -> case when l.member_offset < r.member_offset then -1 when l.member_offset > r.member_offset then 1 when l.member_id < r.member_id then -1 when l.member_id > r.member_id then 1 else 0 end') -}}
{% endmacro %}


{#-- The id of the entity whose sorted members (member_offset, member_id) are the array
     members_sql: composite, their nodes joined with |; first, the first one's id. --#}
{% macro _entity_identity_sql(spec, members_sql) %}
    {%- if spec.identity == 'first' -%}
        {{- return(members_sql ~ '[0].member_id') -}}
    {%- endif -%}
    {{- return("array_join(transform(" ~ members_sql ~ ", m -> " ~ dbt_merge._member_node_sql('m') ~ "), '|')") -}}
{% endmacro %}


{#-- The CTE affected of a change-following run: every entity node of a component that
     changed since the last run and every node that left the graph (null component), as
     merge_entities staged them (scope.affected, _entity_affected_sql). --#}
{% macro _entity_affected_cte(scope) %}
affected as (
    select node, component from {{ scope.affected }}
)
{%- endmacro %}


{#-- The CTEs components, members, assigned and grouped: one row per component with its
     members sorted by dataset offset, then id. A deleted entity is a component of its
     own, and so is an entity the closure did not see. With scope (a change-following
     run, _entity_change_scope), only the components that changed since scope.since:
     the CTE affected holds their nodes, and each dataset is filtered by them, or with
     scope.wide (many: _entity_affected_join_rows) joined with them once. --#}
{% macro _entity_members_ctes(spec, components, props, shuffle, scope=none) %}
{%- if scope %}
{{ dbt_merge._entity_affected_cte(scope) }},

components as (
    select node, component
    from affected
    where component is not null
),
{%- else %}
-- components of live entities (value nodes of the equality graph left out)
components as (
    select node, component
    from {{ components }}
    where {{ dbt_merge._is_entity_node_sql('node') }}
),
{%- endif %}

-- members: one row per input entity, each property as a typed array plus its JSON
members as (
    {% for dataset in spec.datasets %}
    {{ '(' if shuffle }}select
        {{ dataset.offset }} as member_offset,
        {{ dbt_merge._entity_id_sql(dataset) }} as member_id,
        {{ dbt_merge._entity_ids_sql(dataset) }} as member_ids,
        {{ dbt_merge._entity_is_deleted_sql(dataset) }} as member_deleted,
        {{- dbt_merge._entity_member_properties_sql(dataset, props) }}
        {{ dbt_merge._member_json_sql(dataset, props) }} as member_json
    from {{ dataset.relation }} as {{ dataset.alias }}
    {%- if scope and not scope.wide %}
    where {{ dbt_merge._entity_node_sql(dataset) }} in (select node from affected)
    {%- endif %}
    {%- if shuffle %}
    distribute by rand())
    {%- endif %}
    {% if not loop.last %}union all{% endif %}
    {% endfor %}
),

-- a deleted entity never merges: it is a component of its own
assigned as (
    select
        m.*,
        case
            when m.member_deleted or c.component is null then {{ dbt_merge._member_node_sql('m') }}
            else c.component
        end as component
    from members as m
    {%- if scope and scope.wide %}
    -- every record, joined once with the affected nodes (a node without a component
    -- is one that left the graph)
    join affected as c
    {%- else %}
    left join components as c
    {%- endif %}
        on c.node = {{ dbt_merge._member_node_sql('m') }}
),

grouped as (
    select
        component,
        array_sort(
            collect_list(struct(
                member_offset, member_id, member_ids, member_deleted, member_json
                {%- for prop in props %}, v_{{ prop.index }}, j_{{ prop.index }}{% endfor %}
            )),
            {{ dbt_merge._entity_member_order() }}
        ) as members
    from assigned
    group by component
)
{%- endmacro %}


{#-- A member's properties, per property v_<i>: its values as array<T> (a scalar becomes
     a one-element array, a null no array), and j_<i>: their JSON as the dataset holds
     them; both null for a property the dataset does not have. --#}
{% macro _entity_member_properties_sql(dataset, props) %}
        {%- for prop in props %}
        {%- if prop.key in dataset.columns %}
        {%- set raw = dataset.alias ~ '.' ~ adapter.quote(dataset.column_names[prop.key]) %}
        {%- if dbt_merge._array_element_type(dataset.columns[prop.key]) %}
        cast({{ raw }} as array<{{ prop.type }}>) as v_{{ prop.index }},
        to_json({{ raw }}) as j_{{ prop.index }},
        {%- else %}
        case when {{ raw }} is not null then array(cast({{ raw }} as {{ prop.type }})) end as v_{{ prop.index }},
        case when {{ raw }} is not null then {{ dbt_merge._json_scalar_sql('array(' ~ raw ~ ')') }} end as j_{{ prop.index }},
        {%- endif %}
        {%- else %}
        cast(null as array<{{ prop.type }}>) as v_{{ prop.index }},
        cast(null as string) as j_{{ prop.index }},
        {%- endif %}
        {%- endfor %}
{%- endmacro %}


{#-- JSON of the single element of a one-element array expression. --#}
{% macro _json_scalar_sql(array_sql) %}
    {{- 'substring(to_json(' ~ array_sql ~ '), 2, length(to_json(' ~ array_sql ~ ')) - 2)' -}}
{% endmacro %}


{#-- A member's own properties as JSON (for strategy list): null properties left out. --#}
{% macro _member_json_sql(dataset, props) %}
    {%- set fields = [] %}
    {%- for prop in props if prop.key in dataset.columns %}
        {%- do fields.append(dbt_merge._sql_string(prop.name) ~ ', ' ~ dataset.alias ~ '.' ~ adapter.quote(dataset.column_names[prop.key])) %}
    {%- endfor %}
    {%- if fields %}
        {{- 'to_json(named_struct(' ~ (fields | join(', ')) ~ '))' -}}
    {%- else %}
        {{- "'{}'" -}}
    {%- endif %}
{% endmacro %}

