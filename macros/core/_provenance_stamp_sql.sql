{#-- The columns that stamp every provenance event of every family with its run: the
     dbt invocation_id and the time it was recorded (SPEC §5). --#}
{% macro _provenance_stamp_sql() %}
        {{ dbt_merge._sql_string(invocation_id) }} as invocation_id,
        current_timestamp() as recorded_at
{%- endmacro %}
