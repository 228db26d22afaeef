{#--
    Golden records of one entity merge: every input entity is assigned to its component
    (the closure of the equality edges; a deleted entity stays alone), the members of a
    component are ordered by dataset offset then id, and identity and strategy turn them
    into one row: _id, $ids, $deleted, _updated, $replaced, entity (JSON) and one
    array<T> column per property.

    The deleted flag is `$deleted`, not Sesam's `_deleted`: Iceberg reserves `_deleted`
    for its own metadata column and refuses to read a table that has a data column of
    that name (apache/iceberg#3456). One name on every file format keeps a project
    portable between Iceberg and Delta.

    In an incremental model (incremental_strategy='merge', unique_key='_id') a run emits
    only what changed since the stored table: new or changed entities, and ids that are
    no longer valid as deleted rows (with $replaced = true when their members now belong
    to another entity). _updated continues from the stored maximum.

    The datasets' ids are checked once per merge, by equality_edges: the components
    come from its edges, so in a run that builds the merge it has run before this node.
--#}
{% macro merge_entities(merge_name, components) %}
    {{ return(adapter.dispatch('merge_entities', 'dbt_merge')(merge_name, components)) }}
{% endmacro %}


{% macro default__merge_entities(merge_name, components) %}
    {% set spec = dbt_merge._entity_merge_spec(merge_name) %}
    {% if not execute %}
        {{ return('select cast(null as string) as `_id`') }}
    {% endif %}
    {% if components is string or components.identifier is not defined %}
        {% do exceptions.raise_compiler_error("Macro merge_entities expected a Relation (ref('<components model>')) as components but received the value: " ~ components) %}
    {% endif %}
    {#-- the edges and components committed, the merged records not yet --#}
    {% do dbt_merge._failpoint('entity_merge.before_merged') %}
    {% set incremental = is_incremental() %}
    {% set scope = dbt_merge._entity_change_scope(spec, components) if incremental else none %}
    {#-- what a run emits when no component changed since the last one --#}
    {% set nothing = 'select * from ' ~ this ~ ' where false' %}
    {% if scope and scope.unchanged %}
        {#-- the components have not committed since the merged table did --#}
        {{ return(nothing) }}
    {% endif %}
    {% if scope %}
        {#-- a change-following run: what the components runs since wrote (entity
             nodes, the runs that wrote them, and every node) --#}
        {% set entity = dbt_merge._is_entity_node_sql('node') %}
        {% set found = run_query(
            'select count_if(' ~ entity ~ '), '
            ~ ('count(distinct if(' ~ entity ~ ', `_batch`, null))' if scope.previous else '0')
            ~ ', count(*) from ' ~ components ~ ' where `_batch` > ' ~ scope.since
        ).rows[0] %}
        {% if found[0] == 0 %}
            {#-- they committed, but no entity's component changed --#}
            {{ return(nothing) }}
        {% endif %}
        {#-- a large share changed: comparing every entity costs less. Not with change
             columns: their state does not see a hard delete, which a comparison of
             every entity would (the result would depend on the share) --#}
        {% set columns_follow = spec.datasets | selectattr('change_sql') | list | length > 0 %}
        {% if not columns_follow and found[2] > dbt_merge._entity_compare_all_share() * dbt_merge._entity_live_rows(components, scope.format) %}
            {% do log('dbt_merge: ' ~ model.name ~ ': ' ~ found[2] ~ ' nodes written since the last run, over '
                ~ dbt_merge._entity_compare_all_share() ~ ' of the components: every entity is compared', info=false) %}
            {% set scope = none %}
        {% endif %}
    {% endif %}
    {% if scope %}
        {#-- one components run since: its rows give the component each node had --#}
        {% do scope.update({'one_run': found[1] == 1}) %}
        {% if not scope.one_run %}
            {% do log('dbt_merge: ' ~ model.name ~ ': reads the ids the changed components held from ' ~ components
                ~ ' as of ' ~ scope.version ~ (' (' ~ found[1] ~ ' components runs since its last run)' if scope.previous else ''),
                info=false) %}
        {% endif %}
        {#-- the nodes of the changed components, staged once (_entity_stage): the
             check below, the entities and the rows to emit read them --#}
        {% do scope.update({'affected': dbt_merge._entity_stage(
            'affected', dbt_merge._entity_affected_sql(components, scope)
        )}) %}
        {#-- many: the members are found by one join with them (_entity_members_ctes) --#}
        {% set affected_rows = run_query('select count(*) from ' ~ scope.affected).rows[0][0] %}
        {% do scope.update({'wide': affected_rows > dbt_merge._entity_affected_join_rows()}) %}
    {% endif %}
    {#-- the ids were checked by equality_edges, the node these components come from;
         a change-following run checks only the components that changed --#}
    {% do dbt_merge._check_max_merged(spec, scope.affected if scope else components) %}
    {% set previous_columns = [] %}
    {% if incremental %}
        {% for column in adapter.get_columns_in_relation(this) %}{% do previous_columns.append(column.name | lower) %}{% endfor %}
    {% endif %}
    {% if not scope %}
        {{ return(dbt_merge._merge_entities_sql(spec, components, incremental, previous_columns)) }}
    {% endif %}
    {#-- then the entities of the changed components, the ids they held and the rows
         to emit, each computed once into a table (_entity_stage; the rows to emit read
         the ids several times, and the MERGE reads its source more than once) --#}
    {% do scope.update({'staged': dbt_merge._entity_stage(
        'current', dbt_merge._entity_current_sql(spec, components, scope)
    )}) %}
    {% do scope.update({'old_ids': dbt_merge._entity_stage(
        'old_ids', dbt_merge._entity_old_ids_sql(spec, components, scope)
    )}) %}
    {% set emitted = dbt_merge._merge_entities_sql(spec, components, incremental, previous_columns, scope=scope) %}
    select * from {{ dbt_merge._entity_stage('emitted', emitted) }}
{% endmacro %}


{#-- The select of the entity nodes of the components that changed since the last run
     (scope): every node a components run since wrote (each node of the new edges, and
     each node whose component changed: a component's other nodes are not written
     again), and every node of a component that such a row has or had. Columns node,
     component, previous_component (the component before the runs since: as a row
     written by one run since says; a node not written since had the component it has)
     and `_batch`. With several runs since (or components without previous_component),
     the components a written node had come from the components as they were
     (scope.version, time travel). --#}
{% macro _entity_affected_sql(components, scope) %}
    {%- set since = scope.since %}
with

written as (
    select node, component, {{ 'previous_component' if scope.previous else 'cast(null as string)' }} as previous_component
    from {{ components }}
    where `_batch` > {{ since }}
),

changed_components as (
    select component from written where component is not null
    union
    {%- if scope.one_run %}
    select previous_component from written where previous_component is not null
    {%- else %}
    select component
    from {{ components }} version as of {{ scope.version }}
    where node in (select node from written)
        and component is not null
    {%- endif %}
)

select
    node,
    component,
    case when `_batch` > {{ since }} then {{ 'previous_component' if scope.previous else 'null' }} else component end as previous_component,
    `_batch`
from (
    select /*+ BROADCAST(changed_components) */ stored.*
    from {{ components }} as stored
    left semi join changed_components
        on changed_components.component = stored.component
    union all
    -- the nodes that left the graph since (a null component)
    select *
    from {{ components }}
    where `_batch` > {{ since }}
        and component is null
)
where {{ dbt_merge._is_entity_node_sql('node') }}
{%- endmacro %}


{#-- The select of the entities of the components that changed since the last run
     (scope), with their checks (identity first). --#}
{% macro _entity_current_sql(spec, components, scope) %}
    {%- set props = dbt_merge._entity_properties(spec) %}
    {%- set strategy = dbt_merge._entity_strategies()[spec.strategy]({'props': props, 'spec': spec}) %}
with
{{ dbt_merge._entity_members_ctes(spec, components, props, false, scope) }},
{{ dbt_merge._entity_records_ctes(spec, props, strategy) }}
select * from current_entities
{%- endmacro %}



{#-- The SELECT itself; `shuffle` reads every dataset in random partitions (used by the
     identity_is_deterministic test). One chain of CTEs: the members of every component
     (_entity_members_ctes), one row per entity with its identity and the strategy's
     entity and columns (_entity_records_ctes, the strategy from the registry in
     strategies/_entity_strategies.sql), then numbered: every entity, or in an
     incremental model only what changed (_entity_changes_ctes). --#}
{% macro _merge_entities_sql(spec, components, incremental=false, previous_columns=[], shuffle=false, scope=none) %}
    {%- set props = dbt_merge._entity_properties(spec) %}
    {%- set strategy = dbt_merge._entity_strategies()[spec.strategy]({'props': props, 'spec': spec}) %}
    {%- set output_columns = ['`$ids`', '`$deleted`', '`$replaced`', 'entity'] %}
    {%- for column in strategy.columns %}{% do output_columns.append(adapter.quote(column.name)) %}{% endfor %}

with
{%- if scope and scope.staged %}

-- a change-following run: the entities of the components that changed, computed once
-- (_entity_current_sql, staged by _entity_stage)
{{ dbt_merge._entity_affected_cte(scope) }},

current_entities as (
    select * from {{ scope.staged }}
),
{%- else %}

{{ dbt_merge._entity_members_ctes(spec, components, props, shuffle, scope) }},

{{ dbt_merge._entity_records_ctes(spec, props, strategy) }},
{%- endif %}
{%- if incremental %}

{{ dbt_merge._entity_changes_ctes(spec, components, strategy.columns, output_columns, previous_columns, scope) }}
{%- else %}

numbered as (
    select
        `_id`,
        row_number() over (order by `_id`) - 1 as `_updated`,
        {{ output_columns | join(', ') }}
    from current_entities
)
{%- endif %}

select
    `_id`,
    `$ids`,
    `$deleted`,
    cast(`_updated` as bigint) as `_updated`,
    {{ output_columns[2:] | join(',\n    ') }}
from numbered
{% endmacro %}


{#-- max_merged: a component larger than the limit fails the model before anything is
     written. components: the components model, or in a change-following run the nodes
     of the components that changed. The sizes are counted first, and a few members
     are collected only for the largest component over the limit: collecting every
     component's members took 6.5 to 7.3 s on the 3M benchmark's 4.6M-node table,
     counting them 3.0 to 3.3 s. --#}
{% macro _check_max_merged(spec, components) %}
    {% set members -%}
        from {{ components }}
        where {{ dbt_merge._is_entity_node_sql('node') }}
            and component is not null
    {%- endset %}
    {% set found = run_query(
        'select component, count(*) as member_count ' ~ members
        ~ ' group by component having count(*) > ' ~ spec.max_merged
        ~ ' order by member_count desc, component limit 1'
    ) %}
    {% if found.rows | length > 0 %}
        {% set row = found.rows[0] %}
        {% set sample = run_query(
            "select array_join(slice(sort_array(collect_list(node)), 1, 5), ', ') " ~ members
            ~ ' and component = ' ~ dbt_merge._sql_string(row[0])
        ).rows[0][0] %}
        {% do dbt_merge._entity_merge_error(spec.name, 'max_merged', 'a component has ' ~ row[1] ~ ' members, more than max_merged = ' ~ spec.max_merged ~ '. Some of its members (<offset>|<id>): ' ~ sample ~ '. Check the equality rules for a value shared by too many entities, or raise max_merged') %}
    {% endif %}
{% endmacro %}


{#-- The most nodes of changed components (scope.affected) for which a change-following
     run filters each dataset by them (a semi join each, the nodes broadcast while they
     are few); above it, the members are every record joined once with the nodes, as a
     full build joins them with the components. On the 3M benchmark's tables, the
     entities of 533,000 nodes took 6.8 s filtered and 7.8 s joined, those of 2.1M nodes
     17.5 s and 12.4 s. The merged model's config affected_join_rows, else the var
     dbt_merge_affected_join_rows, else 1,000,000. --#}
{% macro _entity_affected_join_rows() %}
    {{- return(config.get('affected_join_rows', var('dbt_merge_affected_join_rows', 1000000)) | int) -}}
{% endmacro %}


{#-- The largest share of the components' nodes (the rows of their table) that the
     components runs since a change-following run of the merged model may have written;
     above it, the run compares every entity, as a run without the components' history
     does. On the 3M benchmark's tables, both took the same time with 17.6% of the
     nodes written (a delivery that changed 5% of the records), and with 52% comparing
     every entity took 81 s against 105 s (one loaded run, the full build 80 s). The
     merged model's config compare_all_share, else the var dbt_merge_compare_all_share,
     else 0.2. --#}
{% macro _entity_compare_all_share() %}
    {{- return(config.get('compare_all_share', var('dbt_merge_compare_all_share', 0.2)) | float) -}}
{% endmacro %}


{#-- The live rows of the table relation: of an Iceberg table from its current
     snapshot's summary (metadata, no scan): its records less its position and equality
     deletes; 0 for a table without a snapshot. Of a Delta table its count, which Delta
     answers from the statistics of its log where it keeps them. --#}
{% macro _entity_live_rows(relation, file_format) %}
    {% if file_format == 'delta' %}
        {{ return(run_query('select count(*) from ' ~ relation).rows[0][0]) }}
    {% endif %}
    {% set current = dbt_merge._iceberg_current_snapshot(relation) %}
    {{ return(0 if current is none else current.records - current.position_deletes - current.equality_deletes) }}
{% endmacro %}
