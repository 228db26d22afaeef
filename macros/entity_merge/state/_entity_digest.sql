{#--
    The digest of a change-following merge's records: how a run finds what changed
    without joining every record's fingerprint to every stored one (a hash tree with one
    level, as replicas compare their data). Per dataset and bucket of node names
    (_entity_digest_buckets() buckets per dataset), the number of records and the XOR of
    the hashes of their (node, fingerprint).

    The edges model keeps the digest of its stored fingerprints in the table
    <model>__dbt_merge_digest, stamped with the edges snapshot it describes. A run
    computes the digest of the datasets (one scan; only a row per bucket is shuffled),
    and compares fingerprints record by record only in the buckets whose digest differs
    from the stored one. A digest of another snapshot (a run that died after its MERGE,
    another writer) is not used: that run compares every record and rebuilds the digest.
    Used on Iceberg and Delta, for a merge without change_columns.
--#}

{#-- The buckets of a dataset's node names: 65,536, so that a bucket holds about 15
     records of a million-record dataset (what a changed record makes a run read
     again). Four times as many made the 3M benchmark's edges slower (one process each,
     2026-11-29): 28.8 s against 25.5 s at 0.1% changed, 36.9 s against 35.3 s at 1%,
     10.0 s against 6.7 s with nothing changed. The digest's pass and its join with the
     stored digest grew by more than the comparison of fewer records saved. --#}
{% macro _entity_digest_buckets() %}
    {{- return(65536) -}}
{% endmacro %}


{#-- The bucket of a node name (an expression; a null name has a bucket too). --#}
{% macro _entity_bucket_sql(node_sql) %}
    {{- 'pmod(xxhash64(' ~ node_sql ~ '), ' ~ dbt_merge._entity_digest_buckets() ~ ')' -}}
{% endmacro %}


{#-- A record's share of its bucket's digest: the hash of its node and fingerprint. --#}
{% macro _entity_digest_mix_sql(node_sql, fingerprint_sql) %}
    {{- 'xxhash64(' ~ node_sql ~ ', ' ~ fingerprint_sql ~ ')' -}}
{% endmacro %}


{#-- The table format of the model (this) when it is a state model (incremental,
     entity_state) on a format with versions: iceberg or delta; else none. --#}
{% macro _entity_state_format() %}
    {% if config.get('materialized') == 'incremental' and config.get('incremental_strategy') == 'entity_state'
        and config.get('file_format') in ['iceberg', 'delta'] %}
        {{ return(config.get('file_format')) }}
    {% endif %}
    {{ return(none) }}
{% endmacro %}


{#-- Whether the model (this) is a state model on Iceberg: incremental, entity_state. --#}
{% macro _entity_state_on_iceberg() %}
    {{ return(dbt_merge._entity_state_format() == 'iceberg') }}
{% endmacro %}


{#-- Whether the edges model (this) keeps a digest: a state model on Iceberg or Delta
     of a merge whose datasets have no change column (their runs read only the changed
     rows: there is nothing to summarize). --#}
{% macro _entity_uses_digest(spec) %}
    {{ return(dbt_merge._entity_state_format() is not none and spec.datasets | selectattr('change_sql') | list | length == 0) }}
{% endmacro %}


{#-- The table <relation>__dbt_merge_<part> beside a model's table. --#}
{% macro _entity_side_relation(relation, part) %}
    {{ return(api.Relation.create(
        database=relation.database, schema=relation.schema,
        identifier=relation.identifier ~ '__dbt_merge_' ~ part
    )) }}
{% endmacro %}


{#-- The stored digest of the edges table relation when it describes relation's current
     snapshot (version) with today's buckets, else none. A run before the first digest
     finds it empty. The digest has the edges' table format. --#}
{% macro _entity_stored_digest(relation) %}
    {% set digest = dbt_merge._entity_side_relation(relation, 'digest') %}
    {% do dbt_merge._execute(
        'create table if not exists ' ~ digest ~ ' (dataset_offset int, bucket int, records bigint,'
        ~ ' digest bigint, buckets int, edges_snapshot string) using ' ~ dbt_merge._entity_state_format()
    ) %}
    {% set found = run_query(
        'select edges_snapshot from ' ~ digest ~ ' where buckets = ' ~ dbt_merge._entity_digest_buckets() ~ ' limit 1'
    ).rows %}
    {% set stamped = found[0][0] if found | length > 0 else none %}
    {{ return(digest if stamped is not none and stamped == dbt_merge._table_version(relation, dbt_merge._entity_state_format()) else none) }}
{% endmacro %}


{#-- The current snapshot of each dataset of the merge that is an Iceberg table, and the
     current version of each that is a Delta table (not a view, nor another format):
     {offset as a string: snapshot id or version as a string}; each such dataset's
     table_format is set. The edges model reads such a dataset at that snapshot
     (_entity_pin_datasets) and its digest records it (_entity_digest_snapshots): the
     next run does not read a dataset whose snapshot has not moved. --#}
{% macro _entity_dataset_snapshots(spec) %}
    {% set snapshots = {} %}
    {% for dataset in spec.datasets %}
        {% set provider = dbt_merge._table_provider(dataset.relation) %}
        {% set snapshot = dbt_merge._table_version(dataset.relation, provider) if provider in ['iceberg', 'delta'] else none %}
        {% if snapshot is not none %}
            {% do dataset.update({'table_format': provider}) %}
            {% do snapshots.update({dataset.offset | string: snapshot}) %}
        {% endif %}
    {% endfor %}
    {{ return(snapshots) }}
{% endmacro %}


{#-- Every read of the datasets in snapshots (_entity_dataset_snapshots) by this run
     (spec) is at that snapshot (time travel), so that the digest the run
     leaves describes it, whatever commits to the dataset meanwhile. The table itself
     stays in dataset.table. --#}
{% macro _entity_pin_datasets(spec, snapshots) %}
    {% for dataset in spec.datasets if (dataset.offset | string) in snapshots %}
        {% do dataset.update({'table': dataset.relation, 'relation': dataset.relation ~ ' version as of ' ~ snapshots[dataset.offset | string]}) %}
    {% endfor %}
{% endmacro %}


{#-- The table property of the digest that holds the datasets' snapshots it describes. --#}
{% macro _entity_digest_snapshots_property() %}
    {{- return('dbt_merge.dataset_snapshots') -}}
{% endmacro %}


{#-- The datasets' snapshots the stored digest (a relation) describes, as
     _entity_dataset_snapshots gives them; {} for a digest without them. --#}
{% macro _entity_digest_snapshots(digest) %}
    {% set found = run_query('show tblproperties ' ~ digest ~ " ('" ~ dbt_merge._entity_digest_snapshots_property() ~ "')").rows %}
    {% set value = (found[0][1] | string) if found | length > 0 else '' %}
    {{ return(fromjson(value) if value.startswith('{') else {}) }}
{% endmacro %}


{#-- Marks each dataset (of spec) whose snapshot (snapshots) is the one the stored
     digest describes (stored): a run reads no record of it, and compares its stored
     digest with nothing. Returns the names of those datasets. --#}
{% macro _entity_mark_unread(spec, snapshots, stored) %}
    {% set unread = [] %}
    {% for dataset in spec.datasets %}
        {% set snapshot = snapshots.get(dataset.offset | string) %}
        {% if snapshot is not none and snapshot == stored.get(dataset.offset | string) %}
            {% do dataset.update({'unread': true}) %}
            {% do unread.append(dataset.name) %}
        {% endif %}
    {% endfor %}
    {{ return(unread) }}
{% endmacro %}


{#-- The select of the buckets (dataset_offset, bucket) whose digest differs between the
     datasets and the stored digest: the only buckets whose records a run compares. A
     dataset marked unread (_entity_mark_unread) takes no part; one whose change its
     upsert's events hold (_entity_mark_event_sources) or its Delta change data feed
     (_entity_mark_feed_sources) gives the buckets of its changed keys instead
     (_entity_event_buckets_sql, _entity_feed_buckets_sql). --#}
{% macro _entity_changed_buckets_sql(spec, digest) %}
    {%- set hashed = [] %}
    {%- set fed = [] %}
    {%- for dataset in spec.datasets if not dataset.get('unread') %}
        {%- do (fed if dataset.get('events') or dataset.get('feed') else hashed).append(dataset) %}
    {%- endfor %}
    {%- if hashed %}
select
    coalesce(current_digest.dataset_offset, stored.dataset_offset) as dataset_offset,
    coalesce(current_digest.bucket, stored.bucket) as bucket
-- the datasets' digest: a row per bucket leaves each task (partial aggregation)
from (
    {%- for dataset in hashed %}
    select
        {{ dataset.offset }} as dataset_offset,
        {{ dbt_merge._entity_bucket_sql('node') }} as bucket,
        count(*) as records,
        bit_xor({{ dbt_merge._entity_digest_mix_sql('node', 'fingerprint') }}) as digest
    from (
        select
            {{ dbt_merge._entity_node_sql(dataset) }} as node,
            {{ dbt_merge._entity_fingerprint_sql(dataset) }} as fingerprint
        from {{ dataset.relation }} as {{ dataset.alias }}
    )
    group by 2
    {% if not loop.last %}union all{% endif %}
    {%- endfor %}
) as current_digest
full outer join (
    select * from {{ digest }}
    {%- if hashed | length < spec.datasets | length %}
    where dataset_offset in ({{ hashed | map(attribute='offset') | join(', ') }})
    {%- endif %}
) as stored
    on stored.dataset_offset = current_digest.dataset_offset
    and stored.bucket = current_digest.bucket
where not (
    current_digest.records <=> stored.records
    and current_digest.digest <=> stored.digest
)
    {%- endif %}
    {%- for dataset in fed %}
{{ 'union all' if hashed or not loop.first }}
{{ dbt_merge._entity_event_buckets_sql(dataset) if dataset.get('events') else dbt_merge._entity_feed_buckets_sql(dataset) }}
    {%- endfor %}
{%- endmacro %}


{#-- Whether a change-following run of the edges model rebuilds the edges: when the
     records it estimates changed (from the buckets whose digest differs, staged in
     buckets, and the stored digest) pass the share of the records share
     (_entity_rebuild_share). A record's bucket is a hash of its node, so
     changed records fall into buckets at random: with a share f of a dataset's
     occupied buckets changed, about -ln(1 - f) records changed per bucket (a Poisson
     count; at most the dataset's records). Marks every dataset read (a rebuild reads
     them all) and says so in the log. --#}
{% macro _entity_edges_rebuild(spec, digest, buckets, share) %}
    {% set found = run_query(
        'select cast(sum(least(stored.records, -ln(1 - least(coalesce(changed.buckets, 0) / stored.buckets, 0.999999)) * stored.buckets)) as bigint),'
        ~ ' sum(stored.records) from (select dataset_offset, sum(records) as records, count(*) as buckets from ' ~ digest ~ ' group by 1) as stored'
        ~ ' left join (select dataset_offset, count(*) as buckets from ' ~ buckets ~ ' group by 1) as changed'
        ~ ' on changed.dataset_offset = stored.dataset_offset'
    ).rows[0] %}
    {% set estimate, records = found[0] or 0, found[1] or 0 %}
    {% if records == 0 or estimate <= share * records %}
        {{ return(false) }}
    {% endif %}
    {% do log('dbt_merge: ' ~ model.name ~ ': about ' ~ estimate ~ ' of ' ~ records ~ ' records changed, over rebuild_share = '
        ~ share ~ ': every row is written again and replaces the table', info=false) %}
    {% for dataset in spec.datasets %}{% do dataset.update({'unread': false}) %}{% endfor %}
    {{ return(true) }}
{% endmacro %}


{#-- The share of the records (of the edges model) that a change-following run may
     estimate changed and still compare them record by record; above it the run
     rebuilds the edges (_entity_edges_rebuild). The edges model's config
     rebuild_share, else the var dbt_merge_rebuild_share, else 0.02. --#}
{% macro _entity_rebuild_share() %}
    {% set share = config.get('rebuild_share', var('dbt_merge_rebuild_share', 0.02)) %}
    {% if share is boolean or share is not number or share < 0 %}
        {% do exceptions.raise_compiler_error("dbt_merge: model " ~ model.name ~ ", setting 'rebuild_share': must be a number of 0 or more (a share of the records; 1 or more: never rebuild), got " ~ share) %}
    {% endif %}
    {{ return(share | float) }}
{% endmacro %}


{#-- The select of the stored edges rows (this) of the records in the staged buckets
     (few: broadcast to the scan): their keys, fingerprints and change marks
     (stored_marks: the table has the column), what the comparison and the batch's drops
     read. Not the declaration: the same long string on every row, which would cost a
     second of decoding in a scan of millions. --#}
{% macro _entity_stored_rows_sql(buckets, stored_marks=false) %}
    select /*+ BROADCAST(buckets) */
        stored.src, stored.dst, stored.fingerprint{{ ', stored.change_mark' if stored_marks }}
    from {{ this }} as stored
    left semi join {{ buckets }} as buckets
        on buckets.dataset_offset = {{ dbt_merge._entity_node_offset_sql('stored.src') }}
        and buckets.bucket = {{ dbt_merge._entity_bucket_sql('stored.src') }}
{%- endmacro %}


{#-- The select of the digest of the stored fingerprints of the edges table relation
     (a scan: a run without a usable digest, and a first run). --#}
{% macro _entity_state_digest_sql(relation) %}
    select
        {{ dbt_merge._entity_node_offset_sql('src') }} as dataset_offset,
        {{ dbt_merge._entity_bucket_sql('src') }} as bucket,
        count(*) as records,
        bit_xor({{ dbt_merge._entity_digest_mix_sql('src', 'fingerprint') }}) as digest
    from {{ relation }}
    where (src = dst or dst is null) and fingerprint is not null
    group by 1, 2
{%- endmacro %}


{#-- The select of the digest the edges hold once this run's batch is written: the
     stored digest (digest), without the stored fingerprints of the changed records
     (changed, _entity_changed_records_sql) and with the fingerprints of their rows as
     the batch writes them (records, _entity_current_records_sql or
     _entity_carried_records_sql; none when nothing changed). It reads neither the
     datasets nor the edges: finish_incremental_entity_state runs it after the batch's
     commit, in the statement that replaces digest. --#}
{% macro _entity_next_digest_sql(digest, changed, records) %}
    select dataset_offset, bucket, sum(records) as records, bit_xor(digest) as digest
    from (
        select dataset_offset, bucket, records, digest from {{ digest }}
        union all
        select
            dataset_offset,
            {{ dbt_merge._entity_bucket_sql('node') }},
            -1,
            {{ dbt_merge._entity_digest_mix_sql('node', 'stored_fingerprint') }}
        from {{ changed }}
        where stored_fingerprint is not null
        {%- if records is not none %}
        union all
        select
            dataset_offset,
            {{ dbt_merge._entity_bucket_sql('node') }},
            1,
            {{ dbt_merge._entity_digest_mix_sql('node', 'fingerprint') }}
        from {{ records }}
        {%- endif %}
    )
    group by dataset_offset, bucket
    having sum(records) != 0
{%- endmacro %}


{#-- What finish_incremental_entity_state does after this edges run's commit (action):
     compute the digest with the select source (_entity_next_digest_sql: 'next'), or
     from the stored edges ('rebuild': a first run, a rebuild, a run without a usable
     digest), or nothing ('keep': the stored digest still describes the edges, whose
     property of the datasets' snapshots is brought up to date; 'none': a merge
     without a digest), and snapshots: the datasets' snapshots the run read
     (_entity_dataset_snapshots). Set by every run of an edges model on Iceberg, as a
     temporary view of the session (no table to write): the step runs in the same
     session, after the model's statement. Returns the view's name. --#}
{% macro _entity_digest_plan(action=none, relation=this, snapshots={}, source='') %}
    {% set name = (relation.schema ~ '__' ~ relation.identifier ~ '__dbt_merge_digest_plan') | lower %}
    {% if action is not none %}
        {% do dbt_merge._execute(
            'create or replace temporary view ' ~ name ~ ' as select ' ~ dbt_merge._sql_string(action) ~ ' as action, '
            ~ dbt_merge._sql_string(tojson(snapshots, sort_keys=true)) ~ ' as snapshots, '
            ~ dbt_merge._sql_string(source) ~ ' as source'
        ) %}
    {% endif %}
    {{ return(name) }}
{% endmacro %}


{#-- incremental_strategy='entity_state', after the MERGE's commit: the edges model's
     digest, as its run planned it (_entity_digest_plan), stamped with the snapshot
     just committed, with the datasets' snapshots it describes as a table property
     (_entity_digest_snapshots_property). Nothing for a components model. Both: the broadcast threshold
     the MERGE raised is put back (_entity_state_raise_broadcast), the table writes
     row-level deletes from then on (_entity_state_use_row_deletes), and after a
     delivery it is compacted once they pile up (_entity_state_compact). --#}
{% macro finish_incremental_entity_state(arg_dict) %}
    {% do dbt_merge._entity_state_restore_broadcast() %}
    {% set target = arg_dict['target_relation'] %}
    {% set columns = adapter.get_columns_in_relation(target) | map(attribute='name') | map('lower') | list %}
    {% set table_format = dbt_merge._entity_state_format() %}
    {#-- row-level deletes from the next MERGE on (a first build's table, and one
         built before dbt_merge wrote them), compacted once they pile up: before the
         digest is stamped with the table's snapshot --#}
    {% set current = none %}
    {% if table_format is not none %}
        {% do dbt_merge._entity_state_use_row_deletes(target, table_format) %}
        {% if not arg_dict['rebuild'] %}
            {% set current = dbt_merge._entity_state_compact(target, table_format) %}
        {% endif %}
    {% endif %}
    {% if table_format is none or 'src' not in columns or 'fingerprint' not in columns %}
        {{ return(none) }}
    {% endif %}
    {% set plan = run_query('select action, snapshots, source from ' ~ dbt_merge._entity_digest_plan(relation=target)).rows[0] %}
    {% set action, snapshots = plan[0], plan[1] %}
    {% set digest = dbt_merge._entity_side_relation(target, 'digest') %}
    {% set property = dbt_merge._sql_string(dbt_merge._entity_digest_snapshots_property()) ~ ' = ' ~ dbt_merge._sql_string(snapshots) %}
    {% if action == 'next' %}
        {#-- reads the stored digest, which the statement replaces (Iceberg and Delta
             plan the read on its current snapshot) --#}
        {% set source = plan[2] %}
    {% elif action == 'rebuild' %}
        {% set source = dbt_merge._entity_state_digest_sql(target) %}
    {% else %}
        {#-- 'keep': the digest describes the datasets read at these snapshots now (a
             dataset rewritten with the same records has a new one) --#}
        {% if action == 'keep' and fromjson(snapshots) != dbt_merge._entity_digest_snapshots(digest) %}
            {% do dbt_merge._execute('alter table ' ~ digest ~ ' set tblproperties (' ~ property ~ ')') %}
        {% endif %}
        {{ return(none) }}
    {% endif %}
    {#-- the batch committed, the digest not yet: the next run compares every record --#}
    {% do dbt_merge._failpoint('entity_merge.before_digest') %}
    {#-- the snapshot the compaction's check read, where it did not compact --#}
    {% set snapshot = current if current is not none else dbt_merge._table_version(target, table_format) %}
    {% do dbt_merge._execute(
        'create or replace table ' ~ digest ~ ' using ' ~ table_format ~ ' tblproperties (' ~ property ~ ') as\n'
        ~ 'select dataset_offset, bucket, records, digest, '
        ~ dbt_merge._entity_digest_buckets() ~ ' as buckets, '
        ~ dbt_merge._sql_string(snapshot) ~ ' as edges_snapshot\nfrom (' ~ source ~ ')'
    ) %}
{% endmacro %}
