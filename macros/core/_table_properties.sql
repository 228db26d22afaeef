{#-- A table's properties (`show tblproperties`): {key: value}, both strings. --#}
{% macro _table_properties(relation) %}
    {% set properties = {} %}
    {% for row in run_query('show tblproperties ' ~ relation).rows %}
        {% do properties.update({row[0] | string: row[1] | string}) %}
    {% endfor %}
    {{ return(properties) }}
{% endmacro %}


{#-- key = value, ... of a dict of table properties, each an SQL string: the list of an
     alter table's or a create table's tblproperties. --#}
{% macro _sql_properties(properties) %}
    {%- for key, value in properties.items() -%}
        {{ dbt_merge._sql_string(key) }} = {{ dbt_merge._sql_string(value) }}{{ ', ' if not loop.last }}
    {%- endfor -%}
{% endmacro %}
