{#--
    One row per key of an incoming batch, in one pass (a window or an aggregation by key,
    no self-join), so duplicate keys never reach MERGE INTO.

    The winner is the row with the greatest precombine_key (compared as a tuple when it
    is a list), then the greatest arrival_column; rows still tied are ordered by their
    whole content as JSON text, so the same batch always gives the same winner whatever
    its order or partitioning. With partial_update, every column instead takes its value
    from the highest-ordered row where it is not null (a winning delete stays a delete).
--#}
{% macro get_upsert_precombine_sql(source_sql, cfg, columns) %}
    {{ return(adapter.dispatch('get_upsert_precombine_sql', 'dbt_merge')(source_sql, cfg, columns)) }}
{% endmacro %}


{#-- The version order of a row as a struct: precombine keys, arrival, content. --#}
{% macro _upsert_order_sql(cfg, alias='', columns=none) %}
    {%- set prefix = alias ~ '.' if alias else '' %}
    {%- set fields = [] %}
    {%- for key in cfg.precombine_key %}
        {%- do fields.append("'p" ~ loop.index0 ~ "', " ~ prefix ~ adapter.quote(key)) %}
    {%- endfor %}
    {%- if cfg.arrival_column %}
        {%- do fields.append("'arrival', " ~ prefix ~ adapter.quote(cfg.arrival_column)) %}
    {%- endif %}
    {%- if columns is not none %}
        {%- set quoted = [] %}
        {%- for column in columns %}{% do quoted.append(prefix ~ adapter.quote(column)) %}{% endfor %}
        {%- do fields.append("'content', to_json(struct(" ~ (quoted | join(', ')) ~ "))") %}
    {%- endif %}
    {{- 'named_struct(' ~ (fields | join(', ')) ~ ')' -}}
{% endmacro %}


{% macro default__get_upsert_precombine_sql(source_sql, cfg, columns) %}
    {%- set keys = [] %}
    {%- for key in cfg.unique_key %}{% do keys.append(adapter.quote(key)) %}{% endfor %}
    {%- set order = dbt_merge._upsert_order_sql(cfg, 'batch', columns) %}
    {%- if cfg.partial_update %}
    {%- set deleted = adapter.quote(cfg.delete_column) if cfg.delete_column else none %}
select
    {%- for column in columns %}
    {%- set quoted = adapter.quote(column) %}
    {%- if column | lower in (cfg.unique_key | map('lower') | list) %}
    {{ quoted }}{{ ',' if not loop.last }}
    {%- elif deleted and column | lower == cfg.delete_column | lower %}
    max_by(batch.{{ quoted }}, {{ order }}) as {{ quoted }}{{ ',' if not loop.last }}
    {%- else %}
    max_by(batch.{{ quoted }}, case when batch.{{ quoted }} is not null then {{ order }} end) as {{ quoted }}{{ ',' if not loop.last }}
    {%- endif %}
    {%- endfor %}
from ({{ source_sql }}) as batch
group by {{ keys | join(', ') }}
    {%- else %}
select {% for column in columns %}{{ adapter.quote(column) }}{{ ', ' if not loop.last }}{% endfor %}
from (
    select
        batch.*,
        row_number() over (partition by {{ keys | join(', ') }} order by {{ order }} desc) as dbt_merge_version
    from ({{ source_sql }}) as batch
) as versions
where dbt_merge_version = 1
    {%- endif %}
{% endmacro %}


{#-- A first run's rows (a new table, or --full-refresh): the precombined batch without
     its deleted keys. Used by the spark_session materialization and by precombined(). --#}
{% macro _upsert_first_batch_sql(precombined_sql, cfg) %}
select * from ({{ precombined_sql }}) as precombined
    {%- if cfg.delete_column %}
where not coalesce({{ adapter.quote(cfg.delete_column) }}, false)
    {%- endif %}
{% endmacro %}
