{#-- The select of an upsert model's first run (a new table, or --full-refresh) in the
     spark_session adapter's flow: the precombined batch without its deleted keys. --#}
{% macro get_first_run_upsert_sql(arg_dict) %}
    {{ return(dbt_merge._upsert_first_batch_sql(arg_dict['state'].precombined, arg_dict['state'].cfg)) }}
{% endmacro %}
