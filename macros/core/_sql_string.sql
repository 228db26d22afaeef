{#-- A Spark string literal. --#}
{% macro _sql_string(text) %}
    {{- "'" ~ (text | string).replace('\\', '\\\\').replace("'", "\\'") ~ "'" -}}
{% endmacro %}


{#-- The SQL expression of a Spark string literal of the string expression's value, as
     _sql_string writes it for a text: for lists of literals that Spark builds itself. --#}
{% macro _sql_string_sql(expression) %}
    {{- 'concat(' ~ dbt_merge._sql_string("'") ~ ', replace(replace(' ~ expression ~ ', '
        ~ dbt_merge._sql_string('\\') ~ ', ' ~ dbt_merge._sql_string('\\\\') ~ '), '
        ~ dbt_merge._sql_string("'") ~ ', ' ~ dbt_merge._sql_string("\\'") ~ '), '
        ~ dbt_merge._sql_string("'") ~ ')' -}}
{% endmacro %}
