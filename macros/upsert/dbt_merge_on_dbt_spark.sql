{#--
    This project's own models on dbt-spark (the `thrift` target): the file that
    docs/upserts.md ("On a schedule") tells a project on dbt-spark to add, which shows it
    from here. dbt finds these macros before dbt-spark's for this project's models only
    (a package's macros of an adapter's name stay local to the package): a project that
    installs dbt_merge adds the file to its own macros/. The third routes dbt-spark's
    drop of a table, so that a parquet seed or table can be built again on a Thrift
    server whose session catalog is Iceberg's (dbt_spark_drop_relation).
--#}
{#-- --8<-- [start:routing] --#}
{% macro dbt_spark_validate_get_incremental_strategy(raw_strategy, file_format) %}
    {{ return(dbt_merge.dbt_spark_validate_strategy(raw_strategy, file_format)) }}
{% endmacro %}
{% macro dbt_spark_get_incremental_sql(strategy, source, target, existing, unique_key, incremental_predicates) %}
    {{ return(dbt_merge.dbt_spark_incremental_sql(strategy, source, target, existing, unique_key, incremental_predicates)) }}
{% endmacro %}
{% macro spark__drop_relation(relation) %}
    {{ return(dbt_merge.dbt_spark_drop_relation(relation)) }}
{% endmacro %}
{#-- --8<-- [end:routing] --#}
