{#--
    incremental_strategy='upsert' for adapters whose incremental materialization looks
    up custom strategies by name (dbt's get_incremental_<strategy>_sql convention), such
    as dbt-databricks: it returns the MERGE INTO for the batch the materialization has
    staged (arg_dict.temp_relation), after the same checks as the spark_session adapter's
    materialization (config, batch keys and ordering values, delete column type, mode
    lock). dbt only finds a package's strategy through a macro of the root project:

        {% macro get_incremental_upsert_sql(arg_dict) %}
            {{ return(dbt_merge.get_incremental_upsert_sql(arg_dict)) }}
        {% endmacro %}

    Differences from the spark_session materialization, which owns the whole run:
      - the first run (and --full-refresh) is the adapter's own CREATE TABLE AS: write
        the model's select inside {% call dbt_merge.precombined() %} so it gets the same
        precombine and delete rules;
      - the table settings are stored by the first incremental run (a table created by
        the adapter has none yet) and checked on every later one;
      - provenance=true is not available (it needs the table version after the MERGE).
--#}
{% macro get_incremental_upsert_sql(arg_dict) %}
    {{ return(adapter.dispatch('get_incremental_upsert_sql', 'dbt_merge')(arg_dict)) }}
{% endmacro %}


{% macro default__get_incremental_upsert_sql(arg_dict) %}
    {%- set target = arg_dict['target_relation'] %}
    {%- set batch = arg_dict['temp_relation'] %}
    {%- set batch_columns = adapter.get_columns_in_relation(batch) %}
    {%- set columns = batch_columns | map(attribute='name') | list %}
    {%- set cfg = dbt_merge.upsert_config(columns) %}
    {%- if cfg.provenance %}
        {%- do dbt_merge._upsert_error('provenance', 'provenance events need the spark_session adapter, whose materialization reads the table version after the MERGE; on ' ~ adapter.type() ~ ' set provenance=false') %}
    {%- endif %}
    {%- do dbt_merge._check_upsert_batch(batch, cfg, batch_columns) %}
    {%- do dbt_merge._check_upsert_table_settings(target, dbt_merge._upsert_table_settings(cfg), adopt=true) %}
    {%- set precombined = dbt_merge.get_upsert_precombine_sql('select * from ' ~ batch, cfg, columns) %}
    {%- set stored_columns = adapter.get_columns_in_relation(target) | map(attribute='name') | list %}
    {{- return(dbt_merge.get_upsert_merge_sql(target, precombined, cfg, stored_columns, arg_dict['incremental_predicates'])) }}
{% endmacro %}
