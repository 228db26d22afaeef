{#--
    The spark_session adapter's incremental materialization: dbt-spark's flow, with its
    strategies unchanged, that also runs the strategies a package provides (looked up
    by spark_session_incremental_strategy, beside this file).

    Why here: dbt-spark's materialization accepts a fixed list of strategies and never
    looks up get_incremental_<name>_sql, and a package may not silently replace a
    built-in materialization. An adapter's own materialization comes before its
    parent's. It cannot call dbt-spark's materialization for the other strategies
    (dbt only lets a materialization itself submit Python models), so it follows
    dbt-spark's flow step by step.
--#}
{% materialization incremental, adapter='spark_session', supported_languages=['sql', 'python'] -%}
  {%- set file_format = dbt_spark_validate_get_file_format(config.get('file_format', default='parquet')) -%}
  {%- set strategy_name = config.get('incremental_strategy') or 'append' -%}
  {%- set strategy = spark_session_incremental_strategy(strategy_name, file_format) -%}

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
  {%- if not rebuild -%}
    {%- do spark_session_check_stored_format(existing_relation, file_format) -%}
  {%- endif -%}
  {%- set arg_dict = {
      'target_relation': target_relation, 'temp_relation': tmp_relation,
      'existing_relation': existing_relation, 'rebuild': rebuild, 'file_format': file_format,
      'unique_key': unique_key, 'dest_columns': none, 'incremental_predicates': incremental_predicates,
  } -%}

  {%- if strategy_name in ['insert_overwrite', 'microbatch'] and partition_by -%}
    {%- call statement() -%}
      set spark.sql.sources.partitionOverwriteMode = DYNAMIC
    {%- endcall -%}
  {%- endif -%}

  {{ run_hooks(pre_hooks) }}

  {#-- a strategy with a prepare step sees the staged batch before anything is written --#}
  {%- set staged = strategy is not none and strategy.prepare is not none -%}
  {%- if staged -%}
    {%- call statement('create_tmp_relation', language=language) -%}
      {{ create_table_as(True, tmp_relation, compiled_code, language) }}
    {%- endcall -%}
    {%- do arg_dict.update({'state': strategy.prepare(arg_dict)}) -%}
  {%- endif -%}

  {%- if rebuild -%}
    {%- if existing_relation is not none and not (file_format == 'delta' and existing_relation.is_delta) -%}
      {#-- Delta tables are replaced in place (create or replace) --#}
      {% do adapter.drop_relation(existing_relation) %}
    {%- endif -%}
    {%- if strategy is not none and strategy.first_run_sql is not none -%}
      {%- call statement('main') -%}
        {{ create_table_as(False, target_relation, strategy.first_run_sql(arg_dict)) }}
      {%- endcall -%}
    {%- else -%}
      {%- call statement('main', language=language) -%}
        {{ create_table_as(False, target_relation, compiled_code, language) }}
      {%- endcall -%}
    {%- endif -%}
    {% do persist_constraints(target_relation, model) %}
  {%- else -%}
    {%- if not staged -%}
      {%- call statement('create_tmp_relation', language=language) -%}
        {{ create_table_as(True, tmp_relation, compiled_code, language) }}
      {%- endcall -%}
    {%- endif -%}
    {%- do process_schema_changes(on_schema_change, tmp_relation, existing_relation) -%}
    {#-- Iceberg commits a snapshot for a MERGE or an INSERT of no rows (Delta commits no
         version): an empty batch of dbt-spark's merge or append writes nothing. A SQL
         batch is cached for the check, so the statement reads it once more from memory
         (a MERGE reads its source twice on a copy-on-write table). --#}
    {%- set checked = strategy is none and strategy_name in ['append', 'merge'] and file_format == 'iceberg' -%}
    {%- if checked and language == 'sql' -%}
      {%- call statement('cache_tmp_relation') -%} cache table {{ tmp_relation }} {%- endcall -%}
    {%- endif -%}
    {%- if checked and (run_query('select 1 from ' ~ tmp_relation ~ ' limit 1').rows | length) == 0 -%}
      {%- if strategy_name == 'merge' -%}
        {%- do spark_session_check_unique_key(unique_key, tmp_relation) -%}
      {%- endif -%}
      {%- set main_sql = '' -%}
    {%- elif strategy is not none -%}
      {%- set main_sql = strategy.sql(arg_dict) -%}
    {%- else -%}
      {%- set main_sql = dbt_spark_get_incremental_sql(strategy_name, tmp_relation, target_relation, existing_relation, unique_key, incremental_predicates) -%}
    {%- endif -%}
    {%- if main_sql | trim -%}
      {%- call statement('main') -%} {{ main_sql }} {%- endcall -%}
    {%- else -%}
      {#-- a strategy that finds nothing to write returns no statement --#}
      {%- if checked -%}
        {%- do log(model.name ~ ': the batch is empty: nothing is written to ' ~ target_relation, info=true) -%}
      {%- endif -%}
      {%- do store_result('main', response='nothing to write') -%}
    {%- endif -%}
    {%- if checked and language == 'sql' -%}
      {%- call statement('uncache_tmp_relation') -%} uncache table if exists {{ tmp_relation }} {%- endcall -%}
    {%- endif -%}
  {%- endif -%}

  {%- if strategy is not none and strategy.finish is not none -%}
    {%- do strategy.finish(arg_dict) -%}
  {%- endif -%}

  {%- if language == 'python' and (staged or not rebuild) -%}
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


{#-- An incremental run writes into the stored table: one stored in another format than
     the model's file_format (built before file_format was set, or with another one)
     fails here, before anything is written, and names the rebuild. --#}
{% macro spark_session_check_stored_format(relation, file_format) %}
  {%- if file_format in ['iceberg', 'delta'] and not relation['is_' ~ file_format] -%}
    {%- set provider = modules.re.search('Provider: (\\w+)', relation.information or '') -%}
    {%- set msg -%}
      Model {{ model.name }}: config file_format is {{ file_format }}, but {{ relation }} is stored as {{ provider.group(1) if provider else 'another format' }} (it was built before file_format was set, or with another one), and an incremental run cannot change a table's format. Rebuild it as {{ file_format }} with --full-refresh: dbt run --full-refresh --select {{ model.name }}
    {%- endset -%}
    {%- do exceptions.raise_compiler_error(msg) -%}
  {%- endif -%}
{% endmacro %}


{#-- A merge whose batch is empty writes nothing, but its unique_key is still checked:
     a key that is not a column of the model fails as the MERGE would have. --#}
{% macro spark_session_check_unique_key(unique_key, relation) %}
  {%- set keys = [unique_key] if unique_key is string else (unique_key or []) -%}
  {%- set columns = adapter.get_columns_in_relation(relation) | map(attribute='name') | map('lower') | list -%}
  {%- for key in keys if key and key | lower not in columns -%}
    {%- do exceptions.raise_compiler_error('Model ' ~ model.name ~ ': config unique_key names ' ~ key ~ ', which is not a column of the model (its columns: ' ~ columns | join(', ') ~ ')') -%}
  {%- endfor -%}
{% endmacro %}
