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
    {%- set stored = adapter.get_columns_in_relation(target) %}
    {%- set stored_columns = stored | map(attribute='name') | list %}
    {%- set map_columns = [] %}
    {%- for column in stored if (column.dtype | lower).startswith('map') %}{% do map_columns.append(column.name) %}{% endfor %}
    {%- set changes = dbt_merge._upsert_changes_sql(target, state.precombined, state.cfg, stored_columns, arg_dict['incremental_predicates'], map_columns) %}
    {%- set source = dbt_merge._upsert_stage_changes(target, changes, arg_dict) %}
    {%- if source is none %}
        {{- return(dbt_merge._upsert_nothing_to_write(target, arg_dict)) }}
    {%- endif %}
    {{- return(dbt_merge.get_upsert_merge_sql(target, source, state.cfg, stored_columns, arg_dict['incremental_predicates'])) }}
{% endmacro %}


{#-- The MERGE's source: the batch rows that change the table (_upsert_changes_sql), or
     none when there is none. Only Iceberg needs to know before the MERGE (it commits a
     snapshot for a MERGE that changes nothing; Delta commits no version then): on the
     spark_session adapter the rows are cached once, for the count and the MERGE, and
     finish_incremental_upsert uncaches them; elsewhere they are counted, then the MERGE
     reads them again. --#}
{% macro _upsert_stage_changes(target, changes, arg_dict) %}
    {%- if (arg_dict.get('file_format') or config.get('file_format')) != 'iceberg' %}
        {{- return(changes) }}
    {%- endif %}
    {%- set state = arg_dict.get('state') %}
    {%- if state is not none %}
        {%- set cached = dbt_merge._upsert_changes_relation(target) %}
        {#-- a run that failed after caching (a commit that lost to another writer's)
             leaves its view in the session, which `dbt retry` in the same one reuses;
             `drop table` drops a temporary view, and `drop view` would go to the
             adapter's session without extensions, which does not see it --#}
        {%- do run_query('uncache table if exists ' ~ cached) %}
        {%- do run_query('drop table if exists ' ~ cached) %}
        {%- do run_query('cache table ' ~ cached ~ ' as ' ~ changes) %}
        {%- do state.update({'changes_cached': true}) %}
        {%- set source = 'select * from ' ~ cached %}
    {%- else %}
        {%- set source = changes %}
    {%- endif %}
    {%- set found = run_query('select 1 from (' ~ source ~ ') limit 1') %}
    {%- if found.rows | length == 0 %}
        {%- do dbt_merge._upsert_drop_changes(target, state) %}
        {{- return(none) }}
    {%- endif %}
    {{- return(source) }}
{% endmacro %}


{#-- The temporary view of the batch rows that change the table, cached for one run. --#}
{% macro _upsert_changes_relation(target) %}
    {{- return(target.identifier ~ '__dbt_changes') }}
{% endmacro %}


{% macro _upsert_drop_changes(target, state) %}
    {%- if state is not none and state.get('changes_cached') %}
        {%- do state.update({'changes_cached': false}) %}
        {%- set cached = dbt_merge._upsert_changes_relation(target) %}
        {%- do run_query('uncache table if exists ' ~ cached) %}
        {%- do run_query('drop table if exists ' ~ cached) %}
    {%- endif %}
{% endmacro %}


{#-- No row of the batch changes the table: nothing is written. The spark_session
     adapter's materialization then runs no statement (an empty one); on another
     adapter the main statement is this harmless query. --#}
{% macro _upsert_nothing_to_write(target, arg_dict) %}
    {%- do log(model.name ~ ': no row of the batch changes ' ~ target ~ ': nothing is written', info=true) %}
    {%- if arg_dict.get('state') is not none %}
        {{- return('') }}
    {%- endif %}
    {{- return("select 'nothing to write' as dbt_merge_upsert") }}
{% endmacro %}
