{#--
    incremental_strategy='entity_state': how a change-following entity merge writes its
    state tables (the edges model and the components model). A batch holds the rows
    that change, each with a boolean column `$drop`: a row whose key is stored
    replaces it, a `$drop` row deletes it. A batch may also say of each row whether its
    key is stored (boolean column `$stored`), which spares its placeholders a read of
    the table. Keys compare null-safe (a deleted record's row has a null dst). One
    MERGE, so one atomic commit; a batch with more keys than
    _entity_state_filter_limit() and at most _entity_state_broadcast_limit() rows writes
    its new keys as placeholders first, then one MERGE (two commits,
    _entity_state_placeholders_sql). On Iceberg those two commits go to a branch made
    at the snapshot the run read, and the table's main branch is fast-forwarded to it
    in one more (_entity_state_branch, _entity_state_publish): a run that dies between
    them leaves main as it was, and a run that another writer overtook fails without
    writing (an append alone is not checked against other commits). A batch in one
    MERGE on Iceberg is checked first the same way (_entity_state_check_base): the MERGE
    is validated by Iceberg only against commits after the snapshot it is planned on,
    and the batch may have been computed from an earlier one. On Iceberg, a components
    batch with more keys than the filter limit and more rows than
    _entity_state_rewrite_limit() rewrites the table instead, on such a branch (one
    commit there, then the fast-forward: _entity_state_rewrite_sql). A batch with a
    column `$whole` (a run that rebuilt the state: every row of the table, none to drop)
    replaces the table the same way, without reading it (_entity_state_replace_sql).

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
    {%- set unique_key = arg_dict.get('unique_key') %}
    {%- set columns = adapter.get_columns_in_relation(target) | map(attribute='name') | list %}
    {%- set keys = dbt_merge._entity_state_keys(target, unique_key, columns) %}
    {%- set state_name = 'edges' if keys[0] == 'src' else 'components' %}
    {%- set iceberg = config.get('file_format') == 'iceberg' %}
    {#-- checked before anything is written; used after the commit --#}
    {%- do dbt_merge._entity_state_compaction() %}
    {%- set source_columns = adapter.get_columns_in_relation(source) | map(attribute='name') | map('lower') | list %}
    {%- if '$whole' in source_columns %}
        {#-- the whole state, rebuilt: it replaces the table (even when empty) --#}
        {%- if not iceberg %}
{{ dbt_merge._entity_state_replace_sql(target, source, columns) }}
        {%- else %}
            {%- set branch = dbt_merge._entity_state_branch(target, dbt_merge._entity_state_read_base(target, source, source_columns)) %}
            {%- do dbt_merge._execute(dbt_merge._entity_state_replace_sql(target ~ '.branch_' ~ branch.name, source, columns)) %}
            {%- do dbt_merge._failpoint('entity_merge.before_' ~ state_name ~ '_publish') %}
            {%- do dbt_merge._entity_state_publish(target, branch) %}
select 'dbt_merge: the table was replaced by the rebuilt state on a branch and published' as entity_state
        {%- endif %}
    {%- elif run_query('select 1 from ' ~ source ~ ' limit 1').rows | length == 0 %}
select 'dbt_merge: an empty batch, nothing to write' as entity_state
    {%- else %}
        {%- set filter = dbt_merge._entity_state_target_filter(source, keys, unique_key) %}
        {#-- a batch Spark cannot broadcast would be shuffled with the target anyway --#}
        {%- set rows = run_query('select count(*) from ' ~ source).rows[0][0] if not unique_key and not filter and keys[0] in ['src', 'node'] else none %}
        {#-- a large components batch rewrites the table (_entity_state_rewrite_sql) --#}
        {%- set rewrite = iceberg and rows is not none and state_name == 'components' and rows > dbt_merge._entity_state_rewrite_limit() %}
        {%- set placeholders = not rewrite and rows is not none and rows <= dbt_merge._entity_state_broadcast_limit() %}
        {#-- the snapshot the batch was computed from, when the model said --#}
        {%- set base = dbt_merge._entity_state_read_base(target, source, source_columns) if iceberg else none %}
        {%- set branch = none %}
        {%- set written = target %}
        {%- if rewrite or (placeholders and iceberg) %}
            {#-- on a branch of the run's own: the rewrite (one commit), or the
                 placeholders and the MERGE (two) --#}
            {%- set branch = dbt_merge._entity_state_branch(target, base) %}
            {%- set written = target ~ '.branch_' ~ branch.name %}
        {%- endif %}
        {%- if placeholders %}
            {#-- a large batch of a state table: its new keys first, as placeholders, so
                 that the MERGE only updates and deletes --#}
            {%- do dbt_merge._execute(dbt_merge._entity_state_placeholders_sql(written, source, keys, columns, '$stored' in source_columns)) %}
            {%- do dbt_merge._entity_state_raise_broadcast(rows) %}
            {%- do dbt_merge._failpoint('entity_merge.before_' ~ state_name ~ '_merge') %}
        {%- endif %}
        {%- set merge -%}
merge into {{ written }} as target
using {{ source }} as source
on {% for key in keys %}target.{{ adapter.quote(key) }} <=> source.{{ adapter.quote(key) }}{{ ' and ' if not loop.last }}{% endfor %}
    {{- filter }}
when matched and source.`$drop` then delete
when matched then update set
    {%- for column in columns %}
    target.{{ adapter.quote(column) }} = source.{{ adapter.quote(column) }}{{ ',' if not loop.last }}
    {%- endfor %}
        {%- if not placeholders %}
when not matched and not source.`$drop` then insert ({% for column in columns %}{{ adapter.quote(column) }}{{ ', ' if not loop.last }}{% endfor %})
    values ({% for column in columns %}source.{{ adapter.quote(column) }}{{ ', ' if not loop.last }}{% endfor %})
        {%- endif %}
        {%- endset %}
        {%- if branch is none %}
            {#-- one MERGE: Iceberg validates it against commits after the snapshot it is
                 planned on, which is where the table is now; the batch was computed
                 from base --#}
            {%- if base is not none %}
                {%- do dbt_merge._entity_state_check_base(target, base) %}
            {%- endif %}
{{ merge }}
        {%- else %}
            {%- do dbt_merge._execute(dbt_merge._entity_state_rewrite_sql(written, source, keys, columns, rows <= 1000000) if rewrite else merge) %}
            {%- do dbt_merge._failpoint('entity_merge.before_' ~ state_name ~ '_publish') %}
            {%- do dbt_merge._entity_state_publish(target, branch) %}
select 'dbt_merge: the {{ "table was rewritten" if rewrite else "batch was written" }} on a branch and published' as entity_state
        {%- endif %}
    {%- endif %}
{% endmacro %}


{#-- The session setting that holds the snapshot of state table relation that the
     current run of its model read first (_entity_state_mark_read). --#}
{% macro _entity_state_read_setting(relation) %}
    {{- return('spark.dbt_merge.read_at.' ~ relation.schema ~ '.' ~ relation.identifier) -}}
{% endmacro %}


{#-- Called by a state model on Iceberg before it reads its table (relation): keeps the
     table's current snapshot in the session (_entity_state_read_setting), the snapshot
     its batch is computed from (_entity_state_read_base). --#}
{% macro _entity_state_mark_read(relation) %}
    {%- set snapshot = dbt_merge._table_version(relation, 'iceberg') %}
    {%- if snapshot is not none %}
        {%- do dbt_merge._execute('set ' ~ dbt_merge._entity_state_read_setting(relation) ~ ' = ' ~ snapshot) %}
    {%- endif %}
{% endmacro %}


{#-- The snapshot of the Iceberg state table target that the batch in source (columns
     source_columns) was computed from, as a string: the batch's `$read_at` (the
     components' Python model given its table by name: entity_components' READ_AT), else
     the one the model read first (kept by _entity_state_mark_read: the edges model),
     else none (a components model given a DataFrame). Takes the session setting
     back. --#}
{% macro _entity_state_read_base(target, source, source_columns) %}
    {%- set setting = dbt_merge._entity_state_read_setting(target) %}
    {%- set marked = dbt_merge._session_setting(setting) %}
    {%- if marked is not none %}
        {%- do dbt_merge._execute('reset ' ~ setting) %}
    {%- endif %}
    {%- set read_at = run_query('select max(`$read_at`) from ' ~ source).rows[0][0] if '$read_at' in source_columns else none %}
    {{- return(read_at | string if read_at is not none else marked) -}}
{% endmacro %}


{#-- The branch of this run's batch on the Iceberg state table target: named after the
     dbt invocation, made at base, the snapshot the batch was computed from
     (_entity_state_read_base), or when none is known at the snapshot current now, where
     the state strategy starts (a components model given a DataFrame: a commit of
     another run in the seconds of its Python step is not seen). Branches of this kind
     whose last commit is over a day old are dropped first: a run that died left them.
     Returns {name, base}. --#}
{% macro _entity_state_branch(target, base=none) %}
    {%- set base = base if base is not none else dbt_merge._table_version(target, 'iceberg') %}
    {%- set stale = run_query(
        "select refs.name from " ~ target ~ ".refs as refs join " ~ target ~ ".snapshots as snapshots"
        ~ " on snapshots.snapshot_id = refs.snapshot_id where refs.type = 'BRANCH'"
        ~ " and startswith(refs.name, 'dbt_merge_') and snapshots.committed_at < current_timestamp() - interval 1 day"
    ).rows %}
    {%- for row in stale %}
        {%- do dbt_merge._execute('alter table ' ~ target ~ ' drop branch if exists `' ~ row[0] ~ '`') %}
    {%- endfor %}
    {%- set name = 'dbt_merge_' ~ (invocation_id | replace('-', '_')) %}
    {%- do dbt_merge._execute('alter table ' ~ target ~ ' create or replace branch `' ~ name ~ '` as of version ' ~ base) %}
    {{- return({'name': name, 'base': base | string}) -}}
{% endmacro %}


{#-- Fails the model when the Iceberg state table target's main branch is no longer at
     base, the snapshot its batch was computed from: another writer (another run of the
     same merge) committed meanwhile. branch: the run's branch, dropped first. Nothing
     of the batch is on main then; the next run starts from the other commit. --#}
{% macro _entity_state_check_base(target, base, branch=none) %}
    {%- set main = dbt_merge._table_version(target, 'iceberg') %}
    {%- if main != base %}
        {%- if branch is not none %}
            {%- do dbt_merge._execute('alter table ' ~ target ~ ' drop branch if exists `' ~ branch.name ~ '`') %}
        {%- endif %}
        {%- do exceptions.raise_compiler_error(
            "dbt_merge: model " ~ model.name ~ ", table " ~ target ~ ": another writer committed (snapshot "
            ~ main ~ ") after this run read the table (snapshot " ~ base ~ "), most likely another run of"
            ~ " the same merge; nothing of this run's batch was written. Run the model again (it starts from"
            ~ " the other commit), and run a merge from one job at a time"
        ) %}
    {%- endif %}
{% endmacro %}


{#-- After the batch's commits on its branch (_entity_state_branch): the main branch of
     target fast-forwarded to it, one atomic commit, then the branch dropped; unless
     main is no longer the snapshot the branch started from (_entity_state_check_base
     fails the model). Iceberg's fast-forward refuses the same case if it happens
     between the check and the call. --#}
{% macro _entity_state_publish(target, branch) %}
    {%- do dbt_merge._entity_state_check_base(target, branch.base, branch) %}
    {%- do dbt_merge._execute("call spark_catalog.system.fast_forward(" ~ dbt_merge._sql_string(target | string) ~ ", 'main', " ~ dbt_merge._sql_string(branch.name) ~ ")") %}
    {%- do dbt_merge._execute('alter table ' ~ target ~ ' drop branch if exists `' ~ branch.name ~ '`') %}
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


{#-- A MERGE that inserts joins its target to its source with an outer join that keeps
     every source row, so Spark cannot broadcast the source: it shuffles and sorts the
     whole target (7.7M edges rows for a few thousand changed ones). A condition on
     the target alone is pushed below that join, so the MERGE's condition also lists
     the source's values of the first key: the target is then filtered while it is
     read, and only its matching rows are shuffled. Only for the state tables' own keys
     (src, node), when no source row has a null key (`in` is then exact where the
     condition compares null-safe) and for at most _entity_state_filter_limit() values;
     otherwise nothing is added. Spark writes the list (_sql_string_sql: the literals
     as _sql_string writes them) and returns it in one row: a row per value cost the
     components run of a 0.1% delivery on the 3M benchmark 1.1 s after its query
     (15,000 values made into dbt's result table, then quoted one by one in Jinja). --#}
{% macro _entity_state_target_filter(source, keys, unique_key) %}
    {%- if unique_key or keys[0] not in ['src', 'node'] %}
        {{- return('') -}}
    {%- endif %}
    {%- set limit = dbt_merge._entity_state_filter_limit() %}
    {%- set found = run_query(
        'select count(*), count_if(value is null), array_join(collect_list('
        ~ dbt_merge._sql_string_sql('value') ~ "), ', ')"
        ~ ' from (select distinct ' ~ adapter.quote(keys[0]) ~ ' as value from ' ~ source
        ~ ' limit ' ~ (limit + 1) ~ ')'
    ).rows[0] %}
    {%- if found[0] == 0 or found[0] > limit or found[1] > 0 %}
        {{- return('') -}}
    {%- endif %}
    {{- return('\n    and target.' ~ adapter.quote(keys[0]) ~ ' in (' ~ found[2] ~ ')') -}}
{% endmacro %}


{#-- The most rows of a batch that writes placeholders first, so that its MERGE can
     broadcast it (about Spark's default broadcast threshold of 10 MB of state rows; a
     components batch of 600,000 rows was not broadcast, and its MERGE took longer with
     placeholders): the model's config state_broadcast_limit, else the var
     dbt_merge_state_broadcast_limit, else 200,000. A larger batch is one MERGE that
     shuffles its target. --#}
{% macro _entity_state_broadcast_limit() %}
    {{- return(config.get('state_broadcast_limit', var('dbt_merge_state_broadcast_limit', 200000)) | int) -}}
{% endmacro %}


{#-- The most rows of a components batch written by a MERGE; a larger one (on Iceberg)
     rewrites the table instead (_entity_state_rewrite_sql), on a branch published as a
     batch's MERGE is. Such a MERGE joins the batch to the whole table with a shuffle
     (it is too large to list its keys or to broadcast), and rewriting costs less: on
     the 3M benchmark's 4.6M-row components table, a batch of 236,000 rows took 7.7 s
     to MERGE and 3.6 s to rewrite, one of 944,000 rows 8.6 s and 7.5 s. Not for an
     edges table, whose rows carry the declaration: 11.5 s to MERGE 385,000 rows into
     its 7.7M, 23 s to rewrite. The model's config state_rewrite_limit, else the var
     dbt_merge_state_rewrite_limit, else 200,000 (a batch of more is not broadcast
     either: _entity_state_broadcast_limit). --#}
{% macro _entity_state_rewrite_limit() %}
    {{- return(config.get('state_rewrite_limit', var('dbt_merge_state_rewrite_limit', 200000)) | int) -}}
{% endmacro %}


{#-- The insert overwrite that rewrites the state table target (a branch of it) with the
     batch in source applied: every stored row whose key the batch does not hold, and
     the batch's rows without `$drop`. broadcast: the batch's keys are broadcast to the
     scan of the table (at most a million: some tens of MB of names), else both are
     shuffled. --#}
{% macro _entity_state_rewrite_sql(target, source, keys, columns, broadcast=true) %}
insert overwrite {{ target }}
select {{ '/*+ BROADCAST(batch) */ ' if broadcast }}{% for column in columns %}stored.{{ adapter.quote(column) }}{{ ', ' if not loop.last }}{% endfor %}
from {{ target }} as stored
left anti join (select {% for key in keys %}{{ adapter.quote(key) }}{{ ', ' if not loop.last }}{% endfor %} from {{ source }}) as batch
    on {% for key in keys %}batch.{{ adapter.quote(key) }} <=> stored.{{ adapter.quote(key) }}{{ ' and ' if not loop.last }}{% endfor %}
union all
select {% for column in columns %}{{ adapter.quote(column) }}{{ ', ' if not loop.last }}{% endfor %}
from {{ source }}
where not `$drop`
{%- endmacro %}


{#-- The insert overwrite that replaces the state table target (a branch of it) with
     the rows of source, a rebuilt state (a batch with the column `$whole`). --#}
{% macro _entity_state_replace_sql(target, source, columns) %}
insert overwrite {{ target }}
select {% for column in columns %}{{ adapter.quote(column) }}{{ ', ' if not loop.last }}{% endfor %}
from {{ source }}
where not `$drop`
{%- endmacro %}


{#-- The most values _entity_state_target_filter lists in a MERGE's condition (above
     it, a batch writes placeholders first): the model's config state_filter_limit, else
     the var dbt_merge_state_filter_limit, else 20,000. --#}
{% macro _entity_state_filter_limit() %}
    {{- return(config.get('state_filter_limit', var('dbt_merge_state_filter_limit', 20000)) | int) -}}
{% endmacro %}


{#-- A MERGE without a `when not matched` clause joins its source to its target with an
     inner join, and Spark broadcasts a small source: the target is read once, and none
     of it is shuffled. So a state batch too large for _entity_state_target_filter (and
     small enough to broadcast) is written in two commits: its new keys (a batch row
     whose key the table does not hold) first, as placeholders (the key, every other
     column null, so no `_batch`),
     then a MERGE that only updates and deletes. Readers skip rows without a batch: the
     components read edges that have one, and take a component row without one for a
     node outside the graph. A run that dies between the two commits leaves
     placeholders, which the next run of that model writes over or drops (the edges:
     their digest no longer describes them, so every record is compared; the
     components: they are closed again). The stored keys of the batch are found with a
     broadcast of the batch, not a shuffle; a batch with a column `$stored` (known:
     the model knows whether each row's key is stored, true or false, never null)
     names its new keys itself, and they are appended without reading the table. --#}
{% macro _entity_state_placeholders_sql(target, source, keys, columns, known=false) %}
insert into {{ target }} ({% for column in columns %}{{ adapter.quote(column) }}{{ ', ' if not loop.last }}{% endfor %})
select
    {%- for column in columns %}
    {{ 'source.' ~ adapter.quote(column) if column | lower in keys else 'null' }}{{ ',' if not loop.last }}
    {%- endfor %}
from {{ source }} as source
{%- if known %}
where not source.`$drop` and not source.`$stored`
{%- else %}
left anti join (
    select /*+ BROADCAST(batch) */ {% for key in keys %}stored.{{ adapter.quote(key) }}{{ ', ' if not loop.last }}{% endfor %}
    from {{ target }} as stored
    left semi join {{ source }} as batch
        on {% for key in keys %}batch.{{ adapter.quote(key) }} <=> stored.{{ adapter.quote(key) }}{{ ' and ' if not loop.last }}{% endfor %}
) as stored
    on {% for key in keys %}stored.{{ adapter.quote(key) }} <=> source.{{ adapter.quote(key) }}{{ ' and ' if not loop.last }}{% endfor %}
where not source.`$drop`
{%- endif %}
{%- endmacro %}


{#-- The MERGE of a batch that wrote its placeholders first (updates and deletes only)
     joins its source to the target with an inner join, which Spark broadcasts when it
     estimates the source under spark.sql.autoBroadcastJoinThreshold (10 MB by default;
     a BROADCAST hint in the MERGE's source did not change that when tried). Iceberg estimates a table from its rows
     and default column widths: a components batch of 192,000 rows is 13.4 MB, and its
     MERGE shuffled and sorted the whole target (6.6 s, against 3.6 s broadcast, at 1%
     of 3M records changed). So on the spark_session adapter the session's threshold is
     raised to 256 bytes per batch row for the MERGE (rows: at most
     _entity_state_broadcast_limit(), so at most about 51 MB); never lowered, nor
     enabled where it is disabled (a negative value). finish_incremental_entity_state
     puts it back after the commit; the value it replaced is kept in the session
     (spark.dbt_merge.broadcast_threshold), so that after a MERGE that failed the next
     state model puts back the user's value, not a raised one. A model that runs in
     the same session meanwhile (threads) plans with the raised threshold. --#}
{% macro _entity_state_raise_broadcast(rows) %}
    {%- if target.type != 'spark_session' %}
        {{- return(none) -}}
    {%- endif %}
    {%- set name = 'spark.sql.autoBroadcastJoinThreshold' %}
    {%- set saved = dbt_merge._session_setting(dbt_merge._entity_state_saved_threshold()) %}
    {%- set original = dbt_merge._session_setting(name) if saved is none else saved %}
    {%- set original_bytes = dbt_merge._conf_bytes(original) %}
    {%- set needed = rows * 256 %}
    {%- if original_bytes is none or original_bytes < 0 or original_bytes >= needed %}
        {{- return(none) -}}
    {%- endif %}
    {%- if saved is none %}
        {%- do dbt_merge._execute('set ' ~ dbt_merge._entity_state_saved_threshold() ~ ' = ' ~ original) %}
    {%- endif %}
    {%- do dbt_merge._execute('set ' ~ name ~ ' = ' ~ needed) %}
{% endmacro %}


{#-- Puts back the broadcast threshold _entity_state_raise_broadcast raised (if it did). --#}
{% macro _entity_state_restore_broadcast() %}
    {%- if target.type != 'spark_session' %}
        {{- return(none) -}}
    {%- endif %}
    {%- set saved = dbt_merge._session_setting(dbt_merge._entity_state_saved_threshold()) %}
    {%- if saved is not none %}
        {%- do dbt_merge._execute('set spark.sql.autoBroadcastJoinThreshold = ' ~ saved) %}
        {%- do dbt_merge._execute('reset ' ~ dbt_merge._entity_state_saved_threshold()) %}
    {%- endif %}
{% endmacro %}


{#-- The session setting that keeps the broadcast threshold a state MERGE replaced. --#}
{% macro _entity_state_saved_threshold() %}
    {{- return('spark.dbt_merge.broadcast_threshold') -}}
{% endmacro %}


{#-- A Spark size setting (e.g. 10485760b, 10MB, -1) in bytes, or none when it is not
     one. --#}
{% macro _conf_bytes(value) %}
    {%- set text = value | string | trim | lower %}
    {%- set factors = {'b': 1, 'k': 1024, 'm': 1024 ** 2, 'g': 1024 ** 3, 't': 1024 ** 4} %}
    {%- set number = text[:-1] if text[-1:] == 'b' else text %}
    {%- set factor = 1 %}
    {%- if number[-1:] in factors %}
        {%- set factor = factors[number[-1:]] %}
        {%- set number = number[:-1] %}
    {%- endif %}
    {%- if not (number[1:] if number[:1] == '-' else number).isdigit() %}
        {{- return(none) -}}
    {%- endif %}
    {{- return((number | int) * factor) -}}
{% endmacro %}
