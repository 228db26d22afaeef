{#-- Strategy default: the union of all values in member order, duplicates kept and
     lists flattened: {"x":1}, {"y":[2,1]}, {"y":2,"z":[3,3]} give
     {"x":1, "y":[2,1,2], "z":[3,3]}. A value only one member has keeps that member's
     JSON (a list stays a list). --#}
{% macro _entity_strategy_default(arg_dict) %}
    {% set values_sql, fields, columns = [], [], [] %}
    {% for prop in arg_dict.props %}
        {% set having = 'having_' ~ prop.index %}
        {% do values_sql.append('flatten(transform(' ~ having ~ ', m -> m.v_' ~ prop.index ~ '))') %}
        {% do fields.append(dbt_merge._entity_property_field_sql(prop, having, having ~ '[0].j_' ~ prop.index)) %}
        {% do columns.append(dbt_merge._entity_property_column(prop, having)) %}
    {% endfor %}
    {{ return({'values_sql': values_sql, 'entity_sql': dbt_merge._entity_object_sql(fields), 'columns': columns}) }}
{% endmacro %}
