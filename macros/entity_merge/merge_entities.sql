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
    {% do dbt_merge._check_entity_ids(spec) %}
    {% do dbt_merge._check_max_merged(spec, components) %}
    {% set incremental = is_incremental() %}
    {% set previous_columns = [] %}
    {% if incremental %}
        {% for column in adapter.get_columns_in_relation(this) %}{% do previous_columns.append(column.name | lower) %}{% endfor %}
    {% endif %}
    {{ dbt_merge._merge_entities_sql(spec, components, incremental, previous_columns) }}
{% endmacro %}


{#-- The SELECT itself; `shuffle` reads every dataset in random partitions (used by the
     identity_is_deterministic test). --#}
{% macro _merge_entities_sql(spec, components, incremental=false, previous_columns=[], shuffle=false) %}
    {% set props = [] %}
    {% for key in spec.properties | sort %}
        {% do props.append(spec.properties[key]) %}
        {% do props[-1].update({'key': key, 'index': loop.index0}) %}
    {% endfor %}
    {% set member_order = '(l, r) -> case when l.member_offset < r.member_offset then -1 when l.member_offset > r.member_offset then 1 when l.member_id < r.member_id then -1 when l.member_id > r.member_id then 1 else 0 end' %}
    {% set node = "concat(m.member_offset, '|', m.member_id)" %}

with

-- components of live entities (value nodes of the equality graph left out)
components as (
    select node, component
    from {{ components }}
    where {{ dbt_merge._is_entity_node_sql('node') }}
),

-- members: one row per input entity, each property as a typed array plus its JSON
members as (
    {% for dataset in spec.datasets %}
    {{ '(' if shuffle }}select
        {{ dataset.offset }} as member_offset,
        {{ dbt_merge._entity_id_sql(dataset) }} as member_id,
        {{ dbt_merge._entity_ids_sql(dataset) }} as member_ids,
        {{ dbt_merge._entity_is_deleted_sql(dataset) }} as member_deleted,
        {%- for prop in props %}
        {%- if prop.key in dataset.columns %}
        {%- set raw = dataset.alias ~ '.' ~ adapter.quote(dataset.column_names[prop.key]) %}
        {%- if dbt_merge._array_element_type(dataset.columns[prop.key]) %}
        cast({{ raw }} as array<{{ prop.type }}>) as v_{{ prop.index }},
        to_json({{ raw }}) as j_{{ prop.index }},
        {%- else %}
        case when {{ raw }} is not null then array(cast({{ raw }} as {{ prop.type }})) end as v_{{ prop.index }},
        case when {{ raw }} is not null then {{ dbt_merge._json_scalar_sql('array(' ~ raw ~ ')') }} end as j_{{ prop.index }},
        {%- endif %}
        {%- else %}
        cast(null as array<{{ prop.type }}>) as v_{{ prop.index }},
        cast(null as string) as j_{{ prop.index }},
        {%- endif %}
        {%- endfor %}
        {{ dbt_merge._member_json_sql(dataset, props) }} as member_json
    from {{ dataset.relation }} as {{ dataset.alias }}
    {%- if shuffle %}
    distribute by rand())
    {%- endif %}
    {% if not loop.last %}union all{% endif %}
    {% endfor %}
),

-- a deleted entity never merges: it is a component of its own
assigned as (
    select
        m.*,
        case
            when m.member_deleted or c.component is null then {{ node }}
            else c.component
        end as component
    from members as m
    left join components as c
        on c.node = {{ node }}
),

grouped as (
    select
        component,
        array_sort(
            collect_list(struct(
                member_offset, member_id, member_ids, member_deleted, member_json
                {%- for prop in props %}, v_{{ prop.index }}, j_{{ prop.index }}{% endfor %}
            )),
            {{ member_order }}
        ) as members
    from assigned
    group by component
),

-- identity, $ids and, per property, the members that have it
identified as (
    select
        {%- if spec.identity == 'first' %}
        members[0].member_id as `_id`,
        {%- else %}
        array_join(transform(members, m -> {{ node }}), '|') as `_id`,
        {%- endif %}
        array_join(transform(members, m -> {{ node }}), '|') as composite_id,
        array_distinct(flatten(transform(members, m -> m.member_ids))) as `$ids`,
        exists(members, m -> m.member_deleted) as `$deleted`,
        members
        {%- for prop in props %},
        filter(members, m -> m.v_{{ prop.index }} is not null) as having_{{ prop.index }}
        {%- endfor %}
    from grouped
),

-- the strategy: values per property, and their JSON
valued as (
    select
        *
        {%- for prop in props %},
        {%- if spec.strategy == 'compact' %}
        array_distinct(flatten(transform(having_{{ prop.index }}, m -> m.v_{{ prop.index }}))) as values_{{ prop.index }}
        {%- else %}
        flatten(transform(having_{{ prop.index }}, m -> m.v_{{ prop.index }})) as values_{{ prop.index }}
        {%- endif %}
        {%- endfor %}
    from identified
),

entities as (
    select
        `_id`,
        composite_id,
        `$ids`,
        `$deleted`,
        {%- if spec.strategy == 'list' %}
        concat('{"$merged":[', array_join(transform(members, m -> m.member_json), ','), ']}') as entity,
        transform(members, m -> m.member_json) as `$merged`
        {%- else %}
        concat('{', concat_ws(','
            {%- for prop in props %},
            case
                {%- if spec.strategy == 'compact' %}
                when size(values_{{ prop.index }}) = 1 then concat({{ dbt_merge._sql_string(prop.name | tojson ~ ':') }}, {{ dbt_merge._json_scalar_sql('values_' ~ prop.index) }})
                when size(values_{{ prop.index }}) > 1 then concat({{ dbt_merge._sql_string(prop.name | tojson ~ ':') }}, to_json(values_{{ prop.index }}))
                {%- else %}
                when size(having_{{ prop.index }}) = 1 then concat({{ dbt_merge._sql_string(prop.name | tojson ~ ':') }}, having_{{ prop.index }}[0].j_{{ prop.index }})
                when size(having_{{ prop.index }}) > 1 then concat({{ dbt_merge._sql_string(prop.name | tojson ~ ':') }}, to_json(values_{{ prop.index }}))
                {%- endif %}
            end
            {%- endfor %}
        ), '}') as entity
        {%- for prop in props %},
        case when size({{ 'values_' if spec.strategy == 'compact' else 'having_' }}{{ prop.index }}) > 0 then values_{{ prop.index }} end as {{ adapter.quote(prop.name) }}
        {%- endfor %}
        {%- endif %}
    from valued
),

{%- set output_columns = ['`$ids`', '`$deleted`', '`$replaced`', 'entity'] %}
{%- if spec.strategy == 'list' %}
{%- do output_columns.append('`$merged`') %}
{%- else %}
{%- for prop in props %}{% do output_columns.append(adapter.quote(prop.name)) %}{% endfor %}
{%- endif %}

{%- if spec.identity == 'first' %}

-- identity first: two entities may not get the same id
checked as (
    select *
    from (
        select
            *,
            collect_list(composite_id) over (partition by `_id`) as same_id_members
        from entities
    )
    where assert_true(
        size(same_id_members) = 1,
        concat(
            {{ dbt_merge._sql_string("dbt_merge: entity merge '" ~ spec.name ~ "', setting 'identity': first gives the id ") }},
            `_id`, ' to ', size(same_id_members), ' entities: ', array_join(array_sort(same_id_members), ', '),
            '. Put the id columns in an equality rule so that they merge, or use identity: composite'
        )
    ) is null
),
{%- else %}

checked as (
    select * from entities
),
{%- endif %}

current_entities as (
    select `_id`, `$ids`, `$deleted`, false as `$replaced`, entity
        {%- if spec.strategy == 'list' %}, `$merged`{% else %}{% for prop in props %}, {{ adapter.quote(prop.name) }}{% endfor %}{% endif %}
    from checked
),

{%- if incremental %}

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
        {%- for column in output_columns[4:] %},
        {%- if (column | replace('`', '') | lower) in previous_columns %}
        gone.{{ column }}
        {%- else %}
        cast(null as {{ 'array<string>' if spec.strategy == 'list' else 'array<' ~ spec.properties[column | replace('`', '') | lower].type ~ '>' }}) as {{ column }}
        {%- endif %}
        {%- endfor %}
    from gone
    left join gone_replaced
        on gone_replaced.`_id` = gone.`_id`
),

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


{#-- max_merged: a component larger than the limit fails the model before anything is written. --#}
{% macro _check_max_merged(spec, components) %}
    {% set check -%}
        select component, count(*) as member_count, array_join(slice(sort_array(collect_list(node)), 1, 5), ', ') as sample
        from {{ components }}
        where {{ dbt_merge._is_entity_node_sql('node') }}
        group by component
        having count(*) > {{ spec.max_merged }}
        order by member_count desc, component
        limit 1
    {%- endset %}
    {% set found = run_query(check) %}
    {% if found.rows | length > 0 %}
        {% set row = found.rows[0] %}
        {% do dbt_merge._entity_merge_error(spec.name, 'max_merged', 'a component has ' ~ row[1] ~ ' members, more than max_merged = ' ~ spec.max_merged ~ '. Some of its members (<offset>|<id>): ' ~ row[2] ~ '. Check the equality rules for a value shared by too many entities, or raise max_merged') %}
    {% endif %}
{% endmacro %}
