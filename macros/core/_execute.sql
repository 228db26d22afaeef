{#-- Runs one statement whose result is not read (DDL, INSERT, MERGE, a CALL whose
     output is not needed). Not run_query: over dbt-spark's Thrift connection a
     statement without rows cannot be fetched (PyHive's fetchall fails on it). --#}
{% macro _execute(sql) %}
    {%- call statement('dbt_merge_execute', fetch_result=False, auto_begin=False) -%}
        {{ sql }}
    {%- endcall -%}
{% endmacro %}
