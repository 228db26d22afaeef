{#--
    The equality graph of one entity merge, as edges between string nodes:
      * every live entity is a node `<offset>|<id>` with an edge to itself, so entities
        that match nothing still come out of the closure as components of one;
      * every operand value is a node `=<group>:<type>:<value>`, and each entity has an
        edge to the values of its operands. k entities sharing a value cost k edges,
        not k*(k-1)/2. Values of different types never meet (typed equality, no casts).
    Null, empty-string and empty-array operands make no edge; arrays give one edge per
    element. Deleted entities are left out entirely: they never merge.
    This node checks the datasets' ids (_check_entity_ids), once for the whole merge:
    the components and the merged model are built from these edges.
--#}
{% macro equality_edges(merge_name) %}
    {{ return(adapter.dispatch('equality_edges', 'dbt_merge')(merge_name)) }}
{% endmacro %}


{% macro default__equality_edges(merge_name) %}
    {% set spec = dbt_merge._entity_merge_spec(merge_name) %}
    {% if not execute %}
        {{ return('select cast(null as string) as src, cast(null as string) as dst') }}
    {% endif %}
    {% do dbt_merge._check_entity_ids(spec) %}
    {% set operand_values = dbt_merge._entity_operand_values(spec) %}

with

-- entities: every live entity is a node with an edge to itself
{% for dataset in spec.datasets %}
entities_{{ dataset.offset }} as (
    select
        {{ dbt_merge._entity_node_sql(dataset) }} as src,
        {{ dbt_merge._entity_node_sql(dataset) }} as dst
    from {{ dataset.relation }} as {{ dataset.alias }}
    where {{ dbt_merge._entity_is_live_sql(dataset) }}
),
{% endfor %}

-- operand values: one edge from an entity to each of its non-empty values
{% for value in operand_values %}
values_{{ loop.index0 }} as (
    -- {{ value.label }}
    select
        src,
        {{ dbt_merge._entity_value_node_sql(value.group, value.type, 'dbt_merge_value') }} as dst
    from (
        {{ value.sql }}
    ) as operand_values
    where dbt_merge_value is not null
    {%- if value.type == 'string' %}
        and dbt_merge_value != ''
    {%- endif %}
),
{% endfor %}

edges as (
    {% for dataset in spec.datasets %}
    select src, dst from entities_{{ dataset.offset }}
    union all
    {% endfor %}
    {% for value in operand_values %}
    select src, dst from values_{{ loop.index0 }}
    {% if not loop.last %}union all{% endif %}
    {% endfor %}
)

select distinct src, dst from edges
{% endmacro %}


{#-- Per operand of every equality group: {label, group, type, sql}, sql the select of
     each live entity's node (src) and its operand value (dbt_merge_value, one row per
     element of an array operand), type the type values compare as. --#}
{% macro _entity_operand_values(spec) %}
    {% set operand_values = [] %}
    {% for group in spec.groups %}
        {% set group_index = loop.index0 %}
        {% for operand in group.operands %}
            {% set dataset = spec.datasets[operand.offset] %}
            {% set element = dbt_merge._array_element_type(operand.type) %}
            {% set value_sql -%}
                select
                    {{ dbt_merge._entity_node_sql(dataset) }} as src,
                    {%- if element %}
                    explode({{ operand.sql }}) as dbt_merge_value
                    {%- else %}
                    {{ operand.sql }} as dbt_merge_value
                    {%- endif %}
                from {{ dataset.relation }} as {{ dataset.alias }}
                where {{ dbt_merge._entity_is_live_sql(dataset) }}
            {%- endset %}
            {% do operand_values.append({
                'label': group.labels | join(' + '),
                'group': group_index,
                'type': dbt_merge._normalized_type(element if element else operand.type),
                'sql': value_sql,
            }) %}
        {% endfor %}
    {% endfor %}
    {{ return(operand_values) }}
{% endmacro %}


{#-- Null and duplicate ids make identities ambiguous: fail before anything is written.
     Run once per merge, by its first node (equality_edges). --#}
{% macro _check_entity_ids(spec) %}
    {% set checks = [] %}
    {% for dataset in spec.datasets %}
        {% set check -%}
            select * from (
                select
                    {{ dataset.offset }} as dataset_offset,
                    {{ dbt_merge._entity_id_sql(dataset) }} as entity_id,
                    count(*) as row_count
                from {{ dataset.relation }} as {{ dataset.alias }}
                group by 2
                having entity_id is null or count(*) > 1
                limit 3
            )
        {%- endset %}
        {% do checks.append(check) %}
    {% endfor %}
    {% set found = run_query(checks | join('\nunion all\n')) %}
    {% if found.rows | length > 0 %}
        {% set row = found.rows[0] %}
        {% set dataset = spec.datasets[row[0] | int] %}
        {% set problem = 'a null id (' ~ row[2] ~ ' rows)' if row[1] is none else 'the id ' ~ row[1] ~ ' ' ~ row[2] ~ ' times' %}
        {% do dbt_merge._entity_merge_error(spec.name, 'id_column', 'dataset ' ~ dataset.name ~ ' (alias ' ~ dataset.alias ~ ') has ' ~ problem ~ ' in column ' ~ spec.id_column ~ '; ids must be unique and not null within a dataset') %}
    {% endif %}
{% endmacro %}
