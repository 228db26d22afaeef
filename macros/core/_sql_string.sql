{#-- A Spark string literal. --#}
{% macro _sql_string(text) %}
    {{- "'" ~ (text | string).replace('\\', '\\\\').replace("'", "\\'") ~ "'" -}}
{% endmacro %}
