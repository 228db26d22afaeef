{#--
    The strategies of entity merge, by name: how the sorted members of an entity become
    its JSON `entity` and its typed columns (SPEC §1, Strategies). A strategy is a macro
    _entity_strategy_<name>(arg_dict), with arg_dict
      props: the merge's properties in name order, each {key, index, name, type};
      spec:  the resolved declaration;
    that returns SQL over one row per entity (the CTE identified of _entity_records_ctes:
    members, the sorted member structs; having_<i>, the members that have property i):
      values_sql: per property, in props order, the expression of its values values_<i>
                  (or an empty list when the strategy has no use for them);
      entity_sql: the entity as a JSON string (may use values_<i>);
      columns:    the typed columns after `entity`, each {name, type, sql}.
    A new strategy is its macro plus a line in the registry below (the declaration
    accepts exactly these names), documented in _entity_merge.yml.
--#}
{% macro _entity_strategies() %}
    {{ return({
        'default': dbt_merge._entity_strategy_default,
        'compact': dbt_merge._entity_strategy_compact,
        'list': dbt_merge._entity_strategy_list,
    }) }}
{% endmacro %}


{#-- The entity as a JSON object of `"name":value` fields; a null field (a property no
     member has) is left out. --#}
{% macro _entity_object_sql(fields) %}
    {%- set sql -%}
        concat('{', concat_ws(','
            {%- for field in fields %},
            {{ field }}
            {%- endfor %}
        ), '}')
    {%- endset %}
    {{- sql -}}
{% endmacro %}


{#-- One property's `"name":value` field: null without values; one value is one_sql;
     several are the JSON array values_<i>. count_sql is the array whose size counts
     them. --#}
{% macro _entity_property_field_sql(prop, count_sql, one_sql) %}
    {%- set name = dbt_merge._sql_string(prop.name | tojson ~ ':') -%}
    {%- set sql -%}
        case
                when size({{ count_sql }}) = 1 then concat({{ name }}, {{ one_sql }})
                when size({{ count_sql }}) > 1 then concat({{ name }}, to_json(values_{{ prop.index }}))
            end
    {%- endset %}
    {{- sql | trim -}}
{% endmacro %}


{#-- A property's typed column, array<T>: its values, null when count_sql (the array
     whose size counts them) is empty. --#}
{% macro _entity_property_column(prop, count_sql) %}
    {{ return({
        'name': prop.name,
        'type': 'array<' ~ prop.type ~ '>',
        'sql': 'case when size(' ~ count_sql ~ ') > 0 then values_' ~ prop.index ~ ' end',
    }) }}
{% endmacro %}
