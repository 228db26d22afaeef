{#--
    An incremental entity merge emits only what changed since the stored table (this):
    new or changed entities, and ids emitted live before and not valid now as deleted
    rows ($replaced when their members live on in another entity). _updated continues
    from the stored maximum.
--#}

{#-- The CTEs that emit what changed, ending in numbered, over the CTE
     current_entities (_entity_records_ctes); columns are the strategy's typed columns.
     With scope (a change-following run), current_entities holds only the entities of
     changed components, and previous only the stored rows that they or the components
     they came from (_entity_old_ids_ctes) can change: previous, changed, gone, the
     retired ones, emitted. Without, every entity is compared in one pass
     (_entity_compared_ctes). --#}
{% macro _entity_changes_ctes(spec, components, columns, output_columns, previous_columns, scope=none) %}
-- incremental: compare with what is stored and emit only the differences
{%- if not scope %}
{{ dbt_merge._entity_compared_ctes(spec, columns, previous_columns) }},
{%- else %}
{{ dbt_merge._entity_old_ids_ctes(spec, scope) }},

-- few rows, shuffled by id before changed and gone join them by id (replayed on the
-- 3M benchmark's tables at 1% changed: 2.6-3.3 s against 3.7-5.1 s without). The ids
-- are broadcast to the scan while the affected nodes are few (not scope.wide): an `in`
-- subquery became a sort-merge join that shuffled the whole stored table (on the 10M
-- benchmark's 1.1M entities, 300 and 30,000 ids: 7.8-8.2 s against 3.4-4.5 s)
previous as (
    select {{ '/*+ BROADCAST(wanted) */' if not scope.wide }} stored.*
    from {{ this }} as stored
    left semi join (
        select `_id` from old_ids
        union all
        select `_id` from current_entities
    ) as wanted
        on wanted.`_id` = stored.`_id`
    distribute by `_id`
),

changed as (
    select current_entities.*
    from current_entities
    {%- if spec.identity == 'first' %}
    cross join id_check
    {%- endif %}
    left join previous
        on previous.`_id` = current_entities.`_id`
    where previous.`_id` is null
        or not {{ dbt_merge._entity_same_as_stored_sql() }}
),

-- ids emitted live before and not valid now
gone as (
    select previous.*
    from previous
    left anti join current_entities
        on current_entities.`_id` = previous.`_id`
    where not previous.`$deleted`
        and previous.`_id` in (select `_id` from old_ids)
),

{{ dbt_merge._entity_retired_ctes(columns, previous_columns) }},

emitted as (
    select * from changed
    union all
    select * from retired
),
{%- endif %}

numbered as (
    select
        `_id`,
        (select coalesce(max(`_updated`), -1) from {{ this }})
            + row_number() over (order by `_id`) as `_updated`,
        {{ output_columns | join(', ') }}
    from emitted
)
{%- endmacro %}


{#-- The CTEs of a run that compares every entity with the stored table (this), ending
     in emitted: each current entity and each stored row side by side in one join by
     id, so current_entities is computed once (three joins with it computed it three
     times: 26 s against 23 s on the 3M benchmark's tables, nothing emitted; at 20% of
     the records changed, its MERGE took 33 to 35 s against 43 s). Emitted: an entity
     that is new or differs from its stored row, and a stored live row without a
     current entity, retired as deleted, $replaced when one of its ids is still a
     record's (present_ids: the current entities' $ids are the ids of the datasets'
     records, so this is the same as some current entity holding it). A typed column
     the stored table does not have yet is null in a retired row. --#}
{% macro _entity_compared_ctes(spec, columns, previous_columns) %}
-- every id a record of a dataset has now
present_ids as (
    {%- for dataset in spec.datasets %}
    select explode({{ dbt_merge._entity_ids_sql(dataset) }}) as member_id
    from {{ dataset.relation }} as {{ dataset.alias }}
    {%- if not loop.last %}
    union all
    {%- endif %}
    {%- endfor %}
),

-- each stored live entity: whether one of its ids is still a record's
previous_lives as (
    select stored.`_id`, max(present.member_id is not null) as lives
    from (
        select `_id`, explode(`$ids`) as member_id
        from {{ this }}
        where not `$deleted`
    ) as stored
    left join (select distinct member_id from present_ids) as present
        on present.member_id = stored.member_id
    group by stored.`_id`
),

previous as (
    select stored.*, previous_lives.lives as `$lives`
    from {{ this }} as stored
    left join previous_lives
        on previous_lives.`_id` = stored.`_id`
),

paired as (
    select
        coalesce(current_entities.`_id`, previous.`_id`) as `_id`,
        case
            when current_entities.`_id` is not null
                then previous.`_id` is null or not {{ dbt_merge._entity_same_as_stored_sql() }}
            else not previous.`$deleted`
        end as is_emitted,
        if(current_entities.`_id` is not null, current_entities.`$ids`, previous.`$ids`) as `$ids`,
        if(current_entities.`_id` is not null, current_entities.`$deleted`, true) as `$deleted`,
        if(current_entities.`_id` is not null, false, coalesce(previous.`$lives`, false)) as `$replaced`,
        if(current_entities.`_id` is not null, current_entities.entity, previous.entity) as entity
        {%- for column in columns %},
        {%- set name = adapter.quote(column.name) %}
        if(current_entities.`_id` is not null, current_entities.{{ name }}, {{ dbt_merge._entity_stored_column_sql('previous', column, previous_columns) }}) as {{ name }}
        {%- endfor %}
    from current_entities
    full outer join previous
        on previous.`_id` = current_entities.`_id`
),

emitted as (
    select `_id`, `$ids`, `$deleted`, `$replaced`, entity
        {%- for column in columns %}, {{ adapter.quote(column.name) }}{% endfor %}
    from paired
    where is_emitted
)
{%- endmacro %}


{#-- The CTE old_ids: the ids this table holds for the components that changed, as
     merge_entities staged them (_entity_old_ids_sql; the CTEs below read them several
     times, and each read would travel to the old components again). With identity
     first, current_entities may not take an id that a component which did not change
     holds: the query fails naming it. --#}
{% macro _entity_old_ids_ctes(spec, scope) %}
old_ids as (
    select `_id` from {{ scope.old_ids }}
)
{%- if spec.identity == 'first' %},

-- identity first: an id a component that did not change holds is not free
taken_ids as (
    select stored.`_id`
    from {{ this }} as stored
    join current_entities
        on current_entities.`_id` = stored.`_id`
    where not stored.`$deleted`
        and stored.`_id` not in (select `_id` from old_ids)
),

id_check as (
    select assert_true(
        count(*) = 0,
        concat(
            {{ dbt_merge._sql_string("dbt_merge: entity merge '" ~ spec.name ~ "', setting 'identity': first gives the id ") }},
            min(`_id`),
            ' to an entity that changed and to one that did not. Put the id columns in an equality rule so that they merge, or use identity: composite'
        )
    ) as ok
    from taken_ids
)
{%- endif %}
{%- endmacro %}


{#-- The select of the ids this table holds for the components that changed (one row
     per id), computed from the components as they were when it last changed: after one
     components run (scope.one_run), from the affected nodes themselves (each with the
     component it had, _entity_affected_sql); otherwise by time travel to scope.version
     to the components of the nodes in scope.affected. --#}
{% macro _entity_old_ids_sql(spec, components, scope) %}
{%- if scope.one_run %}
select {{ dbt_merge._entity_identity_sql(spec, 'members') }} as `_id`
from (
    select array_sort(
        collect_list(struct(
            {{ dbt_merge._entity_node_offset_sql('node') }} as member_offset,
            {{ dbt_merge._entity_node_id_sql('node') }} as member_id
        )),
        {{ dbt_merge._entity_member_order() }}
    ) as members
    from {{ scope.affected }}
    where previous_component is not null
    group by previous_component
)
{%- else %}
with

-- the components the affected nodes were in (few: broadcast to the scan below)
old_components as (
    select distinct component
    from {{ components }} version as of {{ scope.version }}
    where node in (select node from {{ scope.affected }})
        and component is not null
),

old_members as (
    select /*+ BROADCAST(old_components) */
        stored.component,
        {{ dbt_merge._entity_node_offset_sql('stored.node') }} as member_offset,
        {{ dbt_merge._entity_node_id_sql('stored.node') }} as member_id
    from {{ components }} version as of {{ scope.version }} as stored
    left semi join old_components
        on old_components.component = stored.component
    where {{ dbt_merge._is_entity_node_sql('stored.node') }}
)

select {{ dbt_merge._entity_identity_sql(spec, 'members') }} as `_id`
from (
    select array_sort(
        collect_list(struct(member_offset, member_id)),
        {{ dbt_merge._entity_member_order() }}
    ) as members
    from old_members
    group by component
)
{%- endif %}
{%- endmacro %}


{#-- The CTEs current_members, gone_members, gone_replaced and retired: every gone id
     as a deleted row, replaced when some member lives on in a current entity; a typed
     column the stored table does not have yet is null. --#}
{% macro _entity_retired_ctes(columns, previous_columns) %}
current_members as (
    select distinct explode(`$ids`) as member_id
    from current_entities
),

gone_members as (
    select `_id`, explode(`$ids`) as member_id
    from gone
),

-- replaced: some member lives on in another entity; otherwise the entity is just deleted
gone_replaced as (
    select gone_members.`_id`, max(current_members.member_id is not null) as is_replaced
    from gone_members
    left join current_members
        on current_members.member_id = gone_members.member_id
    group by gone_members.`_id`
),

retired as (
    select
        gone.`_id`,
        gone.`$ids`,
        true as `$deleted`,
        coalesce(gone_replaced.is_replaced, false) as `$replaced`,
        gone.entity
        {%- for column in columns %},
        {{ dbt_merge._entity_stored_column_sql('gone', column, previous_columns) }} as {{ adapter.quote(column.name) }}
        {%- endfor %}
    from gone
    left join gone_replaced
        on gone_replaced.`_id` = gone.`_id`
)
{%- endmacro %}


{#-- The condition that the stored row `previous` holds the entity in `current_entities`
     as this run would emit it: the same entity, $ids and $deleted, and not retired as
     replaced. An entity is emitted when it is new or this is false. --#}
{% macro _entity_same_as_stored_sql() %}
    {{- return(
        '(previous.entity <=> current_entities.entity'
        ~ ' and previous.`$ids` <=> current_entities.`$ids`'
        ~ ' and previous.`$deleted` <=> current_entities.`$deleted`'
        ~ ' and previous.`$replaced` <=> false)'
    ) -}}
{% endmacro %}


{#-- The typed column (a strategy column {name, type}) of the stored row alias: the
     stored value, or null when the stored table does not have the column yet
     (previous_columns: its lower-cased column names). --#}
{% macro _entity_stored_column_sql(alias, column, previous_columns) %}
    {%- if column.name | lower in previous_columns -%}
        {{- return(alias ~ '.' ~ adapter.quote(column.name)) -}}
    {%- endif -%}
    {{- return('cast(null as ' ~ column.type ~ ')') -}}
{% endmacro %}
