{#--
    MERGE INTO for the upsert strategy: the precombined batch (one row per key) against
    the stored rows, with the ordering rules of SPEC §2.

      commit_time_ordering  the incoming version always wins;
      event_time_ordering   it wins only when its ordering is >= the stored one (ties go
                            to the incoming version), so an older late row or an older
                            delete never overwrites a newer stored row;
      custom                every column is what the custom_merger macro renders.
    partial_update: the version with the higher ordering is the base (ties: incoming)
    and each of its null columns takes the other version's value.
    overwrite_non_defaults: non-null incoming columns overwrite, nulls keep the stored
    value. A winning row whose delete_column is true deletes the key; under
    event_time_ordering only if its ordering is >= the stored one, except a delete
    without an ordering value (every precombine_key null), which deletes the key
    whatever the stored ordering value, as a delete from Hudi's DELETE statement does.

    Aliases DBT_INTERNAL_DEST / DBT_INTERNAL_SOURCE as in dbt-spark, so
    incremental_predicates keep working; merge_update_columns / merge_exclude_columns
    restrict the updated columns (inserts are whole rows).
--#}
{% macro get_upsert_merge_sql(target, source_sql, cfg, columns, incremental_predicates=none) %}
    {{ return(adapter.dispatch('get_upsert_merge_sql', 'dbt_merge')(target, source_sql, cfg, columns, incremental_predicates)) }}
{% endmacro %}


{% macro default__get_upsert_merge_sql(target, source_sql, cfg, columns, incremental_predicates) %}
    {%- set src = 'DBT_INTERNAL_SOURCE' %}
    {%- set dest = 'DBT_INTERNAL_DEST' %}
    {%- set predicates = [] if incremental_predicates is none else [] + incremental_predicates %}
    {%- for key in cfg.unique_key %}
        {%- do predicates.append(src ~ '.' ~ adapter.quote(key) ~ ' = ' ~ dest ~ '.' ~ adapter.quote(key)) %}
    {%- endfor %}
    {%- set keys = cfg.unique_key | map('lower') | list %}
    {%- set update_columns = dbt_merge._upsert_update_columns(columns, keys) %}

    {#-- does the incoming version win against the stored one? --#}
    {%- if cfg.merge_mode == 'event_time_ordering' %}
        {%- set ordering_only = {'precombine_key': cfg.precombine_key, 'arrival_column': none} %}
        {%- set incoming_wins = dbt_merge._upsert_order_sql(ordering_only, src) ~ ' >= ' ~ dbt_merge._upsert_order_sql(ordering_only, dest) %}
    {%- else %}
        {%- set incoming_wins = 'true' %}
    {%- endif %}
    {%- set is_delete = ('coalesce(' ~ src ~ '.' ~ adapter.quote(cfg.delete_column) ~ ', false)') if cfg.delete_column else 'false' %}

merge into {{ target }} as {{ dest }}
using ({{ source_sql }}) as {{ src }}
on {{ predicates | join(' and ') }}
{%- if cfg.delete_column %}
when matched and {{ is_delete }} and ({{ dbt_merge._upsert_unordered_delete_sql(cfg, src) }} or {{ incoming_wins }}) then delete
{%- endif %}
{%- if cfg.partial_update %}
when matched and not {{ is_delete }} then update set
    {%- for column in update_columns %}
    {%- set quoted = adapter.quote(column) %}
    {{ quoted }} = case when {{ incoming_wins }}
        then coalesce({{ src }}.{{ quoted }}, {{ dest }}.{{ quoted }})
        else coalesce({{ dest }}.{{ quoted }}, {{ src }}.{{ quoted }}) end{{ ',' if not loop.last }}
    {%- endfor %}
{%- elif cfg.overwrite_non_defaults %}
when matched and not {{ is_delete }} and ({{ incoming_wins }}) then update set
    {%- for column in update_columns %}
    {%- set quoted = adapter.quote(column) %}
    {{ quoted }} = coalesce({{ src }}.{{ quoted }}, {{ dest }}.{{ quoted }}){{ ',' if not loop.last }}
    {%- endfor %}
{%- elif cfg.merge_mode == 'custom' %}
{%- set merger = context[cfg.custom_merger] %}
when matched and not {{ is_delete }} then update set
    {%- for column in update_columns %}
    {{ adapter.quote(column) }} = {{ merger(column, src, dest) }}{{ ',' if not loop.last }}
    {%- endfor %}
{%- else %}
when matched and not {{ is_delete }} and ({{ incoming_wins }}) then update set
    {%- for column in update_columns %}
    {{ adapter.quote(column) }} = {{ src }}.{{ adapter.quote(column) }}{{ ',' if not loop.last }}
    {%- endfor %}
{%- endif %}
when not matched and not {{ is_delete }} then insert *
{% endmacro %}


{#-- The columns an update sets: all but the keys, or merge_update_columns, or all but
     merge_exclude_columns (as dbt-spark's merge strategy). --#}
{% macro _upsert_update_columns(columns, keys) %}
    {%- set merge_update_columns = config.get('merge_update_columns') %}
    {%- set merge_exclude_columns = config.get('merge_exclude_columns') %}
    {%- if merge_update_columns and merge_exclude_columns %}
        {% do dbt_merge._upsert_error('merge_update_columns', 'Model cannot specify merge_update_columns and merge_exclude_columns. Please update model to use only one config') %}
    {%- endif %}
    {%- set chosen = [] %}
    {%- if merge_update_columns %}
        {%- set wanted = merge_update_columns | map('lower') | list %}
        {%- for column in columns if column | lower in wanted %}{% do chosen.append(column) %}{% endfor %}
    {%- else %}
        {%- set excluded = (merge_exclude_columns or []) | map('lower') | list %}
        {%- for column in columns if column | lower not in keys and column | lower not in excluded %}{% do chosen.append(column) %}{% endfor %}
    {%- endif %}
    {{ return(chosen) }}
{% endmacro %}
