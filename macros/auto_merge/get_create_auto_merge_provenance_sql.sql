{#-- create table if not exists for the auto-merge events table (an Iceberg table,
     appended to by execute_auto_merge). Also usable as a model's pre_hook, so that a
     view over the events builds before the first merge has run. --#}
{% macro get_create_auto_merge_provenance_sql(events) %}
    {{ return(adapter.dispatch('get_create_auto_merge_provenance_sql', 'dbt_merge')(events)) }}
{% endmacro %}


{% macro default__get_create_auto_merge_provenance_sql(events) %}
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
    ) using iceberg
{% endmacro %}
