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

