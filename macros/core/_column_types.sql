{#-- Column name (lower case) -> its Spark SQL type name, for the columns that
     dbt's adapter methods return: the one place where adapters' type names meet. The
     spark_session adapter and dbt-spark's `describe table` give Spark's names (boolean,
     array<string>, decimal(10,2)); a Thrift server's cursor gives Hive's
     (BOOLEAN_TYPE, DECIMAL_TYPE, NULL_TYPE), which lose their parameters, so a query's
     columns are read with `describe query` (_query_columns), never from a cursor. --#}
{% macro _column_types(columns) %}
    {% set types = {} %}
    {% for column in columns %}
        {% set name = (column.dtype | string).strip() %}
        {% if name.lower().endswith('_type') %}
            {% set name = {'null': 'void'}.get(name.lower()[:-5], name.lower()[:-5]) %}
        {% endif %}
        {% do types.update({column.name | lower: name}) %}
    {% endfor %}
    {{ return(types) }}
{% endmacro %}


{#-- The columns of a query, with Spark's type names, on every adapter: `describe query`
     (one statement that plans the query and reads nothing). A list of {name, dtype}. --#}
{% macro _query_columns(sql) %}
    {% set columns = [] %}
    {% for row in run_query('describe query ' ~ sql).rows %}
        {% do columns.append({'name': row[0], 'dtype': row[1]}) %}
    {% endfor %}
    {{ return(columns) }}
{% endmacro %}
