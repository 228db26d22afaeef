{#--
    The spark_session adapter's incremental materialization: dbt-spark's strategies
    (append, merge, insert_overwrite, microbatch) unchanged, plus `upsert`, dbt_merge's
    record upserts (SPEC §2), whose SQL comes from the dbt_merge package's macros.

    Why here: dbt-spark's materialization accepts a fixed list of strategies and never
    looks up get_incremental_<name>_sql, and a package may not silently replace a
    built-in materialization. An adapter's own materialization comes before its
    parent's. It cannot call dbt-spark's materialization for the other strategies
    (dbt only lets a materialization itself submit Python models), so it follows
    dbt-spark's flow step by step and branches for upsert.
--#}
{% materialization incremental, adapter='spark_session', supported_languages=['sql', 'python'] -%}
  {%- set file_format = dbt_spark_validate_get_file_format(config.get('file_format', default='parquet')) -%}
  {%- set raw_strategy = config.get('incremental_strategy') or 'append' -%}
  {%- if raw_strategy == 'upsert' -%}
    {%- if dbt_merge is not defined -%}
      {% do exceptions.raise_compiler_error("incremental_strategy 'upsert' comes from the dbt_merge package; add it to packages.yml and run dbt deps") %}
    {%- endif -%}
    {%- if file_format not in ['iceberg', 'delta', 'hudi'] -%}
      {% do dbt_merge._upsert_error('file_format', "is " ~ file_format ~ ", but incremental_strategy 'upsert' needs MERGE INTO: use iceberg or delta") %}
    {%- endif -%}
    {%- set strategy = 'upsert' -%}
  {%- else -%}
    {%- set strategy = dbt_spark_validate_get_incremental_strategy(raw_strategy, file_format) -%}
  {%- endif -%}

  {%- set grant_config = config.get('grants') -%}
  {%- set unique_key = config.get('unique_key', none) -%}
  {%- set partition_by = config.get('partition_by', none) -%}
  {%- set language = model['language'] -%}
  {%- set on_schema_change = incremental_validate_on_schema_change(config.get('on_schema_change'), default='ignore') -%}
  {%- set incremental_predicates = config.get('predicates', none) or config.get('incremental_predicates', none) -%}
  {%- set target_relation = this -%}
  {%- set existing_relation = load_relation(this) -%}
  {%- set tmp_relation = this.incorporate(path = {"identifier": this.identifier ~ '__dbt_tmp'}) -%}
  {%- if language == 'sql' -%}
    {#-- a SQL batch is a temporary view, which has no database or schema --#}
    {%- set tmp_relation = tmp_relation.include(database=false, schema=false) -%}
  {%- endif -%}
  {%- set rebuild = existing_relation is none or existing_relation.is_view or should_full_refresh() -%}

  {%- if strategy in ['insert_overwrite', 'microbatch'] and partition_by -%}
    {%- call statement() -%}
      set spark.sql.sources.partitionOverwriteMode = DYNAMIC
    {%- endcall -%}
  {%- endif -%}

  {{ run_hooks(pre_hooks) }}

  {%- if strategy == 'upsert' -%}
    {#-- the batch first: its columns and values are checked before anything is written --#}
    {%- call statement('create_tmp_relation', language=language) -%}
      {{ create_table_as(True, tmp_relation, compiled_code, language) }}
    {%- endcall -%}
    {%- set batch_columns = adapter.get_columns_in_relation(tmp_relation) -%}
    {%- set columns = batch_columns | map(attribute='name') | list -%}
    {%- set cfg = dbt_merge.upsert_config(columns) -%}
    {%- do dbt_merge._check_upsert_batch(tmp_relation, cfg, batch_columns) -%}
    {%- set settings = dbt_merge._upsert_table_settings(cfg) -%}
    {%- if not rebuild -%}
      {%- do dbt_merge._check_upsert_table_settings(target_relation, settings) -%}
    {%- endif -%}
    {%- set precombined = dbt_merge.get_upsert_precombine_sql('select * from ' ~ tmp_relation, cfg, columns) -%}
    {%- if cfg.provenance -%}
      {%- set provenance_relation = dbt_merge._upsert_provenance_relation(target_relation) -%}
      {%- set before_version = dbt_merge._upsert_provenance_before(target_relation, provenance_relation, cfg, file_format, not rebuild) -%}
    {%- endif -%}
  {%- endif -%}

  {%- if rebuild -%}
    {%- if existing_relation is not none and not (file_format == 'delta' and existing_relation.is_delta) -%}
      {#-- Delta tables are replaced in place (create or replace) --#}
      {% do adapter.drop_relation(existing_relation) %}
    {%- endif -%}
    {%- if strategy == 'upsert' -%}
      {#-- the first run applies the same precombine and delete rules --#}
      {%- call statement('main') -%}
        {{ create_table_as(False, target_relation, dbt_merge._upsert_first_batch_sql(precombined, cfg)) }}
      {%- endcall -%}
      {%- do dbt_merge._store_upsert_table_settings(target_relation, settings) -%}
    {%- else -%}
      {%- call statement('main', language=language) -%}
        {{ create_table_as(False, target_relation, compiled_code, language) }}
      {%- endcall -%}
    {%- endif -%}
    {% do persist_constraints(target_relation, model) %}
  {%- else -%}
    {%- if strategy != 'upsert' -%}
      {%- call statement('create_tmp_relation', language=language) -%}
        {{ create_table_as(True, tmp_relation, compiled_code, language) }}
      {%- endcall -%}
    {%- endif -%}
    {%- do process_schema_changes(on_schema_change, tmp_relation, existing_relation) -%}
    {%- call statement('main') -%}
      {%- if strategy == 'upsert' -%}
        {#-- the stored table's columns, after on_schema_change: batch columns it does not
             have are left out under 'ignore', as dbt-spark's merge does --#}
        {%- set stored_columns = adapter.get_columns_in_relation(target_relation) | map(attribute='name') | list -%}
        {{ dbt_merge.get_upsert_merge_sql(target_relation, precombined, cfg, stored_columns, incremental_predicates) }}
      {%- else -%}
        {{ dbt_spark_get_incremental_sql(strategy, tmp_relation, target_relation, existing_relation, unique_key, incremental_predicates) }}
      {%- endif -%}
    {%- endcall -%}
  {%- endif -%}

  {%- if strategy == 'upsert' and cfg.provenance -%}
    {#-- CREATE / UPDATE / DELETE events: the diff of this commit over the batch's keys --#}
    {%- do dbt_merge._upsert_provenance_after(target_relation, provenance_relation, cfg, file_format, before_version, none if rebuild else tmp_relation) -%}
  {%- endif -%}

  {%- if language == 'python' and (strategy == 'upsert' or not rebuild) -%}
    {#-- a Python batch is a real table: drop it (as dbt-spark does) --#}
    {% call statement('drop_relation') -%}
      drop table if exists {{ tmp_relation }}
    {%- endcall %}
  {%- endif -%}

  {% set should_revoke = should_revoke(existing_relation, full_refresh_mode) %}
  {% do apply_grants(target_relation, grant_config, should_revoke) %}
  {% do persist_docs(target_relation, model) %}
  {{ run_hooks(post_hooks) }}
  {{ return({'relations': [target_relation]}) }}
{%- endmaterialization %}
