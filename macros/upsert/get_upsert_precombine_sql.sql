{#--
    One row per key of an incoming batch, in one pass (a window or an aggregation by key,
    no self-join), so duplicate keys never reach MERGE INTO.

    The winner is the row with the greatest precombine_key (compared as a tuple when it
    is a list), then the greatest arrival_column; rows still tied are ordered by their
    whole content as JSON text, so the same batch always gives the same winner whatever
    its order or partitioning. With partial_update, every column instead takes its value
    from the highest-ordered row where it is not null (a winning delete stays a delete).

    A delete without an ordering value (every precombine_key null; a delete from Hudi's
    DELETE statement carries none) is ordered by arrival against the key's other rows,
    as Hudi orders such a "commit-time-ordering delete" (BufferedRecordMergerFactory:
    when either of two versions is one, the newer wins): the rows that arrived after the
    key's last such delete (a greater arrival_column) outrank it and are ordered among
    themselves as usual; the delete outranks every other row of the key. Without
    arrival_column nothing is known to come after it, so the delete wins. With
    partial_update, only rows after the delete give values (Hudi does not merge fields
    across a delete).
--#}
{% macro get_upsert_precombine_sql(source_sql, cfg, columns, unordered_deletes=true) %}
    {{ return(adapter.dispatch('get_upsert_precombine_sql', 'dbt_merge')(source_sql, cfg, columns, unordered_deletes)) }}
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


{#-- The batch with dbt_merge_phase, the rank of a row against the key's deletes
     without an ordering value: 2 for a row after the last of them (every row of a key
     without one), 1 for such a delete, 0 for a row before it. --#}
{% macro _upsert_phased_sql(source_sql, cfg, keys) %}
    {%- set unordered = dbt_merge._upsert_unordered_delete_sql(cfg, 'batch') %}
    {%- set by_key = 'over (partition by ' ~ (keys | join(', ')) ~ ')' %}
select
    batch.*,
    case
        when {{ unordered }} then 1
        when max(case when {{ unordered }} then 1 end) {{ by_key }} is null then 2
        {%- if cfg.arrival_column %}
        {%- set arrival = 'batch.' ~ adapter.quote(cfg.arrival_column) %}
        when {{ arrival }} > max(case when {{ unordered }} then {{ arrival }} end) {{ by_key }} then 2
        {%- endif %}
        else 0
    end as dbt_merge_phase
from ({{ source_sql }}) as batch
{%- endmacro %}


{#-- unordered_deletes false: the batch is known to hold no delete without an ordering
     value (_check_upsert_batch counted them), so every row's phase would be 2 and the
     window that ranks rows against such deletes is left out. --#}
{% macro default__get_upsert_precombine_sql(source_sql, cfg, columns, unordered_deletes=true) %}
    {%- set keys = [] %}
    {%- for key in cfg.unique_key %}{% do keys.append(adapter.quote(key)) %}{% endfor %}
    {%- set phased = cfg.delete_column and cfg.precombine_key and unordered_deletes %}
    {%- if phased %}
        {%- set source_sql = dbt_merge._upsert_phased_sql(source_sql, cfg, keys) %}
        {%- set order = "named_struct('phase', batch.dbt_merge_phase, 'version', " ~ dbt_merge._upsert_order_sql(cfg, 'batch', columns) ~ ")" %}
    {%- else %}
        {%- set order = dbt_merge._upsert_order_sql(cfg, 'batch', columns) %}
    {%- endif %}
    {%- set gives_values = ' and batch.dbt_merge_phase = 2' if phased else '' %}
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
    max_by(batch.{{ quoted }}, case when batch.{{ quoted }} is not null{{ gives_values }} then {{ order }} end) as {{ quoted }}{{ ',' if not loop.last }}
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
