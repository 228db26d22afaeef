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
    {%- set predicates = arg_dict['incremental_predicates'] %}
    {%- set rules = dbt_merge._upsert_merge_rules(state.cfg, stored_columns, predicates, map_columns) %}
    {%- set source = dbt_merge._upsert_merge_source(target, state, stored_columns, map_columns, rules, arg_dict) %}
    {%- if source is none %}
        {{- return(dbt_merge._upsert_nothing_to_write(target, arg_dict)) }}
    {%- endif %}
    {{- return(dbt_merge.get_upsert_merge_sql(target, source, state.cfg, stored_columns, predicates, map_columns)) }}
{% endmacro %}


{#-- The MERGE's source, or none when no row of the batch changes the table. Only
     Iceberg needs to know before the MERGE (it commits a snapshot for a MERGE that
     changes nothing; Delta commits no version then, and its MERGE reads the batch rows
     that change the table, _upsert_changes_sql).

     On the spark_session adapter, where the MERGE skips the matched rows it would leave
     as stored, a change is looked for in two steps:
       1. among the precombined versions of a sample of the batch's keys (the first
          _upsert_sample_keys()), broadcast to the table's scan, which stops at the first
          stored row one of them changes. Found: the MERGE reads the batch as it is, so a
          delivery that changes rows costs its MERGE and this look;
       2. otherwise in the whole precombined batch, cached once for the look and the
          MERGE (finish_incremental_upsert uncaches it): a stored row it changes (the
          batch broadcast while it has at most _upsert_broadcast_rows(columns) rows),
          then a row to insert. A re-run of a delivery finds none, and writes nothing.
     Elsewhere the batch rows that change the table are looked for, then the MERGE reads
     them again. --#}
{% macro _upsert_merge_source(target, state, columns, map_columns, rules, arg_dict) %}
    {%- set iceberg = (arg_dict.get('file_format') or config.get('file_format')) == 'iceberg' %}
    {%- if not iceberg or arg_dict.get('state') is none %}
        {%- set changes = dbt_merge._upsert_changes_sql(target, state.precombined, state.cfg, columns, arg_dict['incremental_predicates'], map_columns) %}
        {%- if not iceberg %}
            {{- return(changes) }}
        {%- endif %}
        {%- set found = run_query('select 1 from (' ~ changes ~ ') limit 1') %}
        {{- return(changes if found.rows | length > 0 else none) }}
    {%- endif %}
    {%- set broadcast_rows = dbt_merge._upsert_broadcast_rows(columns) %}
    {%- set sample_keys = dbt_merge._upsert_sample_keys() %}
    {%- set batch = arg_dict['temp_relation'] %}
    {%- set keys = [] %}
    {%- for key in state.cfg.unique_key %}{% do keys.append(adapter.quote(key)) %}{% endfor %}
    {%- set joined = ' as DBT_INTERNAL_SOURCE join ' ~ target ~ ' as DBT_INTERNAL_DEST on ' ~ rules.on ~ ' where ' ~ rules.changes_when ~ ' limit 1' %}
    {%- set hint = '/*+ BROADCAST(DBT_INTERNAL_SOURCE) */ ' %}
    {%- if sample_keys > 0 %}
        {%- set sample = 'select * from ' ~ batch ~ ' where (' ~ (keys | join(', ')) ~ ') in (select ' ~ (keys | join(', ')) ~ ' from ' ~ batch ~ ' limit ' ~ sample_keys ~ ')' %}
        {%- set sampled = dbt_merge.get_upsert_precombine_sql(sample, state.cfg, state.batch_columns, state.unordered_deletes) %}
        {%- if run_query('select ' ~ hint ~ '1 from (' ~ sampled ~ ')' ~ joined).rows | length > 0 %}
            {{- return(state.precombined) }}
        {%- endif %}
    {%- endif %}
    {%- do log('dbt_merge: ' ~ model.name ~ ': no change among the precombined versions of the first ' ~ sample_keys ~ ' keys of the batch; looking at the whole batch') %}
    {%- set cached = dbt_merge._upsert_cached_relation(target) %}
    {#-- a run that failed after caching (a commit that lost to another writer's)
         leaves its view in the session, which `dbt retry` in the same one reuses;
         `drop table` drops a temporary view, and `drop view` would go to the
         adapter's session without extensions, which does not see it --#}
    {%- do run_query('uncache table if exists ' ~ cached) %}
    {%- do run_query('drop table if exists ' ~ cached) %}
    {%- do run_query('cache table ' ~ cached ~ ' as ' ~ state.precombined) %}
    {%- do state.update({'batch_cached': true}) %}
    {%- set batch_rows = run_query('select count(*) from ' ~ cached).columns[0].values()[0] %}
    {%- set changed = run_query('select ' ~ (hint if batch_rows <= broadcast_rows else '') ~ '1 from ' ~ cached ~ joined) %}
    {%- if changed.rows | length == 0 %}
        {%- set inserted = run_query('select 1 from ' ~ cached ~ ' as DBT_INTERNAL_SOURCE left anti join ' ~ target ~ ' as DBT_INTERNAL_DEST on ' ~ rules.on ~ ' where not ' ~ rules.is_delete ~ ' limit 1') %}
        {%- if inserted.rows | length == 0 %}
            {%- do dbt_merge._upsert_drop_cached(target, state) %}
            {{- return(none) }}
        {%- endif %}
    {%- endif %}
    {{- return('select * from ' ~ cached) }}
{% endmacro %}


{#-- How many of the batch's keys the first look for a change takes
     (_upsert_merge_source): the var dbt_merge_upsert_sample_keys, else 1,000; 0 looks
     at the whole batch at once. --#}
{% macro _upsert_sample_keys() %}
    {{- return(dbt_merge._upsert_rows_var('dbt_merge_upsert_sample_keys', 1000)) }}
{% endmacro %}


{#-- The most rows of a precombined batch of `columns` columns broadcast to the table's
     scan when the spark_session adapter looks for a change before the MERGE
     (_upsert_merge_source): the var dbt_merge_upsert_broadcast_rows, else 10,000,000
     values (1,000,000 rows of 10 columns, 200,000 of 50) and at most 1,000,000 rows,
     which a driver of 1 GiB holds. A larger batch is joined with a shuffle, which reads
     the whole table before the first row is found. --#}
{% macro _upsert_broadcast_rows(columns) %}
    {%- set default = [1000000, (10000000 / ([columns | length, 1] | max)) | int] | min %}
    {{- return(dbt_merge._upsert_rows_var('dbt_merge_upsert_broadcast_rows', default)) }}
{% endmacro %}


{#-- The var `name`, a number of rows of 0 or more, else `default`; refused by name. --#}
{% macro _upsert_rows_var(name, default) %}
    {%- set rows = var(name, default) %}
    {%- if rows is not number or rows is sameas true or rows is sameas false or rows < 0 %}
        {%- do exceptions.raise_compiler_error("dbt_merge upsert in model " ~ model.name ~ ", var '" ~ name ~ "': expected a number of rows of 0 or more, got " ~ rows) %}
    {%- endif %}
    {{- return(rows) }}
{% endmacro %}


{#-- The temporary view of a run's precombined batch, cached for one run. --#}
{% macro _upsert_cached_relation(target) %}
    {{- return(target.identifier ~ '__dbt_batch') }}
{% endmacro %}


{% macro _upsert_drop_cached(target, state) %}
    {%- if state is not none and state.get('batch_cached') %}
        {%- do state.update({'batch_cached': false}) %}
        {%- set cached = dbt_merge._upsert_cached_relation(target) %}
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
