{#--
    This project's own models on dbt-spark (the `thrift` target): the file that
    docs/upserts.md ("On a schedule") tells a project on dbt-spark to add, which shows it
    from here. dbt finds these two macros before dbt-spark's for this project's models
    only (a package's macros of an adapter's name stay local to the package): a project
    that installs dbt_merge adds the file to its own macros/.
--#}
{#-- --8<-- [start:routing] --#}
{% macro dbt_spark_validate_get_incremental_strategy(raw_strategy, file_format) %}
    {{ return(dbt_merge.dbt_spark_validate_strategy(raw_strategy, file_format)) }}
{% endmacro %}
{% macro dbt_spark_get_incremental_sql(strategy, source, target, existing, unique_key, incremental_predicates) %}
    {{ return(dbt_merge.dbt_spark_incremental_sql(strategy, source, target, existing, unique_key, incremental_predicates)) }}
{% endmacro %}
{#-- --8<-- [end:routing] --#}
