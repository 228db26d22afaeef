{#--
    dbt-spark (`type: spark`: Thrift, HTTP, ODBC) accepts a fixed list of incremental
    strategies and never looks a package's strategy up by name. A project on dbt-spark
    routes the package's through two macros of its own, which dbt finds before
    dbt-spark's (a root project's macro wins over an adapter's of the same name):
    dbt_spark_validate_get_incremental_strategy calls dbt_spark_validate_strategy, and
    dbt_spark_get_incremental_sql calls dbt_spark_incremental_sql, with the same
    arguments (the file is in docs/upserts.md, "On a schedule").

    Every other strategy goes on to dbt-spark's own macros, as `dbt.<macro>` (dbt
    puts the adapter's macros in its `dbt` namespace; `dbt_spark.<macro>` is undefined
    there). As on dbt-databricks, the first run is dbt-spark's CREATE TABLE AS:
    write the model's select inside a call block of dbt_merge.precombined().
--#}
{% macro dbt_spark_validate_strategy(raw_strategy, file_format) %}
    {%- if raw_strategy == 'upsert' %}
        {%- do dbt_merge._upsert_check_file_format(file_format) %}
        {{- return(raw_strategy) }}
    {%- elif raw_strategy == 'entity_state' %}
        {%- do dbt_merge._refuse_entity_state() %}
    {%- endif %}
    {{- return(dbt.dbt_spark_validate_get_incremental_strategy(raw_strategy, file_format)) }}
{% endmacro %}


{% macro dbt_spark_incremental_sql(strategy, source, target, existing, unique_key, incremental_predicates) %}
    {%- if strategy == 'upsert' %}
        {{- return(dbt_merge.get_incremental_upsert_sql({
            'target_relation': target, 'temp_relation': source, 'existing_relation': existing,
            'unique_key': unique_key, 'dest_columns': none,
            'incremental_predicates': incremental_predicates,
            'file_format': config.get('file_format'),
        })) }}
    {%- endif %}
    {{- return(dbt.dbt_spark_get_incremental_sql(strategy, source, target, existing, unique_key, incremental_predicates)) }}
{% endmacro %}


{#-- incremental_strategy='entity_state' on an adapter other than spark_session: refused
     by name, before anything is read or written (the edges model calls it as it
     renders, dbt-spark's strategy check calls it again). --#}
{% macro _refuse_entity_state() %}
    {%- if adapter.type() != 'spark_session' %}
        {%- do exceptions.raise_compiler_error("dbt_merge in model " ~ model.name ~ ": incremental_strategy 'entity_state' runs on the spark_session adapter only (it writes the merge's state in steps around its MERGE), not on " ~ adapter.type() ~ ". Materialize the edges as a table (or view) here, or run the model on the spark_session adapter") %}
    {%- endif %}
{% endmacro %}
