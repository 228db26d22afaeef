{#--
    The upsert's first step in the spark_session adapter's incremental flow, once the
    batch is staged and before anything is written: its config, the batch's keys,
    ordering values and delete column, the mode lock of an existing table, the
    precombined batch, and the table version provenance starts from.
--#}
{% macro prepare_incremental_upsert(arg_dict) %}
    {{ return(dbt_merge._upsert_prepare(arg_dict, owns_run=true)) }}
{% endmacro %}


{#-- owns_run: the spark_session materialization runs the whole model (it stores the
     settings of a first run, and reads table versions for provenance); otherwise an
     adapter's own flow created the table, whose settings are adopted by the first
     merge, and provenance is refused. --#}
{% macro _upsert_prepare(arg_dict, owns_run) %}
    {%- set file_format = arg_dict.get('file_format') %}
    {%- if owns_run %}
        {%- do dbt_merge._upsert_check_file_format(file_format) %}
    {%- endif %}
    {%- set batch = arg_dict['temp_relation'] %}
    {%- set target = arg_dict['target_relation'] %}
    {%- set batch_columns = adapter.get_columns_in_relation(batch) %}
    {%- set columns = batch_columns | map(attribute='name') | list %}
    {%- set cfg = dbt_merge.upsert_config(columns) %}
    {%- if not owns_run %}
        {%- do dbt_merge._upsert_refuse_steps_after_merge(cfg) %}
    {%- endif %}
    {%- set checked = dbt_merge._check_upsert_batch(batch, cfg, batch_columns) %}
    {%- set settings = dbt_merge._upsert_table_settings(cfg) %}
    {%- set existing = not arg_dict.get('rebuild', false) %}
    {%- if existing %}
        {%- do dbt_merge._check_upsert_table_settings(target, settings, cfg, adopt=not owns_run) %}
    {%- endif %}
    {%- set state = {
        'cfg': cfg,
        'settings': settings,
        'precombined': dbt_merge.get_upsert_precombine_sql('select * from ' ~ batch, cfg, columns, checked.unordered_deletes > 0),
        'batch_columns': columns,
        'unordered_deletes': checked.unordered_deletes > 0,
    } %}
    {%- if cfg.provenance %}
        {%- set events = dbt_merge._upsert_provenance_relation(target) %}
        {%- do state.update({
            'events': events,
            'before_version': dbt_merge._upsert_provenance_before(target, events, cfg, file_format, existing),
        }) %}
    {%- endif %}
    {{- return(state) }}
{% endmacro %}


{#-- Where an adapter's own flow runs the model (dbt-databricks, dbt-spark), nothing runs
     after its MERGE: provenance and inline compaction are refused by name. --#}
{% macro _upsert_refuse_steps_after_merge(cfg) %}
    {%- if cfg.provenance %}
        {%- do dbt_merge._upsert_error('provenance', 'provenance events need the spark_session adapter, whose materialization reads the table version after the MERGE; on ' ~ adapter.type() ~ ' set provenance=false') %}
    {%- endif %}
    {%- if cfg.inline_compaction %}
        {%- do dbt_merge._upsert_error('inline_compaction', 'compaction at the end of a run needs the spark_session adapter, whose materialization runs steps after the MERGE; on ' ~ adapter.type() ~ ' remove inline_compaction and schedule dbt_merge.execute_upsert_compaction (or OPTIMIZE)') %}
    {%- endif %}
{% endmacro %}


{#-- The upsert writes with MERGE INTO: its table is Iceberg, Delta or Hudi. --#}
{% macro _upsert_check_file_format(file_format) %}
    {%- if file_format not in ['iceberg', 'delta', 'hudi'] %}
        {%- do dbt_merge._upsert_error('file_format', "is " ~ file_format ~ ", but incremental_strategy 'upsert' needs MERGE INTO: use iceberg or delta") %}
    {%- endif %}
{% endmacro %}
