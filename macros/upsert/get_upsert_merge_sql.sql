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
{% macro get_upsert_merge_sql(target, source_sql, cfg, columns, incremental_predicates=none, map_columns=[]) %}
    {{ return(adapter.dispatch('get_upsert_merge_sql', 'dbt_merge')(target, source_sql, cfg, columns, incremental_predicates, map_columns)) }}
{% endmacro %}


{% macro default__get_upsert_merge_sql(target, source_sql, cfg, columns, incremental_predicates, map_columns=[]) %}
    {%- set rules = dbt_merge._upsert_merge_rules(cfg, columns, incremental_predicates, map_columns) %}

merge into {{ target }} as DBT_INTERNAL_DEST
using ({{ source_sql }}) as DBT_INTERNAL_SOURCE
on {{ rules.on }}
{%- if rules.deletes_when %}
when matched and {{ rules.deletes_when }} then delete
{%- endif %}
when matched and {{ rules.updates_when }} and not ({{ rules.unchanged }}) then update set
    {%- for column, value in rules.set %}
    {{ adapter.quote(column) }} = {{ value }}{{ ',' if not loop.last }}
    {%- endfor %}
when not matched and not {{ rules.is_delete }} then insert *
{% endmacro %}


{#-- The batch rows that change the stored table: of the MERGE's source, the rows that
     insert (no stored row, not a delete), delete a stored row, or update one to values
     that differ from what it stores. A row whose update leaves every column as it was
     (the same row delivered again, an older late row), an older delete and a delete of
     a key that is not stored change nothing: without them a re-run of a delivery finds
     no row, and the MERGE, which Iceberg would commit as a new snapshot even when it
     changes nothing, is not run (get_incremental_upsert_sql). --#}
{% macro _upsert_changes_sql(target, source_sql, cfg, columns, incremental_predicates=none, map_columns=[]) %}
    {%- set rules = dbt_merge._upsert_merge_rules(cfg, columns, incremental_predicates, map_columns) %}
select DBT_INTERNAL_SOURCE.*
from ({{ source_sql }}) as DBT_INTERNAL_SOURCE
left join {{ target }} as DBT_INTERNAL_DEST
    on {{ rules.on }}
where case
    when DBT_INTERNAL_DEST.{{ adapter.quote(cfg.unique_key[0]) }} is null then not {{ rules.is_delete }}
    when {{ rules.changes_when }} then true
    else false
end
{% endmacro %}


{#-- The MERGE's rules, for the MERGE itself and for the look for changes before it:
       on        the join of a batch row with its stored row (keys, incremental_predicates);
       is_delete the batch row is a delete;
       deletes_when  when a matched delete removes the stored row (none without delete_column);
       updates_when  when a matched row updates the stored one;
       set       [column, the value the update sets] for each updated column;
       unchanged the update leaves every column as stored (the MERGE skips such a row, so
                 a row delivered again rewrites nothing on merge-on-read; `map_columns`
                 are compared as JSON: Spark cannot compare maps);
       changes_when  a matched row deletes or changes the stored one. --#}
{% macro _upsert_merge_rules(cfg, columns, incremental_predicates, map_columns=[]) %}
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
    {%- set delete = none %}
    {%- if cfg.delete_column %}
        {%- set delete = is_delete ~ ' and (' ~ dbt_merge._upsert_unordered_delete_sql(cfg, src) ~ ' or ' ~ incoming_wins ~ ')' %}
    {%- endif %}

    {%- set assignments = [] %}
    {%- for column in update_columns %}
        {%- set quoted = adapter.quote(column) %}
        {%- if cfg.partial_update %}
            {%- set value = 'case when ' ~ incoming_wins ~ ' then coalesce(' ~ src ~ '.' ~ quoted ~ ', ' ~ dest ~ '.' ~ quoted ~ ') else coalesce(' ~ dest ~ '.' ~ quoted ~ ', ' ~ src ~ '.' ~ quoted ~ ') end' %}
        {%- elif cfg.overwrite_non_defaults %}
            {%- set value = 'coalesce(' ~ src ~ '.' ~ quoted ~ ', ' ~ dest ~ '.' ~ quoted ~ ')' %}
        {%- elif cfg.merge_mode == 'custom' %}
            {%- set value = context[cfg.custom_merger](column, src, dest) %}
        {%- else %}
            {%- set value = src ~ '.' ~ quoted %}
        {%- endif %}
        {%- do assignments.append([column, value]) %}
    {%- endfor %}
    {%- if cfg.partial_update or cfg.merge_mode == 'custom' %}
        {%- set update = 'not ' ~ is_delete %}
    {%- else %}
        {%- set update = 'not ' ~ is_delete ~ ' and (' ~ incoming_wins ~ ')' %}
    {%- endif %}
    {%- set maps = map_columns | map('lower') | list %}
    {%- set same = [] %}
    {%- for column, value in assignments %}
        {%- set stored = dest ~ '.' ~ adapter.quote(column) %}
        {%- if column | lower in maps %}
            {%- do same.append('to_json(struct(' ~ value ~ ')) <=> to_json(struct(' ~ stored ~ '))') %}
        {%- else %}
            {%- do same.append('(' ~ value ~ ') <=> ' ~ stored) %}
        {%- endif %}
    {%- endfor %}
    {%- set unchanged = same | join(' and ') if same else 'true' %}
    {%- set changes = '(' ~ update ~ ' and not (' ~ unchanged ~ '))' %}
    {%- if delete %}
        {%- set changes = '(' ~ delete ~ ') or ' ~ changes %}
    {%- endif %}
    {{ return({'on': predicates | join(' and '), 'is_delete': is_delete, 'deletes_when': delete, 'updates_when': update, 'set': assignments, 'unchanged': unchanged, 'changes_when': changes}) }}
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
