{#--
    Scheduled compaction of a merge_on_read upsert table (SPEC §2, "Table types"): the
    data files that have pending row-level deletes are rewritten without their deleted
    rows, and the delete files are dropped. What a reader sees does not change. A dry
    run (the default) only says what it would do, like execute_auto_merge:

        dbt run-operation dbt_merge.execute_upsert_compaction --args '{model: orders}'
        dbt run-operation dbt_merge.execute_upsert_compaction --args '{model: orders, execute: true}'

    By default every data file with a pending delete is compacted; delete_files and
    deleted_ratio restrict it to the files past those thresholds, as the model config
    inline_compaction does at the end of a run. The small files of the partitions it
    rewrites (below 3/4 of the largest file rewritten) are folded in, as a batch's new
    rows would otherwise stay in a small file of their own; a partition without a file
    past the thresholds is never touched. Each compaction appends a JOIN event
    (old files -> new files) to <schema>.auto_merge_provenance, the events table of the
    auto-merge family, and moves the model's own provenance (provenance=true) past the
    compaction's snapshot, which changed no row. A compaction that stopped between its
    rewrite and its event is recorded by the next one, before it compacts
    (_upsert_compaction_record_missed). Iceberg, and Delta on the spark_session
    adapter (REORG TABLE ... APPLY (PURGE)).
--#}
{% macro execute_upsert_compaction(model, execute=false, delete_files=none, deleted_ratio=none) %}
    {{ return(adapter.dispatch('execute_upsert_compaction', 'dbt_merge')(model, execute, delete_files, deleted_ratio)) }}
{% endmacro %}


{% macro default__execute_upsert_compaction(model, execute, delete_files, deleted_ratio) %}
    {#-- `execute` here is this macro's flag, which hides dbt's own: an empty result
         from run_query is how this notices that dbt is only parsing. --#}
    {% if model is string %}
        {% set target = ref(model) %}
    {% elif model is mapping or model is none %}
        {% set msg -%}
            Macro execute_upsert_compaction expected a model's name or a Relation but received the value: {{ model }}
        {%- endset %}
        {% do exceptions.raise_compiler_error(msg) %}
    {% else %}
        {% set target = model %}
    {% endif %}
    {% set found = run_query('describe table extended ' ~ target) %}
    {% if found is none or found is undefined %}
        {{ return({}) }}
    {% endif %}
    {% set provider = {'name': 'iceberg'} %}
    {% for row in found.rows if (row[0] | string).strip().lower() == 'provider' %}
        {% do provider.update({'name': (row[1] | string).strip().lower()}) %}
    {% endfor %}
    {% if provider.name not in ['iceberg', 'delta'] or (provider.name == 'delta' and adapter.type() != 'spark_session') %}
        {% set msg -%}
            dbt_merge.execute_upsert_compaction of {{ target }}, setting 'file_format': the table's provider is {{ provider.name }}{{ ' on the ' ~ adapter.type() ~ ' adapter' if provider.name == 'delta' }}. Compaction reads Iceberg's metadata tables (<table>.position_deletes) and runs Iceberg's rewrite_data_files, or reads a Delta table's files through the spark_session adapter and runs REORG TABLE ... APPLY (PURGE); elsewhere on Delta, use REORG TABLE {{ target }} APPLY (PURGE) or OPTIMIZE. Nothing was changed
        {%- endset %}
        {% do exceptions.raise_compiler_error(msg) %}
    {% endif %}
    {% set thresholds = dbt_merge._upsert_compaction_thresholds(
        'execute_upsert_compaction',
        {'delete_files': 1 if delete_files is none and deleted_ratio is none else delete_files, 'deleted_ratio': deleted_ratio}) %}
    {% set outcome = dbt_merge._compact_upsert_table(target, thresholds, execute, provider.name) %}
    {% if outcome.status == 'planned' %}
        {% do log('upsert compaction dry run of ' ~ target ~ ': ' ~ outcome.files_before ~ ' data file(s) with ' ~ outcome.delete_files ~ ' delete file(s) and ' ~ outcome.deleted_rows ~ ' deleted row(s) would be rewritten (' ~ outcome.small_files ~ ' of them small files of the same partitions, folded in); nothing was changed. Run it with' ~ " --args '{model: " ~ target.identifier ~ ", execute: true}'", info=true) %}
    {% endif %}
    {{ return(outcome) }}
{% endmacro %}


{#-- Checked compaction thresholds ({delete_files, deleted_ratio}, each optional, not
     both none): `caller` names the config or macro in errors. --#}
{% macro _upsert_compaction_thresholds(caller_name, thresholds) %}
    {% set prefix = ('dbt_merge upsert in model ' ~ model.name ~ ", config 'inline_compaction': ") if caller_name == 'inline_compaction' else ('Macro ' ~ caller_name ~ ': ') %}
    {% if thresholds is not mapping %}
        {% do exceptions.raise_compiler_error(prefix ~ 'expected a dict with delete_files and/or deleted_ratio but received the value: ' ~ thresholds) %}
    {% endif %}
    {% set unknown = thresholds.keys() | reject('in', ['delete_files', 'deleted_ratio']) | list %}
    {% if unknown %}
        {% do exceptions.raise_compiler_error(prefix ~ 'Cannot use options [' ~ (unknown | join(', ')) ~ '], they are not supported by ' ~ caller_name ~ '. Supported: delete_files, deleted_ratio') %}
    {% endif %}
    {% set delete_files = thresholds.get('delete_files') %}
    {% set deleted_ratio = thresholds.get('deleted_ratio') %}
    {% if delete_files is none and deleted_ratio is none %}
        {% do exceptions.raise_compiler_error(prefix ~ 'set delete_files (delete files per data file) or deleted_ratio (share of a data file\'s rows deleted), or both') %}
    {% endif %}
    {% if delete_files is not none and (delete_files is not number or delete_files is boolean or delete_files != delete_files | int or delete_files < 1) %}
        {% do exceptions.raise_compiler_error(prefix ~ "'delete_files' is set to " ~ delete_files ~ ' but must be a whole number > 0') %}
    {% endif %}
    {% if deleted_ratio is not none and (deleted_ratio is not number or deleted_ratio is boolean or deleted_ratio <= 0 or deleted_ratio > 1) %}
        {% do exceptions.raise_compiler_error(prefix ~ "'deleted_ratio' is set to " ~ deleted_ratio ~ ' but must be > 0 and <= 1') %}
    {% endif %}
    {{ return({'delete_files': delete_files | int if delete_files is not none else none, 'deleted_ratio': deleted_ratio}) }}
{% endmacro %}


{#-- The live data files of an Iceberg table whose pending position deletes pass the
     thresholds: file_path, record_count, file_size_in_bytes, delete_files,
     deleted_rows. Iceberg's rule (rewrite_data_files' delete-file-threshold and
     delete-ratio-threshold): a file qualifies with at least delete_files delete files,
     or at least deleted_ratio of its rows deleted; deleted_ratio cannot be above 1, so
     a file whose rows are all deleted always qualifies. --#}
{% macro _upsert_pending_deletes_sql(relation, thresholds) %}
    {%- set conditions = ['pending.deleted_rows >= data.record_count'] %}
    {%- if thresholds.delete_files is not none %}
        {%- do conditions.append('pending.delete_files >= ' ~ thresholds.delete_files) %}
    {%- endif %}
    {%- if thresholds.deleted_ratio is not none %}
        {%- do conditions.append('pending.deleted_rows >= ' ~ thresholds.deleted_ratio ~ ' * data.record_count') %}
    {%- endif %}
select
    data.file_path,
    data.record_count,
    data.file_size_in_bytes,
    pending.delete_files,
    pending.deleted_rows
from (
    select
        file_path,
        count(distinct delete_file_path) as delete_files,
        count(*) as deleted_rows
    from {{ relation }}.position_deletes
    group by file_path
) as pending
join {{ relation }}.data_files as data
    on data.file_path = pending.file_path
where {{ conditions | join(' or ') }}
order by data.file_path
{%- endmacro %}


{#-- Per partition (spec and values; one for an unpartitioned table) that holds a file
     past the thresholds or more than one small file: pending_files (the files of
     pending_paths, past the thresholds, as _upsert_pending_deletes_sql found them),
     small_files (the others below min_file_size), small_bytes and largest_small (the
     largest of them). A compaction folds the small files of the partitions it rewrites
     into the new files, as Iceberg's rewrite_data_files does by default
     (min-file-size-bytes, 3/4 of the target) and as Hudi routes a batch's inserts into
     small file groups: a batch's new rows are not left behind in a small file of their
     own. `partitioned`: whether the table's data_files has a partition column. --#}
{% macro _upsert_small_files_sql(relation, pending_paths, min_file_size, partitioned) %}
    {%- set quoted = [] %}
    {%- for path in pending_paths %}{% do quoted.append(dbt_merge._sql_string(path)) %}{% endfor %}
with files as (
    select
        {{ 'to_json(struct(spec_id, partition))' if partitioned else "''" }} as part,
        file_path in ({{ quoted | join(', ') }}) as is_pending,
        file_size_in_bytes
    from {{ relation }}.data_files
),

sized as (
    select part, is_pending, not is_pending and file_size_in_bytes < {{ min_file_size | int }} as is_small, file_size_in_bytes
    from files
)
select
    part,
    count_if(is_pending) as pending_files,
    count_if(is_small) as small_files,
    coalesce(sum(case when is_small then file_size_in_bytes end), 0) as small_bytes,
    coalesce(max(case when is_small then file_size_in_bytes end), 0) as largest_small
from sized
group by part
having count_if(is_pending) > 0 or count_if(is_small) > 1
{%- endmacro %}


{#-- rewrite_data_files restricted to the files past the thresholds: the size rules
     are switched off (min-file-size-bytes 0 unless thresholds.min_file_size,
     max-file-size-bytes the largest long, min-input-files the largest int) so only
     delete-file-threshold and delete-ratio-threshold select files
     (apache/iceberg docs/docs/spark-procedures.md, rewrite_data_files). With
     thresholds.target_file_size (the largest file selected), the new files are no
     larger than the files they replace, as Hudi compacts each file group into its own
     new base file: the files rewritten together are not folded into one big file that
     a single task then has to read. thresholds.min_file_size lets the files below it
     join the rewrite (see _upsert_small_files_sql). --#}
{% macro get_upsert_compaction_sql(relation, thresholds) %}
    {{ return(adapter.dispatch('get_upsert_compaction_sql', 'dbt_merge')(relation, thresholds)) }}
{% endmacro %}


{% macro default__get_upsert_compaction_sql(relation, thresholds) %}
    {%- set table = relation.schema ~ '.' ~ relation.identifier -%}
    call spark_catalog.system.rewrite_data_files(
        table => {{ dbt_merge._sql_string(table) }},
        options => map(
            'delete-file-threshold', '{{ thresholds.delete_files if thresholds.delete_files is not none else 2147483647 }}',
            'delete-ratio-threshold', '{{ thresholds.deleted_ratio if thresholds.deleted_ratio is not none else 1.0 }}',
            'min-file-size-bytes', '{{ thresholds.get('min_file_size') or 0 }}',
            'max-file-size-bytes', '9223372036854775807',
            'min-input-files', '2147483647',
            {%- if thresholds.get('target_file_size') %}
            'target-file-size-bytes', '{{ thresholds.target_file_size | int }}',
            {%- endif %}
            'remove-dangling-deletes', 'true'
        )
    )
{%- endmacro %}


{#-- Compacts (or, without execute, plans) the files past the thresholds; returns what
     happened as a dict (status nothing_pending, planned or compacted). --#}
{% macro _compact_upsert_table(target, thresholds, execute, file_format='iceberg') %}
    {% if file_format == 'delta' %}
        {{ return(dbt_merge._compact_upsert_delta_table(target, thresholds, execute)) }}
    {% endif %}
    {% if execute %}
        {% do dbt_merge._upsert_compaction_record_missed(target, 'iceberg') %}
    {% endif %}
    {% set pending = run_query(dbt_merge._upsert_pending_deletes_sql(target, thresholds)).rows %}
    {% set outcome = dbt_merge._upsert_compaction_outcome(target, thresholds, pending, pending | sum(attribute='delete_files')) %}
    {% if outcome.status == 'nothing_pending' %}
        {{ return(outcome) }}
    {% endif %}
    {% set options = dbt_merge._upsert_compaction_sizes(target, pending) %}
    {% do outcome.update({'small_files': options.small_files, 'files_before': (pending | length) + options.small_files}) %}
    {% do options.update(thresholds) %}
    {% set call_sql = dbt_merge.get_upsert_compaction_sql(target, options) %}
    {% if not execute %}
        {% do log('upsert compaction dry run: would run: ' ~ call_sql, info=true) %}
        {% do outcome.update({'status': 'planned'}) %}
        {{ return(outcome) }}
    {% endif %}

    {#-- 1. rewrite, then drop the delete files that now point at no live data file --#}
    {% set before_snapshot = dbt_merge._table_version(target, 'iceberg') %}
    {% set before = dbt_merge._auto_merge_selected_files(target, 'true') %}
    {% set result = run_query(call_sql).rows[0] %}
    {% set rewritten = dbt_merge._table_version(target, 'iceberg') %}
    {% set dangling = run_query('select count(*) from ' ~ target ~ '.position_deletes as deletes left anti join ' ~ target ~ '.data_files as data on deletes.file_path = data.file_path').rows[0][0] %}
    {% if dangling > 0 %}
        {% do dbt_merge._execute("call spark_catalog.system.rewrite_position_delete_files(table => " ~ dbt_merge._sql_string(target.schema ~ '.' ~ target.identifier) ~ ", options => map('rewrite-all', 'true'))") %}
    {% endif %}
    {% set after = dbt_merge._auto_merge_selected_files(target, 'true') %}
    {% set parents = before | reject('in', after) | list %}
    {% set children = after | reject('in', before) | list %}
    {% set snapshot = dbt_merge._table_version(target, 'iceberg') if dangling > 0 else rewritten %}
    {% do dbt_merge._failpoint('upsert.before_compaction_event') %}

    {#-- 2. provenance: a JOIN event (old files -> new files) at the snapshot that
         replaced the data files; the model's own events move past snapshots that only
         compacted --#}
    {% if parents %}
        {% do dbt_merge._upsert_compaction_event(target, parents, children, result.rewritten_bytes_count, rewritten, 'iceberg') %}
    {% endif %}
    {% do dbt_merge._upsert_provenance_skip_compaction(target, before_snapshot, snapshot) %}
    {% do log('upsert compaction of ' ~ target ~ ': rewrote ' ~ (parents | length) ~ ' data file(s) with ' ~ outcome.delete_files ~ ' delete file(s) into ' ~ (children | length) ~ ' in snapshot ' ~ rewritten, info=true) %}
    {% do outcome.update({'status': 'compacted', 'files_before': parents | length, 'files_after': children | length, 'snapshot_id': rewritten}) %}
    {{ return(outcome) }}
{% endmacro %}



{#-- What a compaction of the files `pending` (rows with deleted_rows) would do, as
     the dict a compaction returns; with no file pending, status nothing_pending and a
     log line. --#}
{% macro _upsert_compaction_outcome(target, thresholds, pending, delete_files) %}
    {% set outcome = {
        'table': target | string,
        'files_before': pending | length,
        'small_files': 0,
        'delete_files': delete_files,
        'deleted_rows': pending | sum(attribute='deleted_rows'),
        'files_after': none,
    } %}
    {% if pending | length == 0 %}
        {% do log('upsert compaction of ' ~ target ~ ': no data file has deleted rows past the thresholds ' ~ tojson(thresholds), info=true) %}
        {% do outcome.update({'status': 'nothing_pending'}) %}
    {% endif %}
    {{ return(outcome) }}
{% endmacro %}


{#-- Compaction of a Delta table (merge-on-read is deletion vectors there), through
     the spark_session adapter, which reads the table's files and what each one's
     deletion vector marks (Delta has no SQL view of them). A file qualifies as on
     Iceberg: at least delete_files deletion vectors (a Delta file has one at most, so
     delete_files 1 takes every file with deleted rows), at least deleted_ratio of its
     rows deleted, or all of them. REORG TABLE ... APPLY (PURGE) rewrites the files with
     deletion vectors of the partitions it names (of the whole table when it is not
     partitioned): a file below the thresholds beside one past them is rewritten too,
     and the log says how many. One commit (operation REORG, no data change); a JOIN
     event of the files it replaced and wrote, as on Iceberg. --#}
{% macro _compact_upsert_delta_table(target, thresholds, execute) %}
    {% set table = target.schema ~ '.' ~ target.identifier %}
    {% if execute %}
        {% do dbt_merge._upsert_compaction_record_missed(target, 'delta') %}
    {% endif %}
    {% set before = adapter.delta_file_deletes(table) %}
    {% set marked = before | selectattr('deleted_rows', 'gt', 0) | list %}
    {% set pending = [] %}
    {% for file in marked %}
        {% set records = file.record_count %}
        {% if records is none
            or (thresholds.delete_files is not none and thresholds.delete_files <= 1)
            or (thresholds.deleted_ratio is not none and file.deleted_rows >= thresholds.deleted_ratio * records)
            or file.deleted_rows >= records %}
            {% do pending.append(file) %}
        {% endif %}
    {% endfor %}
    {% set outcome = dbt_merge._upsert_compaction_outcome(target, thresholds, pending, pending | length) %}
    {% if outcome.status == 'nothing_pending' %}
        {{ return(outcome) }}
    {% endif %}
    {% set partitions = [] %}
    {% for file in pending if file.partition is not none and file.partition not in partitions %}
        {% do partitions.append(file.partition) %}
    {% endfor %}
    {% set purged = marked | selectattr('partition', 'in', partitions) | list if partitions else marked %}
    {% set reorg_sql %}
        reorg table {{ target }}
        {%- if partitions %}
        where {% for values in partitions %}({% for column, value in values.items() %}`{{ column }}` {{ 'is null' if value is none else '= ' ~ dbt_merge._sql_string(value) }}{{ ' and ' if not loop.last }}{% endfor %}){{ ' or ' if not loop.last }}{% endfor %}
        {%- endif %}
        apply (purge)
    {%- endset %}
    {% set beside = (purged | length) - (pending | length) %}
    {% if beside > 0 %}
        {% do log('upsert compaction of ' ~ target ~ ': REORG ... APPLY (PURGE) rewrites every file with deleted rows of a partition it names: ' ~ beside ~ ' file(s) below the thresholds are rewritten too', info=true) %}
    {% endif %}
    {% if not execute %}
        {% do log('upsert compaction dry run: would run: ' ~ reorg_sql, info=true) %}
        {% do outcome.update({'status': 'planned', 'files_before': purged | length}) %}
        {{ return(outcome) }}
    {% endif %}

    {% set before_version = dbt_merge._table_version(target, 'delta') %}
    {% do adapter.execute_with_commit_metadata(reorg_sql, dbt_merge._upsert_compaction_marker(target)) %}
    {% set after = adapter.delta_file_deletes(table) %}
    {% set before_paths = before | map(attribute='file_path') | list %}
    {% set after_paths = after | map(attribute='file_path') | list %}
    {% set replaced = before | rejectattr('file_path', 'in', after_paths) | list %}
    {% set parents = replaced | map(attribute='file_path') | list %}
    {% set children = after_paths | reject('in', before_paths) | list %}
    {% set version = dbt_merge._table_version(target, 'delta') %}
    {% do dbt_merge._failpoint('upsert.before_compaction_event') %}
    {% if parents %}
        {% do dbt_merge._upsert_compaction_event(target, parents, children, replaced | sum(attribute='size'), version, 'delta') %}
    {% endif %}
    {% do dbt_merge._upsert_provenance_skip_compaction(target, before_version, version, 'delta') %}
    {% do log('upsert compaction of ' ~ target ~ ': rewrote ' ~ (parents | length) ~ ' data file(s) with ' ~ (replaced | sum(attribute='deleted_rows')) ~ ' deleted row(s) into ' ~ (children | length) ~ ' in version ' ~ version, info=true) %}
    {% do outcome.update({'status': 'compacted', 'files_before': parents | length, 'delete_files': replaced | selectattr('deleted_rows', 'gt', 0) | list | length, 'deleted_rows': replaced | sum(attribute='deleted_rows'), 'files_after': children | length, 'snapshot_id': version}) %}
    {{ return(outcome) }}
{% endmacro %}


{#-- Appends a compaction's JOIN event (old files -> new files, at the table version
     that replaced them; no merge) to <schema>.auto_merge_provenance, created if need
     be, unless the table has one at that version: auto-merge's own recording
     (_auto_merge_record_event). --#}
{% macro _upsert_compaction_event(target, parents, children, rewritten_bytes, version, file_format) %}
    {% set no_merge = {'merge_index': none, 'merge_min_key': none, 'merge_max_key': none} %}
    {% do dbt_merge._auto_merge_record_event(target, target.schema ~ '.' ~ target.identifier, no_merge, parents, children, {'rewritten_bytes_count': rewritten_bytes or 0}, version, file_format) %}
{% endmacro %}


{#-- What a compaction's Delta commit (its REORG) carries as its userMetadata. --#}
{% macro _upsert_compaction_marker(target) %}
    {{- return('dbt_merge upsert compaction of ' ~ target.schema ~ '.' ~ target.identifier) -}}
{% endmacro %}


{#-- A compaction that died after its rewrite committed and before its JOIN event
     (failure point upsert.before_compaction_event) left a rewrite without provenance.
     Before it compacts, each compaction records the rewrites of the table that have no
     event yet, each once, with its old and new files read from the table's history:

     - Iceberg: every snapshot of the table's history that replaced data files (a
       `replace` with deleted-data-files in its summary: rewrite_data_files, whether
       this package's or another job's) and whose snapshot id no event of the table
       names; its files from all_entries (status 2 removed, 1 added). A rewrite whose
       removed files are all parents of an event already (an event recorded at a
       later snapshot) is not recorded again.
     - Delta: every REORG commit whose userMetadata is this package's compaction
       marker (_upsert_compaction_marker) and whose version no event names; its files
       from the commit's remove and add actions.

     Then the model's provenance moves past the recorded rewrites when nothing else
     was committed since its recorded version, as after a compaction that did not die.
     A rewrite that history no longer holds (snapshots expired, Delta log cleaned up)
     is not found. Returns the versions recorded. --#}
{% macro _upsert_compaction_record_missed(target, file_format) %}
    {% set table = target.schema ~ '.' ~ target.identifier %}
    {% set rewrites = [] %}
    {% if file_format == 'delta' %}
        {% set marker = dbt_merge._upsert_compaction_marker(target) %}
        {#-- describe history lists the newest first: the rewrites go oldest first --#}
        {% for row in run_query('describe history ' ~ target).rows | reverse if row['operation'] == 'REORG' and row['userMetadata'] == marker %}
            {% do rewrites.append({'version': row['version'] | string, 'parent': (row['version'] - 1) | string}) %}
        {% endfor %}
    {% else %}
        {% set found = run_query("select cast(snapshot_id as string), cast(parent_id as string), cast(coalesce(summary['removed-files-size'], '0') as bigint) from " ~ target ~ ".snapshots where operation = 'replace' and cast(coalesce(summary['deleted-data-files'], '0') as int) > 0 order by committed_at").rows %}
        {% for row in found %}
            {% do rewrites.append({'version': row[0], 'parent': row[1], 'bytes': row[2]}) %}
        {% endfor %}
    {% endif %}
    {% if not rewrites %}
        {{ return([]) }}
    {% endif %}
    {% set events = dbt_merge.auto_merge_provenance(target) %}
    {% set recorded = [] %}
    {% if load_relation(events) is not none %}
        {% for row in run_query('select distinct cast(snapshot_id as string) from ' ~ events ~ ' where table_name = ' ~ dbt_merge._sql_string(table)).rows %}
            {% do recorded.append(row[0]) %}
        {% endfor %}
    {% endif %}
    {% set missed = rewrites | rejectattr('version', 'in', recorded) | list %}
    {% if not missed %}
        {{ return([]) }}
    {% endif %}
    {% set files = {} %}
    {% if file_format == 'delta' %}
        {% for rewrite in missed %}
            {% set commit = adapter.delta_commit_actions(table, rewrite.version | int) %}
            {% do files.update({rewrite.version: {'parents': commit['removed'], 'children': commit['added']}}) %}
            {% do rewrite.update({'bytes': commit['removed_bytes']}) %}
        {% endfor %}
    {% else %}
        {% for rewrite in missed %}{% do files.update({rewrite.version: {'parents': [], 'children': []}}) %}{% endfor %}
        {% set entries = run_query('select distinct cast(snapshot_id as string), status, data_file.file_path from ' ~ target ~ '.all_entries where data_file.content = 0 and status in (1, 2) and snapshot_id in (' ~ (missed | map(attribute='version') | join(', ')) ~ ') order by 3').rows %}
        {% for row in entries %}
            {% do files[row[0]]['children' if row[1] == 1 else 'parents'].append(row[2]) %}
        {% endfor %}
        {% if recorded %}
            {#-- the parents of the table's events: a rewrite recorded at a later
                 snapshot (its delete files rewritten after it) is not recorded twice --#}
            {% set known = run_query('select distinct parent from ' ~ events ~ ' lateral view explode(parent_ids) as parent where table_name = ' ~ dbt_merge._sql_string(table)).columns[0].values() | list %}
            {% set unknown = [] %}
            {% for rewrite in missed if files[rewrite.version].parents | reject('in', known) | list %}
                {% do unknown.append(rewrite) %}
            {% endfor %}
            {% set missed = unknown %}
        {% endif %}
    {% endif %}
    {% set done = [] %}
    {% for rewrite in missed if files[rewrite.version].parents %}
        {% do dbt_merge._upsert_compaction_event(target, files[rewrite.version].parents, files[rewrite.version].children, rewrite.bytes, rewrite.version, file_format) %}
        {% do log('upsert compaction of ' ~ target ~ ': the rewrite of ' ~ files[rewrite.version].parents | length ~ ' data file(s) in ' ~ ('version ' if file_format == 'delta' else 'snapshot ') ~ rewrite.version ~ ' has no JOIN event (a compaction stopped before recording it); it is recorded now', info=true) %}
        {% do done.append(rewrite.version) %}
    {% endfor %}
    {% if done %}
        {% do dbt_merge._upsert_provenance_skip_compaction(target, missed[0].parent, dbt_merge._table_version(target, file_format), file_format) %}
    {% endif %}
    {{ return(done) }}
{% endmacro %}


{#-- The file sizes of a compaction of `pending` (the files past the thresholds).
     min_file_size is 3/4 of the largest of them: the other files of their partitions
     below it (small_files of them) are folded in. target_file_size is the largest
     pending file plus the largest small file plus the table's delete files (a read
     split weighs a data file with its delete files), capped at the table's
     write.target-file-size-bytes (Iceberg's default 512 MB) but never below the
     largest pending file: each rewritten file has room for a small one
     (rewrite_data_files reads splits of at least the target size, one task and one
     new file each), and two pending files share one only where deletes outweigh
     their rows. Nothing is folded when the size rule would also rewrite a partition
     without a pending file (more than one small file there, together above the
     target), which compaction must not touch. --#}
{% macro _upsert_compaction_sizes(target, pending) %}
    {% set largest = pending | map(attribute='file_size_in_bytes') | max | int %}
    {% set min_size = largest * 3 // 4 %}
    {% set partitioned = 'partition' in run_query('select * from ' ~ target ~ '.data_files limit 0').column_names %}
    {% set parts = run_query(dbt_merge._upsert_small_files_sql(target, pending | map(attribute='file_path') | list, min_size, partitioned)).rows %}
    {% set folding = parts | selectattr('pending_files', 'gt', 0) | list %}
    {% set configured = run_query("show tblproperties " ~ target ~ " ('write.target-file-size-bytes')").rows[0][1] | string %}
    {% set cap = configured | int if configured.isdigit() else 536870912 %}
    {% set delete_bytes = run_query('select coalesce(sum(file_size_in_bytes), 0) from ' ~ target ~ '.delete_files').rows[0][0] | int %}
    {% set target_size = [largest, [largest + (folding | map(attribute='largest_small') | max | int) + delete_bytes, cap] | min] | max %}
    {% set untouched = parts | selectattr('pending_files', 'equalto', 0) | selectattr('small_bytes', 'gt', target_size) | list %}
    {% if untouched %}
        {% do log('upsert compaction of ' ~ target ~ ': small files are not folded in, the size rule would also rewrite ' ~ (untouched | length) ~ ' partition(s) without pending deletes', info=true) %}
        {{ return({'target_file_size': largest, 'min_file_size': 0, 'small_files': 0}) }}
    {% endif %}
    {% set small = folding | sum(attribute='small_files') | int %}
    {{ return({'target_file_size': target_size if small else largest, 'min_file_size': min_size if small else 0, 'small_files': small}) }}
{% endmacro %}


{#-- A model with provenance=true records the diff between the last recorded version
     and the current one when they differ. Compaction snapshots change no row: when the
     recorded version is the one before the compaction and every snapshot after it is
     a rewrite ('replace'), the recorded version moves to the compaction's snapshot, so
     the next run does not diff the whole table for nothing. --#}
{% macro _upsert_provenance_skip_compaction(target, before_snapshot, snapshot, file_format='iceberg') %}
    {% set events = dbt_merge._upsert_provenance_relation(target) %}
    {% if before_snapshot is none or snapshot == before_snapshot or load_relation(events) is none %}
        {{ return(none) }}
    {% endif %}
    {% if dbt_merge._upsert_recorded_version(target, events, file_format) != before_snapshot %}
        {{ return(none) }}
    {% endif %}
    {% if file_format == 'delta' %}
        {#-- Delta's versions are numbered: every one after the recorded version is a
             rewrite (REORG or OPTIMIZE, no data change) --#}
        {% set later = run_query('describe history ' ~ target).rows | selectattr('version', 'gt', before_snapshot | int) | list %}
        {% if later and later | rejectattr('operation', 'in', ['REORG', 'OPTIMIZE']) | list | length == 0 %}
            {% do dbt_merge._set_upsert_recorded_version(events, snapshot) %}
        {% endif %}
        {{ return(none) }}
    {% endif %}
    {% set snapshots = {} %}
    {% for row in run_query('select cast(snapshot_id as string), cast(parent_id as string), operation from ' ~ target ~ '.snapshots').rows %}
        {% do snapshots.update({row[0]: {'parent': row[1], 'operation': row[2]}}) %}
    {% endfor %}
    {% set walk = {'at': snapshot, 'only_rewrites': true} %}
    {% for _ in range(snapshots | length) if walk.at != before_snapshot and walk.only_rewrites %}
        {% set current = snapshots.get(walk.at) %}
        {% if current is none or current.operation != 'replace' %}
            {% do walk.update({'only_rewrites': false}) %}
        {% else %}
            {% do walk.update({'at': current.parent}) %}
        {% endif %}
    {% endfor %}
    {% if walk.only_rewrites and walk.at == before_snapshot %}
        {% do dbt_merge._set_upsert_recorded_version(events, snapshot) %}
    {% endif %}
{% endmacro %}
