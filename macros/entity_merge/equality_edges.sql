{#--
    The equality graph of one entity merge, as edges between string nodes, and the state
    a change-following merge keeps of its input records:
      * every live entity is a node `<offset>|<id>` with an edge to itself, so entities
        that match nothing still come out of the closure as components of one; a
        deleted entity has one row with a null dst (no edge: it never merges);
      * every operand value is a node `=<group>:<type>:<value>`, and each live entity has
        an edge to the values of its operands. k entities sharing a value cost k edges,
        not k*(k-1)/2. Values of different types never meet (typed equality, no casts).
      * every row carries `fingerprint`, a hash of its entity's record as the dataset
        holds it (every column), `_batch`, the run that wrote it, and `declaration`,
        the merge's settings as JSON (a change-following run fails when they changed),
        and `change_mark`, the record's change column as a bigint (null for a dataset
        without one, see change_columns).
    Null, empty-string and empty-array operands make no edge; arrays give one edge per
    element.

    Materialized as a table, every run writes the whole graph. Materialized incremental
    with incremental_strategy='entity_state', a run compares every record's fingerprint
    with the stored one and writes only the rows of records that are new, changed or
    gone (a gone record keeps one row, its tombstone: null dst and fingerprint); the
    components model reads the rows of batches it has not seen (_batch). When the
    digest shows that more than rebuild_share of the records changed
    (_entity_edges_rebuild), the run computes every row instead and they replace the
    table, each unchanged record's rows with the batch that wrote them: the same table
    as the comparison leaves, without it (_entity_rebuilt_edge_rows_sql). A dataset
    declared in change_columns is read only from the largest change mark stored on (a
    record gone from it is not seen).

    This node checks the datasets' ids (_check_entity_ids), once for the whole merge:
    the components and the merged model are built from these edges.
--#}
{% macro equality_edges(merge_name) %}
    {{ return(adapter.dispatch('equality_edges', 'dbt_merge')(merge_name)) }}
{% endmacro %}


{% macro default__equality_edges(merge_name) %}
    {% set spec = dbt_merge._entity_merge_spec(merge_name) %}
    {% if not execute %}
        {{ return('select cast(null as string) as src, cast(null as string) as dst, cast(null as bigint) as fingerprint, cast(null as bigint) as `_batch`, cast(null as string) as declaration, cast(null as bigint) as change_mark') }}
    {% endif %}
    {% if config.get('materialized') == 'incremental' and config.get('incremental_strategy') == 'entity_state' %}
        {% do dbt_merge._refuse_entity_state() %}
    {% endif %}
    {% set incremental = is_incremental() %}
    {% set follows_columns = spec.datasets | selectattr('change_sql') | list | length > 0 %}
    {% set digested = dbt_merge._entity_uses_digest(spec) %}
    {#-- each Iceberg or Delta dataset read at its current snapshot, which the digest records --#}
    {% set snapshots = dbt_merge._entity_dataset_snapshots(spec) if digested else {} %}
    {% do dbt_merge._entity_pin_datasets(spec, snapshots) %}
    {% set candidates = none %}
    {% set rebuild = false %}
    {% set rebuild_share = dbt_merge._entity_rebuild_share() if digested else none %}
    {#-- read after the commit, checked before anything is staged --#}
    {% if dbt_merge._entity_state_format() is not none %}
        {% do dbt_merge._entity_state_compaction() %}
    {% endif %}
    {% set stored = none %}
    {% set changed_relation = none %}
    {% if incremental %}
        {#-- the snapshot this run reads: a batch written on a branch starts from it --#}
        {% if dbt_merge._entity_state_on_iceberg() %}
            {% do dbt_merge._entity_state_mark_read(this) %}
        {% endif %}
        {% set state_columns = ['src', 'dst', 'fingerprint', '_batch', 'declaration'] %}
        {% set stored_columns = dbt_merge._check_entity_state_columns(spec, this, state_columns + (['change_mark'] if follows_columns else [])) %}
        {% do dbt_merge._check_entity_declaration(spec, this) %}
        {% set stored_marks = 'change_mark' in stored_columns %}
        {% set digest = dbt_merge._entity_stored_digest(this) if digested else none %}
        {% set unchanged = false %}
        {% if digest is not none %}
            {#-- a dataset whose snapshot the digest describes is not read at all --#}
            {% set read_at = dbt_merge._entity_digest_snapshots(digest) %}
            {% set unread = dbt_merge._entity_mark_unread(spec, snapshots, read_at) %}
            {% if unread %}
                {% do log('dbt_merge: ' ~ model.name ~ ': not read, at the snapshot the last run read: ' ~ (unread | join(', ')), info=false) %}
            {% endif %}
            {#-- an upsert's events say which of its records changed: not hashed --#}
            {% set fed = dbt_merge._entity_mark_event_sources(spec, snapshots, read_at) %}
            {% if fed %}
                {% do log('dbt_merge: ' ~ model.name ~ ': changed records found from their upsert provenance events: ' ~ (fed | join(', ')), info=false) %}
            {% endif %}
            {#-- a Delta table's change data feed says which of its records changed --#}
            {% set fed = dbt_merge._entity_mark_feed_sources(spec, snapshots, read_at) %}
            {% if fed %}
                {% do log('dbt_merge: ' ~ model.name ~ ': changed records found from the change data feed of: ' ~ (fed | join(', ')), info=false) %}
            {% endif %}
            {#-- only the buckets whose digest differs are compared record by record; their
                 records (candidates) are read once, by the comparison, which keeps what
                 the batch needs of them --#}
            {% set buckets = none %}
            {% if unread | length < spec.datasets | length %}
                {% set buckets = dbt_merge._entity_stage('buckets', dbt_merge._entity_changed_buckets_sql(spec, digest)) %}
            {% endif %}
            {% set unchanged = buckets is none or run_query('select 1 from ' ~ buckets ~ ' limit 1').rows | length == 0 %}
            {#-- many records changed: writing every row costs less than finding them --#}
            {% set rebuild = not unchanged and dbt_merge._entity_edges_rebuild(spec, digest, buckets, rebuild_share) %}
            {% if rebuild %}
                {% do dbt_merge._check_entity_ids(spec) %}
            {% elif not unchanged %}
                {% set candidates = '(' ~ dbt_merge._entity_current_records_sql(spec, buckets=buckets) ~ ')' %}
                {#-- and their stored rows, read once: the comparison and the batch's drops --#}
                {% set stored = dbt_merge._entity_stage('stored', dbt_merge._entity_stored_rows_sql(buckets, stored_marks)) %}
            {% endif %}
        {% endif %}
        {% if not unchanged and not rebuild %}
            {#-- the records that differ from the stored state, staged once; the ids are
                 checked on them (the same scan finds duplicates and null ids) --#}
            {% set marks = dbt_merge._entity_change_marks(this) if follows_columns else {} %}
            {% set changed_relation = dbt_merge._entity_stage('changed', dbt_merge._entity_changed_records_sql(spec, marks, candidates, stored)) %}
            {% do dbt_merge._check_entity_ids(spec, changed_relation) %}
            {% set unchanged = run_query('select 1 from ' ~ changed_relation ~ ' limit 1').rows | length == 0 %}
        {% endif %}
    {% else %}
        {% do dbt_merge._check_entity_ids(spec) %}
    {% endif %}
    {% do dbt_merge._failpoint('entity_merge.before_edges') %}
    {#-- nothing changed: no batch number (a scan of the stored batches) is needed --#}
    {% set batch = 0 if incremental and unchanged else dbt_merge._entity_next_batch(this if incremental else none) %}

{% if incremental and not unchanged and not rebuild %}
    {#-- the changed records: the changed rows carry them when they come from the
         candidates; otherwise read from the datasets once --#}
    {% if candidates is not none %}
        {% set records_relation = dbt_merge._entity_carried_records_sql(changed_relation) %}
    {% else %}
        {% set records_relation = dbt_merge._entity_stage('records', dbt_merge._entity_current_records_sql(spec, changed_relation)) %}
    {% endif %}
{% endif %}
{% if digested and incremental and not rebuild and digest is not none and changed_relation is not none %}
    {#-- the digest once the batch is written, from the stored one and the changed
         records: finish_incremental_entity_state computes and stores it after the
         MERGE's commit --#}
    {% do dbt_merge._entity_digest_plan('next', snapshots=snapshots, source=dbt_merge._entity_next_digest_sql(
        digest, changed_relation, records_relation if not unchanged else none
    )) %}
{% elif digested %}
    {#-- a first run, a rebuild and a run without a usable digest compute it from the
         edges once written; a run that found no bucket changed keeps the stored one --#}
    {% do dbt_merge._entity_digest_plan('keep' if incremental and not rebuild and digest is not none else 'rebuild', snapshots=snapshots) %}
{% elif dbt_merge._entity_state_format() is not none %}
    {% do dbt_merge._entity_digest_plan('none') %}
{% endif %}
{%- if incremental and unchanged %}
    {#-- an empty batch, planned without reading a row: the strategy writes nothing --#}
    select *, false as `$drop` from {{ this }} limit 0
{%- elif rebuild %}
    {#-- every row: the strategy replaces the table with them --#}
    {{ dbt_merge._entity_rebuilt_edge_rows_sql(spec, batch) }}
{%- elif incremental %}
    {#-- staged too: the MERGE then reads a small table of known size --#}
    select * from {{ dbt_merge._entity_stage('batch', dbt_merge._entity_edge_rows_sql(spec, batch, changed_relation, stored_marks, records_relation, stored)) }}
{%- else %}
    {{ dbt_merge._entity_edge_rows_sql(spec, batch) }}
{%- endif %}
{% endmacro %}


{#-- The select of every input record (with changed_relation, a change-following run's
     staged changed records: of every new or changed one; with buckets, the staged
     buckets whose digest changed: of every record in them): its dataset offset, node,
     the fingerprint of its row, whether it is live, the value nodes of its operands and
     its change mark. A change-following run stages it once: the edges rows read it
     several times. --#}
{% macro _entity_current_records_sql(spec, changed_relation=none, buckets=none) %}
    {%- set selects = [] %}
    {%- for dataset in spec.datasets if not dataset.get('unread') %}
        {%- set node = dbt_merge._entity_node_sql(dataset) %}
        {%- set select -%}
    select
        {{ dataset.offset }} as dataset_offset,
        {{ node }} as node,
        {{ dbt_merge._entity_fingerprint_sql(dataset) }} as fingerprint,
        {{ dbt_merge._entity_is_live_sql(dataset) }} as live,
        {{ dbt_merge._entity_value_nodes_sql(spec, dataset) }} as value_nodes,
        {{ dataset.change_mark_sql or 'cast(null as bigint)' }} as change_mark
    from {{ dataset.relation }} as {{ dataset.alias }}
    {%- if changed_relation %}
    where {{ node }} in (select node from {{ changed_relation }} where records = 1)
    {%- elif buckets is not none %}
    where {{ dbt_merge._entity_bucket_sql(node) }} in (
        select bucket from {{ buckets }} where dataset_offset = {{ dataset.offset }}
    )
    {%- endif %}
        {%- endset %}
        {%- do selects.append(select) %}
    {%- endfor %}
    {{- selects | join('\nunion all\n') }}
{%- endmacro %}


{#-- The changed records as the staged changed rows (changed_relation) carry them when
     they were found among the candidates (_entity_changed_records_sql): a subquery
     with the columns of _entity_current_records_sql, one row per new or changed
     record. --#}
{% macro _entity_carried_records_sql(changed_relation) %}
    {{- return('(select dataset_offset, node, fingerprint, live, value_nodes, change_mark from ' ~ changed_relation ~ ' where records = 1)') -}}
{% endmacro %}


{#-- The select of the edges rows a run writes (batch: its number): every record's rows,
     or with changed_relation (a change-following run: the staged changed records,
     _entity_changed_records_sql) the rows of those records only, each with a `$drop`
     flag, and the stored rows they replace as drops. stored_marks: the stored edges
     have the change_mark column. records_relation: those records as staged
     (_entity_current_records_sql) or as the changed rows carry them
     (_entity_carried_records_sql), read instead of the datasets. stored: the stored
     rows of the changed records' buckets as staged (_entity_stored_rows_sql), read
     instead of the whole table; with it, every row also says whether its key is
     stored (`$stored`, see get_incremental_entity_state_sql). --#}
{% macro _entity_edge_rows_sql(spec, batch, changed_relation=none, stored_marks=false, records_relation=none, stored=none) %}
with

-- every input record (a change-following run: every new or changed one)
current_records as (
    {%- if records_relation %}
    select * from {{ records_relation }}
    {%- else %}
    {{ dbt_merge._entity_current_records_sql(spec, changed_relation) }}
    {%- endif %}
),

next_rows as (
    {{ dbt_merge._entity_record_rows_sql('current_records') }}
    {%- if changed_relation %}
    union all
    -- a record gone from its dataset keeps one row too (its tombstone, without a
    -- fingerprint) until it comes back
    select
        node as src,
        cast(null as string) as dst,
        cast(null as bigint) as fingerprint,
        cast(null as bigint) as change_mark
    from {{ changed_relation }} as changed
    left anti join current_records
        on current_records.node = changed.node
    {%- endif %}
)

select
    src,
    dst,
    fingerprint,
    cast({{ batch }} as bigint) as `_batch`,
    {{ dbt_merge._sql_string(dbt_merge._entity_declaration_json(spec)) }} as declaration,
    change_mark
    {{- ', false as `$drop`' if changed_relation }}
    {{- ', kept.kept_src is not null as `$stored`' if stored is not none }}
from next_rows
{%- if stored is not none %}
-- whether the row's key is stored (stored holds every stored row of the changed
-- records): the strategy appends the new keys' placeholders without reading the table.
-- The stored keys that are rows again are found first (a semi join, to which the
-- batch's few rows are broadcast), so only they are shuffled, not the stored rows of
-- every record of the changed buckets
left join (
    select stored.src as kept_src, stored.dst as kept_dst
    from {{ stored }} as stored
    left semi join next_rows
        on next_rows.src = stored.src and next_rows.dst <=> stored.dst
) as kept
    on kept.kept_src = next_rows.src and kept.kept_dst <=> next_rows.dst
{%- endif %}
{%- if changed_relation %}
union all
-- the stored rows of changed records that are not rows any more (the MERGE deletes
-- them: only their keys count)
select
    stored.src,
    stored.dst,
    stored.fingerprint,
    cast({{ batch }} as bigint),
    {{ dbt_merge._sql_string(dbt_merge._entity_declaration_json(spec)) }},
    {{ 'stored.change_mark' if stored_marks else 'cast(null as bigint)' }},
    true as `$drop`
    {{- ', true as `$stored`' if stored is not none }}
from {{ stored if stored is not none else this }} as stored
left semi join {{ changed_relation }} as changed
    on changed.node = stored.src
left anti join next_rows
    on next_rows.src = stored.src and next_rows.dst <=> stored.dst
{%- endif %}
{% endmacro %}


{#-- The select of every record that differs from the stored state (this), one row per
     (dataset_offset, node): new, changed (its fingerprint differs) or gone (records = 0),
     and every id that is not unique (records > 1) or null (node null). One aggregation
     over the datasets' records and the stored fingerprints, without the records'
     values: what the MERGE writes is computed afterwards, for these records only. With
     candidates (a subquery of the records of the buckets whose digest changed, read
     instead of the datasets: few, with their values), each row also carries its
     record's live, value_nodes and change_mark (null for a gone record), which the
     batch then reads from it (_entity_carried_records_sql). marks:
     dataset offset -> the largest change mark stored (_entity_change_marks); a
     dataset with a change column and a mark is read from that mark on (and its null
     change values), and only the stored rows of those records take part: a record
     gone from such a dataset is not seen. --#}
{% macro _entity_changed_records_sql(spec, marks={}, candidates=none, stored=none) %}
    {%- set read_from = {} %}
    {%- for dataset in spec.datasets if dataset.change_sql and marks.get(dataset.offset) is not none %}
        {%- do read_from.update({dataset.offset: '(' ~ dataset.change_sql ~ ' >= ' ~ dataset.change_from_sql.format(marks[dataset.offset]) ~ ' or ' ~ dataset.change_sql ~ ' is null)'}) %}
    {%- endfor %}
{%- if read_from %}
with

-- the records read from their change marks on: few, so broadcast to the stored rows
read_nodes as (
    {%- for dataset in spec.datasets if dataset.offset in read_from %}
    select {{ dbt_merge._entity_node_sql(dataset) }} as node
    from {{ dataset.relation }} as {{ dataset.alias }}
    where {{ read_from[dataset.offset] }}
    {% if not loop.last %}union all{% endif %}
    {%- endfor %}
)

{% endif -%}
select
    dataset_offset,
    node,
    count_if(is_record) as records,
    max(if(is_record, fingerprint, null)) as fingerprint,
    max(if(is_record, null, fingerprint)) as stored_fingerprint
    {%- if candidates is not none %},
    first(live, true) as live,
    first(value_nodes, true) as value_nodes,
    first(change_mark, true) as change_mark
    {%- endif %}
from (
    {%- if candidates is not none %}
    -- the records of the buckets whose digest changed
    select dataset_offset, node, fingerprint, true as is_record, live, value_nodes, change_mark
    from {{ candidates }}
    union all
    {%- endif %}
    {%- for dataset in spec.datasets if candidates is none %}
    select
        {{ dataset.offset }} as dataset_offset,
        {{ dbt_merge._entity_node_sql(dataset) }} as node,
        {{ dbt_merge._entity_fingerprint_sql(dataset) }} as fingerprint,
        true as is_record
    from {{ dataset.relation }} as {{ dataset.alias }}
    {%- if dataset.offset in read_from %}
    where {{ read_from[dataset.offset] }}
    {%- endif %}
    union all
    {%- endfor %}
    {%- if read_from %}
    -- the stored rows of the datasets read from their marks: of the records read only
    select /*+ BROADCAST(read_nodes) */
        {{ dbt_merge._entity_node_offset_sql('stored.src') }} as dataset_offset,
        stored.src as node,
        stored.fingerprint,
        false as is_record
        {{- dbt_merge._entity_no_record_sql() if candidates is not none }}
    from {{ this }} as stored
    left semi join read_nodes
        on read_nodes.node = stored.src
    where (stored.src = stored.dst or stored.dst is null) and stored.fingerprint is not null
    {%- endif %}
    {%- if spec.datasets | rejectattr('offset', 'in', read_from.keys() | list) | list %}
    {{ 'union all' if read_from }}
    select
        {{ dbt_merge._entity_node_offset_sql('src') }} as dataset_offset,
        src as node,
        fingerprint,
        false as is_record
        {{- dbt_merge._entity_no_record_sql() if candidates is not none }}
    from {{ stored if stored is not none else this }}
    where (src = dst or dst is null) and fingerprint is not null
    {%- if read_from %}
        and {{ dbt_merge._entity_node_offset_sql('src') }} not in ({{ read_from.keys() | join(', ') }})
    {%- endif %}
    {%- endif %}
)
group by dataset_offset, node
having records != 1 or not (fingerprint <=> stored_fingerprint)
{%- endmacro %}


{#-- The columns live, value_nodes and change_mark of a stored row in
     _entity_changed_records_sql's union with the candidates (nulls: it is no record). --#}
{% macro _entity_no_record_sql() %}
    {{- return(', cast(null as boolean), cast(null as array<string>), cast(null as bigint)') -}}
{% endmacro %}


{#-- Per dataset offset, the largest change mark the stored edges (relation) hold: where
     a change-following run reads a dataset with a change column from. --#}
{% macro _entity_change_marks(relation) %}
    {% set found = run_query(
        'select ' ~ dbt_merge._entity_node_offset_sql('src') ~ ', max(change_mark) from ' ~ relation
        ~ ' where (src = dst or dst is null) and change_mark is not null group by 1'
    ) %}
    {% set marks = {} %}
    {% for row in found.rows %}{% do marks.update({row[0] | int: row[1] | int}) %}{% endfor %}
    {{ return(marks) }}
{% endmacro %}


{#-- The value nodes of a record of the dataset, as an array<string>: one per non-empty
     value of each of its operands in every equality group (per element of an array
     operand). Null and empty-string values, and null arrays, make none. --#}
{% macro _entity_value_nodes_sql(spec, dataset) %}
    {%- set parts = [] %}
    {%- for group in spec.groups %}
        {%- set group_index = loop.index0 %}
        {%- for operand in group.operands if operand.offset == dataset.offset %}
            {%- set element = dbt_merge._array_element_type(operand.type) %}
            {%- set value_type = dbt_merge._normalized_type(element if element else operand.type) %}
            {%- set values = operand.sql if element else 'array(' ~ operand.sql ~ ')' %}
            {%- set keep = 'dbt_merge_v is not null' ~ (" and dbt_merge_v != ''" if value_type == 'string' else '') %}
            {#-- a null array makes no value node (concat would make the whole array null) --#}
            {%- do parts.append(
                'coalesce(transform(filter(' ~ values ~ ', dbt_merge_v -> ' ~ keep ~ '), dbt_merge_v -> '
                ~ dbt_merge._entity_value_node_sql(group_index, value_type, 'dbt_merge_v') ~ '), cast(array() as array<string>))'
            ) %}
        {%- endfor %}
    {%- endfor %}
    {{- return('concat(' ~ (parts | join(', ')) ~ ')' if parts else 'cast(array() as array<string>)') -}}
{% endmacro %}


{#-- Null and duplicate ids make identities ambiguous: fail before anything is written.
     Run once per merge, by its first node (equality_edges): over every record, or in a
     change-following run over its staged changed records (changed, where a duplicate
     id has records > 1 and a null id a null node). --#}
{% macro _check_entity_ids(spec, changed=none) %}
    {% set checks = [] %}
    {% if changed is not none %}
        {% do checks.append(
            'select dataset_offset, ' ~ dbt_merge._entity_node_id_sql('node') ~ ' as entity_id, records as row_count from '
            ~ changed ~ ' where node is null or records > 1 order by node is not null, node limit 3'
        ) %}
    {% endif %}
    {% for dataset in spec.datasets if changed is none %}
        {% set check -%}
            select * from (
                select
                    {{ dataset.offset }} as dataset_offset,
                    {{ dbt_merge._entity_id_sql(dataset) }} as entity_id,
                    count(*) as row_count
                from {{ dataset.relation }} as {{ dataset.alias }}
                group by 2
                having entity_id is null or count(*) > 1
                limit 3
            )
        {%- endset %}
        {% do checks.append(check) %}
    {% endfor %}
    {% set found = run_query(checks | join('\nunion all\n')) %}
    {% if found.rows | length > 0 %}
        {% set row = found.rows[0] %}
        {% set dataset = spec.datasets[row[0] | int] %}
        {% set problem = 'a null id (' ~ row[2] ~ ' rows)' if row[1] is none else 'the id ' ~ row[1] ~ ' ' ~ row[2] ~ ' times' %}
        {% do dbt_merge._entity_merge_error(spec.name, 'id_column', 'dataset ' ~ dataset.name ~ ' (alias ' ~ dataset.alias ~ ') has ' ~ problem ~ ' in column ' ~ spec.id_column ~ '; ids must be unique and not null within a dataset') %}
    {% endif %}
{% endmacro %}


{#-- The select of every edges row after a change-following run that rebuilds the edges
     (batch: its number), with `$drop` (false) and `$whole` (the strategy replaces the
     table with them): the rows of every input record, each record's rows with the
     batch that wrote them while its fingerprint is the stored one, else this batch;
     and the tombstone of every stored record gone from its dataset (of this batch
     when it was live until now). The same rows as a run that compares the records
     leaves (placeholders that a run which died left are gone), from one join of the
     records with their stored rows. --#}
{% macro _entity_rebuilt_edge_rows_sql(spec, batch) %}
with

current_records as (
    {{ dbt_merge._entity_current_records_sql(spec) }}
),

-- each stored record's row (a live record's edge to itself, another record's only row)
stored as (
    select src as node, fingerprint, `_batch`
    from {{ this }}
    where (src = dst or dst is null) and `_batch` is not null
),

records as (
    select
        coalesce(current_records.node, stored.node) as node,
        current_records.node is not null as is_current,
        current_records.live,
        current_records.value_nodes,
        current_records.fingerprint,
        current_records.change_mark,
        case
            when current_records.node is not null and current_records.fingerprint <=> stored.fingerprint
                then stored.`_batch`
            -- gone in an earlier run: its tombstone stays as it is
            when current_records.node is null and stored.fingerprint is null then stored.`_batch`
            else cast({{ batch }} as bigint)
        end as row_batch
    from current_records
    full outer join stored
        on stored.node = current_records.node
)

select
    src,
    dst,
    fingerprint,
    row_batch as `_batch`,
    {{ dbt_merge._sql_string(dbt_merge._entity_declaration_json(spec)) }} as declaration,
    change_mark,
    false as `$drop`,
    true as `$whole`
from (
    {{ dbt_merge._entity_record_rows_sql('records', ['row_batch']) }}
    union all
    select node, cast(null as string), cast(null as bigint), cast(null as bigint), row_batch
    from records
    where not is_current
)
{%- endmacro %}


{#-- The select of the edges rows of the records in the CTE records (columns node, live,
     value_nodes, fingerprint, change_mark; a row whose live is null has none): a live
     record's edge to itself, so that a record that matches nothing is a component of
     one, and an edge to each value node of its operands; a deleted record's one row
     without an edge. Columns src, dst, fingerprint, change_mark, then the columns
     extra of records. --#}
{% macro _entity_record_rows_sql(records, extra=[]) %}
    select
        node as src,
        explode(array_distinct(concat(array(node), value_nodes))) as dst,
        fingerprint,
        change_mark{% for column in extra %}, {{ column }}{% endfor %}
    from {{ records }}
    where live
    union all
    select node, cast(null as string), fingerprint, change_mark{% for column in extra %}, {{ column }}{% endfor %}
    from {{ records }}
    where not live
{%- endmacro %}
