{#-- create table if not exists for the auto-merge events table (an Iceberg or Delta
     table, appended to by execute_auto_merge). Also usable as a model's pre_hook, so
     that a view over the events builds before the first merge has run; there the
     model's file_format names the table's format. --#}
{% macro get_create_auto_merge_provenance_sql(events, file_format=none) %}
    {{ return(adapter.dispatch('get_create_auto_merge_provenance_sql', 'dbt_merge')(events, file_format)) }}
{% endmacro %}


{% macro default__get_create_auto_merge_provenance_sql(events, file_format=none) %}
    {%- set file_format = file_format or ('delta' if adapter.type() == 'databricks' else 'iceberg') %}
    create table if not exists {{ events }} (
        event_type string,
        table_name string,
        plan_model string,
        merge_index int,
        min_key string,
        max_key string,
        parent_ids array<string>,
        child_ids array<string>,
        rewritten_bytes bigint,
        snapshot_id bigint,
        invocation_id string,
        recorded_at timestamp
    ) using {{ file_format }}
{% endmacro %}
