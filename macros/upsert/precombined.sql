{#--
    For adapters that build an upsert model's first run themselves (dbt-databricks: a
    plain CREATE TABLE AS of the model's query), the same first-run rules as the
    spark_session materialization: one row per key (the upsert precombine) and no
    deleted keys. Wrap the model's select in a call block:

        {% call dbt_merge.precombined() %}
            select * from {{ ref('stg_order_changes') }}
        {% endcall %}

    On incremental runs the query is returned as it is (the strategy precombines the
    batch). The spark_session adapter's materialization precombines a first run itself,
    so there the block is not needed (and only costs a second pass over the first
    batch); it is there for a model that runs on several adapters, as the demo's upsert
    models do. Provenance and inline compaction are refused on the other adapters only:
    the spark_session materialization runs their steps after the MERGE.
--#}
{% macro precombined() %}
    {%- set query = caller() %}
    {%- if not execute or is_incremental() %}
        {{- return(query) }}
    {%- endif %}
    {%- set batch_columns = dbt_merge._query_columns(query) %}
    {%- set columns = batch_columns | map(attribute='name') | list %}
    {%- set cfg = dbt_merge.upsert_config(columns) %}
    {%- if adapter.type() != 'spark_session' %}
        {%- do dbt_merge._upsert_refuse_steps_after_merge(cfg) %}
    {%- endif %}
    {%- set checked = dbt_merge._check_upsert_batch('(' ~ query ~ ') as batch', cfg, batch_columns) %}
    {{- return(dbt_merge._upsert_first_batch_sql(dbt_merge.get_upsert_precombine_sql(query, cfg, columns, checked.unordered_deletes > 0), cfg)) }}
{% endmacro %}
