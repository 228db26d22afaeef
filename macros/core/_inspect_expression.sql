{#--
    What an operand expression string is: {error, columns: [[alias, column], ...]}.
    The spark_session adapter parses it with sqlglot and asks Spark about functions
    sqlglot does not know (dbt_merge.core.expressions.inspect_expression). Other adapters
    (dbt-spark, dbt-databricks in dbt Cloud) cannot import Python here, so the default
    only rejects what is plainly not an expression and finds alias.column references
    with a pattern; Spark's analyzer checks the rest when the model runs.
--#}
{% macro _inspect_expression(sql) %}
    {{ return(adapter.dispatch('_inspect_expression', 'dbt_merge')(sql)) }}
{% endmacro %}


{% macro spark_session___inspect_expression(sql) %}
    {{ return(adapter.inspect_sql_expression(sql)) }}
{% endmacro %}


{% macro default___inspect_expression(sql) %}
    {% set text = sql | string %}
    {% set unquoted = modules.re.sub("'([^'\\\\]|\\\\.)*'", "''", text) %}
    {% if not unquoted.strip() %}
        {{ return({'error': 'empty', 'columns': []}) }}
    {% elif ';' in unquoted %}
        {{ return({'error': 'not one expression: it holds several statements', 'columns': []}) }}
    {% elif modules.re.search('(?i)\\b(select|insert|update|delete|merge|drop|create|alter|truncate)\\b', unquoted) %}
        {{ return({'error': 'not a row expression: it contains a statement keyword', 'columns': []}) }}
    {% endif %}
    {% set columns = [] %}
    {% for alias, column in modules.re.findall('\\b([A-Za-z_][A-Za-z0-9_]*)\\.([A-Za-z_][A-Za-z0-9_]*)', unquoted) %}
        {% do columns.append([alias, column]) %}
    {% endfor %}
    {{ return({'error': none, 'columns': columns}) }}
{% endmacro %}
