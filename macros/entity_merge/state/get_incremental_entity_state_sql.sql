{#--
    incremental_strategy='entity_state': how a change-following entity merge writes its
    state tables (the edges model and the components model). A batch holds the rows
    that change, each with a boolean column `$drop`: a row whose key is stored
    replaces it, a `$drop` row deletes it. Keys compare null-safe (a deleted record's
    row has a null dst). One MERGE, so one atomic commit.

    The key is the model's unique_key, or by default the key of the state table the
    batch is: (src, dst) for edges, node for components. An empty batch writes nothing
    (no MERGE, no commit): a run that finds no change costs no scan of the target.
--#}
{% macro get_incremental_entity_state_sql(arg_dict) %}
    {{ return(adapter.dispatch('get_incremental_entity_state_sql', 'dbt_merge')(arg_dict)) }}
{% endmacro %}


{% macro default__get_incremental_entity_state_sql(arg_dict) %}
    {%- set target = arg_dict['target_relation'] %}
    {%- set source = arg_dict['temp_relation'] %}
    {%- set columns = adapter.get_columns_in_relation(target) | map(attribute='name') | list %}
    {%- set keys = dbt_merge._entity_state_keys(target, arg_dict.get('unique_key'), columns) %}
    {%- if run_query('select 1 from ' ~ source ~ ' limit 1').rows | length == 0 %}
select 'dbt_merge: an empty batch, nothing to write' as entity_state
    {%- else %}
merge into {{ target }} as target
using {{ source }} as source
on {% for key in keys %}target.{{ adapter.quote(key) }} <=> source.{{ adapter.quote(key) }}{{ ' and ' if not loop.last }}{% endfor %}
when matched and source.`$drop` then delete
when matched then update set
    {%- for column in columns %}
    target.{{ adapter.quote(column) }} = source.{{ adapter.quote(column) }}{{ ',' if not loop.last }}
    {%- endfor %}
when not matched and not source.`$drop` then insert ({% for column in columns %}{{ adapter.quote(column) }}{{ ', ' if not loop.last }}{% endfor %})
    values ({% for column in columns %}source.{{ adapter.quote(column) }}{{ ', ' if not loop.last }}{% endfor %})
    {%- endif %}
{% endmacro %}


{#-- The key columns of a state table: unique_key when given, else (src, dst) for an
     edges table and node for a components table. --#}
{% macro _entity_state_keys(target, unique_key, columns) %}
    {%- set lowered = columns | map('lower') | list %}
    {%- if unique_key %}
        {{ return([unique_key] if unique_key is string else unique_key) }}
    {%- elif 'src' in lowered and 'dst' in lowered %}
        {{ return(['src', 'dst']) }}
    {%- elif 'node' in lowered %}
        {{ return(['node']) }}
    {%- endif %}
    {% do exceptions.raise_compiler_error("dbt_merge: model " ~ target ~ ", setting 'incremental_strategy': entity_state writes the state tables of an entity merge (columns src, dst or node) but the stored table has the columns " ~ (columns | join(', ')) ~ "; set unique_key or use another strategy") %}
{% endmacro %}
