{#--
    An incremental entity merge emits only what changed since the stored table (this):
    new or changed entities, and ids emitted live before and not valid now as deleted
    rows ($replaced when their members live on in another entity). _updated continues
    from the stored maximum.
--#}

{#-- The CTEs previous, changed, gone, the retired ones, emitted and numbered, over
     the CTE current_entities (_entity_records_ctes); columns are the strategy's typed
     columns. --#}
{% macro _entity_changes_ctes(columns, output_columns, previous_columns) %}
-- incremental: compare with what is stored and emit only the differences
previous as (
    select * from {{ this }}
),

changed as (
    select current_entities.*
    from current_entities
    left join previous
        on previous.`_id` = current_entities.`_id`
    where previous.`_id` is null
        or not (
            previous.entity <=> current_entities.entity
            and previous.`$ids` <=> current_entities.`$ids`
            and previous.`$deleted` <=> current_entities.`$deleted`
            and previous.`$replaced` <=> false
        )
),

-- ids emitted live before and not valid now
gone as (
    select previous.*
    from previous
    left anti join current_entities
        on current_entities.`_id` = previous.`_id`
    where not previous.`$deleted`
),

{{ dbt_merge._entity_retired_ctes(columns, previous_columns) }},

emitted as (
    select * from changed
    union all
    select * from retired
),

numbered as (
    select
        `_id`,
        (select coalesce(max(`_updated`), -1) from previous)
            + row_number() over (order by `_id`) as `_updated`,
        {{ output_columns | join(', ') }}
    from emitted
)
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
        {%- if column.name | lower in previous_columns %}
        gone.{{ adapter.quote(column.name) }}
        {%- else %}
        cast(null as {{ column.type }}) as {{ adapter.quote(column.name) }}
        {%- endif %}
        {%- endfor %}
    from gone
    left join gone_replaced
        on gone_replaced.`_id` = gone.`_id`
)
{%- endmacro %}
