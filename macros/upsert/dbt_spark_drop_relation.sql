{#--
    dbt-spark drops a table with `drop table if exists`. On a Thrift server whose
    session catalog is Iceberg's SparkSessionCatalog of type hive, that drop goes through
    Iceberg's Hive catalog, which removes a table that is not Iceberg from the metastore
    and keeps its folder (apache/iceberg#12790): building it again (a parquet seed on the
    next `dbt build`, a parquet table model) then fails with LOCATION_ALREADY_EXISTS.
    `drop table ... purge` is refused by Iceberg's catalog for a table that is not its
    own and goes on to Spark's, which removes the folder of a managed table. So on
    dbt-spark a table that is not Iceberg, Delta or Hudi (whose catalogs keep their own
    rules for purge) is dropped with purge; everything else is dbt-spark's drop.
--#}
{% macro dbt_spark_drop_relation(relation) %}
    {%- if adapter.type() == 'spark' and relation.type == 'table'
        and dbt_merge._dbt_spark_drop_purges(relation) %}
        {%- call statement('drop_relation', auto_begin=False) -%}
            drop table if exists {{ relation }} purge
        {%- endcall %}
    {%- else %}
        {{- return(dbt.spark__drop_relation(relation)) }}
    {%- endif %}
{% endmacro %}


{#-- Whether dbt_spark_drop_relation purges the table: it exists and its provider is
     none of Iceberg, Delta and Hudi (read from the table, as the relation that dbt-spark
     lists may not carry it). --#}
{% macro _dbt_spark_drop_purges(relation) %}
    {%- set found = run_query("show tables in " ~ relation.schema ~ " like '" ~ relation.identifier ~ "'") %}
    {%- if found.rows | length == 0 %}
        {{- return(false) }}
    {%- endif %}
    {{- return(dbt_merge._table_provider(relation) not in ('iceberg', 'delta', 'hudi', none)) }}
{% endmacro %}
