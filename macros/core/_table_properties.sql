{#-- A table's properties (`show tblproperties`): {key: value}, both strings. --#}
{% macro _table_properties(relation) %}
    {% set properties = {} %}
    {% for row in run_query('show tblproperties ' ~ relation).rows %}
        {% do properties.update({row[0] | string: row[1] | string}) %}
    {% endfor %}
    {{ return(properties) }}
{% endmacro %}
