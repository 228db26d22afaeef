{#--
    incremental_strategy='upsert': the MERGE INTO of the staged batch
    (arg_dict.temp_relation) into arg_dict.target_relation, after the upsert's checks.

    Two flows run it, with one and the same sequence of steps:
      - the spark_session adapter's incremental materialization finds it by its name
        (with prepare_incremental_upsert, get_first_run_upsert_sql and
        finish_incremental_upsert around it), and passes the prepared state in
        arg_dict.state;
      - adapters that look custom strategies up by name themselves, such as
        dbt-databricks, call it with the batch they staged; it then prepares the run
        itself. dbt only finds a package's strategy through a macro of the root project:

        {% macro get_incremental_upsert_sql(arg_dict) %}
            {{ return(dbt_merge.get_incremental_upsert_sql(arg_dict)) }}
        {% endmacro %}

        There the first run (and --full-refresh) is the adapter's own CREATE TABLE AS:
        write the model's select inside {% call dbt_merge.precombined() %} for the same
        precombine and delete rules; the table settings are stored by the first
        incremental run; provenance=true is not available (it needs the table version
        after the MERGE, which only the spark_session materialization reads).
--#}
{% macro get_incremental_upsert_sql(arg_dict) %}
    {{ return(adapter.dispatch('get_incremental_upsert_sql', 'dbt_merge')(arg_dict)) }}
{% endmacro %}


{% macro default__get_incremental_upsert_sql(arg_dict) %}
    {%- set state = arg_dict.get('state') or dbt_merge._upsert_prepare(arg_dict, owns_run=false) %}
    {%- set target = arg_dict['target_relation'] %}
    {#-- the stored table's columns, after on_schema_change: batch columns it does not
         have are left out under 'ignore', as dbt-spark's merge does --#}
    {%- set stored_columns = adapter.get_columns_in_relation(target) | map(attribute='name') | list %}
    {{- return(dbt_merge.get_upsert_merge_sql(target, state.precombined, state.cfg, stored_columns, arg_dict['incremental_predicates'])) }}
{% endmacro %}
