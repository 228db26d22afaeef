{#--
  Seeds on the spark_session adapter: dbt's seed materialization, with the table and its
  rows written in one statement from a DataFrame of the CSV's rows (adapter.write_seed)
  instead of dbt-spark's `insert into ... values` batches of SQL literals.

  * The table is created as dbt-spark's table materialization creates one
    (create_table_as: file_format, options, tblproperties, partition_by, clustered_by,
    location_root, persist_docs' comment), each value cast to the seed's column type as
    dbt-spark's INSERT casts it, so types and values are the same.
  * An Iceberg (or Delta) seed whose table is of that format already is replaced in one
    commit (`create or replace table ... as select`); any other is dropped first, as
    dbt-spark drops it. `--full-refresh` drops it in every case.
  * Checks run before anything is written: a value that does not fit its column, and
    two headers that differ only in case, fail the seed; the old table stays.
  * `seed_load: insert` (a seed config) keeps dbt-spark's INSERT path.
--#}

{% macro spark_session__create_csv_table(model, agate_table) %}
  {%- if _spark_session_seed_load(model) == 'insert' -%}
    {{ return(spark__create_csv_table(model, agate_table)) }}
  {%- endif -%}
  {{ return(_spark_session_write_seed(model, agate_table, none)) }}
{% endmacro %}


{% macro spark_session__reset_csv_table(model, full_refresh, old_relation, agate_table) %}
  {%- if _spark_session_seed_load(model) == 'insert' -%}
    {{ return(spark__reset_csv_table(model, full_refresh, old_relation, agate_table)) }}
  {%- endif -%}
  {%- set file_format = config.get('file_format', validator=validation.any[basestring]) -%}
  {%- set replaces = not full_refresh and (
        (file_format == 'iceberg' and old_relation.is_iceberg)
        or (file_format == 'delta' and old_relation.is_delta)) -%}
  {{ return(_spark_session_write_seed(model, agate_table, none if replaces else old_relation)) }}
{% endmacro %}


{% macro spark_session__load_csv_rows(model, agate_table) %}
  {%- if _spark_session_seed_load(model) == 'insert' -%}
    {{ return(spark__load_csv_rows(model, agate_table)) }}
  {%- endif -%}
  {{ return('-- the rows were written with the table, from one DataFrame (spark_session)') }}
{% endmacro %}


{% macro _spark_session_seed_load(model) %}
  {%- set load = model['config'].get('seed_load', 'dataframe') -%}
  {%- if load not in ['dataframe', 'insert'] -%}
    {%- set expected = "seed_load must be 'dataframe' (the default: one write from a DataFrame) or 'insert' (dbt-spark's insert batches), not " -%}
    {{ exceptions.raise_compiler_error(
        "seed " ~ model['name'] ~ " (" ~ model['original_file_path'] ~ "): " ~ expected
        ~ load | tojson) }}
  {%- endif -%}
  {{ return(load) }}
{% endmacro %}


{% macro _spark_session_write_seed(model, agate_table, drop_first) %}
  {%- set column_override = model['config'].get('column_types', {}) -%}
  {%- set quote_seed_column = model['config'].get('quote_columns', None) -%}
  {%- set headers, names, types = [], [], [] -%}
  {%- for col_name in agate_table.column_names -%}
    {%- set inferred_type = adapter.convert_type(agate_table, loop.index0) -%}
    {%- do headers.append(col_name | string) -%}
    {%- do names.append(adapter.quote_seed_column(col_name | string, quote_seed_column)) -%}
    {%- do types.append(column_override.get(col_name, inferred_type)) -%}
  {%- endfor -%}
  {%- set view = modules.re.sub('[^0-9A-Za-z_]', '_', 'dbt_merge_seed__' ~ this.schema ~ '__' ~ this.identifier) -%}
  {%- set select_sql -%}
    select
    {%- for name in names %}
      cast(_c{{ loop.index0 }} as {{ types[loop.index0] }}) as {{ name }}{{ ',' if not loop.last }}
    {%- endfor %}
    from {{ view }}
  {%- endset -%}
  {%- set sql = create_table_as(False, this, select_sql) -%}
  {%- set seed = model['name'] ~ ' (' ~ model['original_file_path'] ~ ')' -%}
  {%- do adapter.write_seed(seed, agate_table, headers, names, types, view, sql, drop_first) -%}
  {{ return(sql) }}
{% endmacro %}
