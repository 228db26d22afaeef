{#-- The provider (file format) of a table, lower-cased, from `describe table extended`:
     iceberg, delta, parquet ...; none for a view or when the row is missing. --#}
{% macro _table_provider(relation) %}
    {% for row in run_query('describe table extended ' ~ relation).rows
        if (row[0] | string).strip().lower() == 'provider' %}
        {{ return((row[1] | string).strip().lower()) }}
    {% endfor %}
    {{ return(none) }}
{% endmacro %}
