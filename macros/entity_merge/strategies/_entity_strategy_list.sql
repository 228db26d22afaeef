{#-- Strategy list: every member as it is, in member order: {"x":1}, {"y":[2,1]},
     {"y":2,"z":[3,3]} give {"$merged": [{"x":1}, {"y":[2,1]}, {"y":2,"z":[3,3]}]}; the
     one typed column `$merged` holds the members' JSON. --#}
{% macro _entity_strategy_list(arg_dict) %}
    {% set entity_sql -%}
        concat('{"$merged":[', array_join(transform(members, m -> m.member_json), ','), ']}')
    {%- endset %}
    {{ return({
        'values_sql': [],
        'entity_sql': entity_sql,
        'columns': [{'name': '$merged', 'type': 'array<string>', 'sql': 'transform(members, m -> m.member_json)'}],
    }) }}
{% endmacro %}
