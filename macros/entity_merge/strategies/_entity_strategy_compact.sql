{#-- Strategy compact: like default with duplicates removed, empty lists dropped and a
     list of one value written as that value: {"x":1}, {"y":[2,1]}, {"y":2,"z":[3,3]}
     give {"x":1, "y":[2,1], "z":3}. --#}
{% macro _entity_strategy_compact(arg_dict) %}
    {% set values_sql, fields, columns = [], [], [] %}
    {% for prop in arg_dict.props %}
        {% set values = 'values_' ~ prop.index %}
        {% do values_sql.append('array_distinct(flatten(transform(having_' ~ prop.index ~ ', m -> m.v_' ~ prop.index ~ ')))') %}
        {% do fields.append(dbt_merge._entity_property_field_sql(prop, values, dbt_merge._json_scalar_sql(values))) %}
        {% do columns.append(dbt_merge._entity_property_column(prop, values)) %}
    {% endfor %}
    {{ return({'values_sql': values_sql, 'entity_sql': dbt_merge._entity_object_sql(fields), 'columns': columns}) }}
{% endmacro %}
