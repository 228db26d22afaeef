{#--
    The incremental strategies of the spark_session adapter: dbt-spark's own (append,
    merge, insert_overwrite, microbatch), plus every strategy a package macro
    get_incremental_<name>_sql provides: the root project's first (dbt's convention),
    then the dbt_merge package's. The adapter knows no strategy by name.

    A strategy may add steps around the flow, each an optional macro of the package,
    found by its name:
      prepare_incremental_<name>(arg_dict)   runs once the batch is staged (the staged
                                             batch is arg_dict.temp_relation, on a first
                                             run too) and before anything is written;
                                             what it returns is arg_dict.state;
      get_first_run_<name>_sql(arg_dict)     the select of a first run (a new table or
                                             --full-refresh); default: the model's code;
      finish_incremental_<name>(arg_dict)    runs after the main statement's commit.
    Returns none for dbt-spark's strategies, else the strategy's macros.
--#}
{% macro spark_session_incremental_strategy(name, file_format) %}
    {%- set builtin = ['append', 'merge', 'insert_overwrite', 'microbatch'] -%}
    {%- set package = context.get('dbt_merge') -%}
    {%- set sql_macro = 'get_incremental_' ~ name ~ '_sql' -%}
    {%- if name in builtin or package is none or package.get(sql_macro) is none -%}
        {%- do dbt_spark_validate_get_incremental_strategy(name, file_format) -%}
        {{- return(none) -}}
    {%- endif -%}
    {{- return({
        'name': name,
        'sql': context.get(sql_macro) or package.get(sql_macro),
        'prepare': package.get('prepare_incremental_' ~ name),
        'first_run_sql': package.get('get_first_run_' ~ name ~ '_sql'),
        'finish': package.get('finish_incremental_' ~ name),
    }) -}}
{% endmacro %}
