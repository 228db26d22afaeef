{#--
    Carries out an auto-merge plan (a model built with dbt_merge.auto_merge.plan_table)
    with Iceberg's rewrite_data_files, one CALL per planned merge, each restricted by
    the merge's where clause to exactly its files. A dry run (the default) only says
    what it would do:

        dbt run-operation dbt_merge.execute_auto_merge --args '{plan: my_plan}'
        dbt run-operation dbt_merge.execute_auto_merge --args '{plan: my_plan, execute: true}'

    A plan is not executed blindly: before each merge, the files its where clause
    selects in the table's current snapshot must be exactly the planned files
    (like Accumulo's VerifyMergeability, SEMANTICS.md D.1). Otherwise the plan is
    stale for that merge (files were rewritten, added or removed since it was made)
    and the merge is skipped with a log line; build the plan again.
    Each executed merge appends a JOIN event (old files -> new files) to
    <plan schema>.auto_merge_provenance.

    A plan of a Delta table is carried out through the spark_session adapter (Delta has
    no SQL view of its files, and its OPTIMIZE statement selects whole partitions, not a
    key range of files): each merge is checked the same way against Delta's file list,
    then its files are rewritten and committed as OPTIMIZE commits them
    (_execute_auto_merge_delta).
--#}
{% macro execute_auto_merge(plan, execute=false) %}
    {{ return(adapter.dispatch('execute_auto_merge', 'dbt_merge')(plan, execute)) }}
{% endmacro %}


{% macro default__execute_auto_merge(plan, execute) %}
    {#-- `execute` here is this macro's flag, which hides dbt's own: an empty result
         from run_query is how this notices that dbt is only parsing. --#}
    {% set plan_relation = dbt_merge._auto_merge_plan_relation(plan) %}
    {% set merges = run_query(dbt_merge._auto_merge_merges_sql(plan_relation)) %}
    {% if merges is none or merges is undefined %}
        {{ return([]) }}
    {% endif %}
    {% set formats = dbt_merge._auto_merge_table_formats(plan_relation, merges.rows) %}
    {% set mode = 'execute' if execute else 'dry run' %}
    {% set outcomes = [] %}
    {% if merges.rows | length == 0 %}
        {% do log('auto-merge ' ~ mode ~ ' of ' ~ plan_relation ~ ': the plan has no merges', info=true) %}
    {% endif %}
    {% for merge in merges.rows %}
        {% set format = formats[merge['catalog_name'] ~ '.' ~ merge['table_name']] %}
        {% do outcomes.append(dbt_merge._execute_auto_merge_run(plan_relation, merge, execute, format)) %}
    {% endfor %}
    {% set done = outcomes | selectattr('status', 'equalto', 'merged') | list %}
    {% set planned = outcomes | selectattr('status', 'equalto', 'planned') | list %}
    {% set recorded = outcomes | selectattr('status', 'equalto', 'recorded') | list %}
    {% set skipped = outcomes | rejectattr('status', 'in', ['merged', 'planned', 'recorded']) | list %}
    {% if execute %}
        {% set summary -%}
            auto-merge of {{ plan_relation }}: {{ done | length }} merge(s) executed,
            {{- ' ' ~ (done | sum(attribute='files_before')) }} files -> {{ done | sum(attribute='files_after') }},
            {{- ' ' ~ (skipped | length) }} skipped
            {%- if recorded %}, {{ recorded | length }} event(s) recorded for merges a stopped run executed{% endif %}
        {%- endset %}
    {% else %}
        {% set summary -%}
            auto-merge dry run of {{ plan_relation }}: {{ planned | length }} merge(s) would run, rewriting
            {{- ' ' ~ (planned | sum(attribute='files_before')) }} files,
            {{- ' ' ~ (skipped | length) }} would be skipped; nothing was changed. Run them with
            {{- " --args '{plan: " ~ plan_relation.identifier ~ ", execute: true}'" }}
        {%- endset %}
    {% endif %}
    {% do log(summary, info=true) %}
    {{ return(outcomes) }}
{% endmacro %}


{#-- The plan as a relation: a model name (ref) or a relation. --#}
{% macro _auto_merge_plan_relation(plan) %}
    {% if plan is string %}
        {{ return(ref(plan)) }}
    {% elif plan is mapping or plan is none %}
        {% set msg -%}
            Macro execute_auto_merge expected a plan model's name or a Relation but received the value: {{ plan }}
        {%- endset %}
        {% do exceptions.raise_compiler_error(msg) %}
    {% endif %}
    {{ return(plan) }}
{% endmacro %}


{#-- The format of each planned table ({catalog.table: 'iceberg' or 'delta'}). A plan is
     carried out with Iceberg's metadata tables (<table>.data_files) and its
     rewrite_data_files procedure, or on Delta with Delta's file list, which only the
     spark_session adapter reads: a planned table of any other format, or a Delta table
     on another adapter (dbt-databricks, dbt-spark), fails here, before any merge runs,
     rather than with the errors of those statements. Its format is the file_format
     config of the dbt model or seed that builds it, else the provider its DESCRIBE
     TABLE EXTENDED reports. --#}
{% macro _auto_merge_table_formats(plan_relation, merges) %}
    {% set formats = {} %}
    {% set problems = [] %}
    {% for merge in merges %}
        {% set table = merge['catalog_name'] ~ '.' ~ merge['table_name'] %}
        {% if table not in formats %}
            {% set parts = table.lower().split('.') %}
            {% set found = [] %}
            {% for node in graph.nodes.values()
                if node.resource_type in ['model', 'seed', 'snapshot']
                and (node.alias or node.name) | lower == parts[-1]
                and node.schema | lower == parts[-2]
                and node.config.get('file_format') %}
                {% do found.append([node.config.get('file_format') | string, 'the config of ' ~ node.resource_type ~ ' ' ~ node.name]) %}
            {% endfor %}
            {% if not found %}
                {% for row in run_query('describe table extended ' ~ table).rows
                    if (row[0] | string).strip().lower() == 'provider' %}
                    {% do found.append([row[1] | string, 'the provider of the table']) %}
                {% endfor %}
            {% endif %}
            {% set format = found[0][0].strip().lower() if found else 'iceberg' %}
            {% do formats.update({table: format}) %}
            {% if format == 'delta' and target.type != 'spark_session' %}
                {% do problems.append('table ' ~ table ~ ' has file_format delta (' ~ found[0][1] ~ '), whose plans are executed through the spark_session adapter only (it reads Delta\'s file list), not on ' ~ target.type ~ '; on Databricks, compact with OPTIMIZE or liquid clustering instead') %}
            {% elif format not in ['iceberg', 'delta'] %}
                {% do problems.append('table ' ~ table ~ ' has file_format ' ~ found[0][0] ~ ' (' ~ found[0][1] ~ '), and only Iceberg and Delta tables can be merged by it') %}
            {% endif %}
        {% endif %}
    {% endfor %}
    {% if problems %}
        {% set msg -%}
            dbt_merge.execute_auto_merge of plan {{ plan_relation }}, setting 'file_format': {{ problems | join('; ') }}. Nothing was changed
        {%- endset %}
        {% do exceptions.raise_compiler_error(msg) %}
    {% endif %}
    {{ return(formats) }}
{% endmacro %}


{#-- One row per planned merge, in plan order, with its files as a JSON list. --#}
{% macro _auto_merge_merges_sql(plan_relation) %}
    select
        merge_index,
        first(catalog_name) as catalog_name,
        first(table_name) as table_name,
        first(merge_min_key) as merge_min_key,
        first(merge_max_key) as merge_max_key,
        first(merge_where) as merge_where,
        first(merge_files_where) as merge_files_where,
        first(target_file_size_bytes) as target_file_size_bytes,
        first(snapshot_id) as snapshot_id,
        first(sort_column) as sort_column,
        sum(size_bytes) as size_bytes,
        to_json(sort_array(flatten(collect_list(file_paths)))) as file_paths
    from {{ plan_relation }}
    where action = 'merge'
    group by merge_index
    order by merge_index
{% endmacro %}


{#-- One planned merge: verify, then (dry run) log the CALL or (execute) run it and
     record the event; on Delta _execute_auto_merge_delta. Returns what happened as a
     dict. --#}
{% macro _execute_auto_merge_run(plan_relation, merge, execute, format='iceberg') %}
    {% set table = merge['catalog_name'] ~ '.' ~ merge['table_name'] %}
    {% set planned = fromjson(merge['file_paths']) %}
    {% set label -%}
        merge {{ merge['merge_index'] }} of {{ table }} ({{ merge['merge_min_key'] }} .. {{ merge['merge_max_key'] }}, {{ planned | length }} files, {{ merge['size_bytes'] }} bytes)
    {%- endset %}
    {% set outcome = {'merge_index': merge['merge_index'], 'table': table, 'files_before': planned | length, 'files_after': none} %}
    {% if merge['merge_where'] is none %}
        {% do log('auto-merge: skipped ' ~ label ~ ': the plan has no where clause for it (only identity partitions can be selected by one)', info=true) %}
        {% do outcome.update({'status': 'not_executable'}) %}
        {{ return(outcome) }}
    {% endif %}
    {% if format == 'delta' %}
        {{ return(dbt_merge._execute_auto_merge_delta(plan_relation, merge, execute, table, planned, label, outcome)) }}
    {% endif %}

    {#-- 1. the plan must still describe the table --#}
    {% set before = dbt_merge._auto_merge_selected_files(table, merge['merge_files_where']) %}
    {% set gone = planned | reject('in', before) | list %}
    {% set extra = before | reject('in', planned) | list %}
    {% if execute and planned and gone | length == planned | length %}
        {% set missed = dbt_merge._auto_merge_record_missed(plan_relation, table, merge, planned) %}
        {% if missed is not none %}
            {% do log('auto-merge: ' ~ label ~ ' was executed in snapshot ' ~ missed ~ ' by a run that stopped before recording it; its JOIN event is recorded now', info=true) %}
            {% do outcome.update({'status': 'recorded', 'snapshot_id': missed}) %}
            {{ return(outcome) }}
        {% endif %}
    {% endif %}
    {% if gone or extra %}
        {% do log(dbt_merge._auto_merge_stale_message(label, gone, extra), info=true) %}
        {% do outcome.update({'status': 'stale'}) %}
        {{ return(outcome) }}
    {% endif %}

    {% set call_sql = dbt_merge._auto_merge_call_sql(merge) %}
    {% if not execute %}
        {% do log('auto-merge dry run: ' ~ label ~ ' would run: ' ~ call_sql, info=true) %}
        {% do outcome.update({'status': 'planned'}) %}
        {{ return(outcome) }}
    {% endif %}

    {#-- 2. rewrite, then read what the commit replaced --#}
    {% do dbt_merge._failpoint('auto_merge.before_rewrite') %}
    {% set result = run_query(call_sql).rows[0] %}
    {% do dbt_merge._failpoint('auto_merge.after_rewrite') %}
    {% set after = dbt_merge._auto_merge_selected_files(table, merge['merge_files_where']) %}
    {% set parents = before | reject('in', after) | list %}
    {% set children = after | reject('in', before) | list %}
    {% set snapshot = dbt_merge._table_version(table, 'iceberg') %}
    {% if result['failed_data_files_count'] != 0 %}
        {% do log('auto-merge: warning: ' ~ label ~ ': rewrite_data_files failed to rewrite ' ~ result['failed_data_files_count'] ~ ' file(s)', info=true) %}
    {% endif %}

    {#-- 3. provenance: one JOIN event, old files -> new files --#}
    {% if parents %}
        {% do dbt_merge._auto_merge_record_event(plan_relation, table, merge, parents, children, result, snapshot) %}
    {% endif %}
    {% do dbt_merge._failpoint('auto_merge.after_provenance') %}
    {% do log('auto-merge: executed ' ~ label ~ ': rewrote ' ~ result['rewritten_data_files_count'] ~ ' file(s) into ' ~ result['added_data_files_count'] ~ ' in snapshot ' ~ snapshot, info=true) %}
    {% do outcome.update({'status': 'merged', 'files_before': parents | length, 'files_after': children | length, 'snapshot_id': snapshot}) %}
    {{ return(outcome) }}
{% endmacro %}


{#-- A planned merge of a Delta table (after _execute_auto_merge_run's first checks):
     adapter.delta_rewrite_merge checks the files its merge_files_where selects in the
     current version against the plan (stale: skipped, as on Iceberg) and, executed,
     rewrites exactly those files into one per partition, committed as Delta's
     OPTIMIZE commits (a transaction from the version checked that tracks them as
     read; dataChange=false), its commit marked (_auto_merge_delta_marker). Delta's
     OPTIMIZE statement selects whole partitions, not a key range of files. Then one
     JOIN event: the files the commit removed -> those it added. When every planned
     file is gone, a commit with the merge's marker is a merge a stopped run executed:
     its event is recorded now if it is not yet. --#}
{% macro _execute_auto_merge_delta(plan_relation, merge, execute, table, planned, label, outcome) %}
    {% set marker = dbt_merge._auto_merge_delta_marker(plan_relation, merge) %}
    {% set result = adapter.delta_rewrite_merge(merge['table_name'], merge['merge_files_where'], merge['sort_column'], planned, marker, execute) %}
    {% if result['status'] == 'stale' and execute and planned and result['gone'] | length == planned | length %}
        {% set commit = adapter.delta_merge_commit(merge['table_name'], marker) %}
        {% if commit is not none and commit['removed'] | sort == planned | sort
            and dbt_merge._auto_merge_record_event(plan_relation, table, merge, commit['removed'], commit['added'], {'rewritten_bytes_count': commit['removed_bytes']}, commit['version'], 'delta') %}
            {% do log('auto-merge: ' ~ label ~ ' was executed in version ' ~ commit['version'] ~ ' by a run that stopped before recording it; its JOIN event is recorded now', info=true) %}
            {% do outcome.update({'status': 'recorded', 'snapshot_id': commit['version']}) %}
            {{ return(outcome) }}
        {% endif %}
    {% endif %}
    {% if result['status'] == 'stale' and result.get('conflict') %}
        {% do log('auto-merge: skipped ' ~ label ~ ': another writer removed or rewrote one of its files while it ran (Delta: ' ~ result['conflict'] ~ '); nothing of it was committed. Build the plan again', info=true) %}
        {% do outcome.update({'status': 'stale'}) %}
        {{ return(outcome) }}
    {% elif result['status'] == 'stale' %}
        {% do log(dbt_merge._auto_merge_stale_message(label, result['gone'], result['extra']), info=true) %}
        {% do outcome.update({'status': 'stale'}) %}
        {{ return(outcome) }}
    {% endif %}
    {% if result['status'] == 'planned' %}
        {% do log('auto-merge dry run: ' ~ label ~ ' would run: a rewrite of its ' ~ planned | length ~ ' files of version ' ~ result['version'] ~ ' of ' ~ table ~ ' into one file per partition, committed as an OPTIMIZE (dataChange=false)', info=true) %}
        {% do outcome.update({'status': 'planned'}) %}
        {{ return(outcome) }}
    {% endif %}
    {% do dbt_merge._failpoint('auto_merge.after_rewrite') %}
    {% set commit = result['commit'] %}
    {% do dbt_merge._auto_merge_record_event(plan_relation, table, merge, commit['removed'], commit['added'], {'rewritten_bytes_count': commit['removed_bytes']}, commit['version'], 'delta') %}
    {% do dbt_merge._failpoint('auto_merge.after_provenance') %}
    {% do log('auto-merge: executed ' ~ label ~ ': rewrote ' ~ commit['removed'] | length ~ ' file(s) into ' ~ commit['added'] | length ~ ' in version ' ~ commit['version'], info=true) %}
    {% do outcome.update({'status': 'merged', 'files_before': commit['removed'] | length, 'files_after': commit['added'] | length, 'snapshot_id': commit['version']}) %}
    {{ return(outcome) }}
{% endmacro %}


{#-- What a planned merge's Delta commit carries as its userMetadata: the plan, the
     merge and the version it was planned on. --#}
{% macro _auto_merge_delta_marker(plan_relation, merge) %}
    {{- return('dbt_merge auto-merge: plan ' ~ plan_relation.identifier ~ ', merge ' ~ merge['merge_index'] ~ ', planned on version ' ~ merge['snapshot_id']) -}}
{% endmacro %}


{#-- The log line of a merge skipped because its plan is stale: planned files gone,
     files it would also rewrite (extra). --#}
{% macro _auto_merge_stale_message(label, gone, extra) %}
    {%- set msg -%}
        auto-merge: skipped {{ label }}: the plan is stale, the table changed since it was made
        {%- if gone %}; {{ gone | length }} planned file(s) are no longer in the table (e.g. {{ gone[0] }}){% endif %}
        {%- if extra %}; its where clause would also rewrite {{ extra | length }} file(s) not in the plan (e.g. {{ extra[0] }}){% endif %}. Build the plan again
    {%- endset -%}
    {{- return(msg) -}}
{% endmacro %}


{#-- Appends a merge's JOIN event (parents -> children, at snapshot) to the plan's
     events table unless one for that table and snapshot is there already (a merge is
     recorded once). file_format: the events table's when this creates it (a Delta
     table's merge: delta). Returns whether it appended. --#}
{% macro _auto_merge_record_event(plan_relation, table, merge, parents, children, result, snapshot, file_format=none) %}
    {% set events = dbt_merge.auto_merge_provenance(plan_relation) %}
    {% do dbt_merge._execute(dbt_merge.get_create_auto_merge_provenance_sql(events, file_format)) %}
    {% set recorded = run_query('select count(*) from ' ~ events ~ ' where table_name = ' ~ dbt_merge._sql_string(table) ~ ' and snapshot_id = ' ~ snapshot).rows[0][0] %}
    {% if recorded > 0 %}
        {{ return(false) }}
    {% endif %}
    {% do dbt_merge._execute(dbt_merge._auto_merge_event_sql(events, plan_relation, table, merge, parents, children, result, snapshot)) %}
    {{ return(true) }}
{% endmacro %}


{#-- Data files of the table's current snapshot that a where clause selects, sorted. --#}
{% macro _auto_merge_selected_files(table, files_where) %}
    {% set found = run_query('select file_path from ' ~ table ~ '.data_files where ' ~ files_where ~ ' order by file_path') %}
    {{ return(found.columns['file_path'].values() | map('string') | list) }}
{% endmacro %}


{#-- rewrite_data_files for one merge. The target size is split_threshold, larger
     than any merge (threshold <= 1), so each merge writes one file per partition.
     Every file smaller than the target is a candidate (min-file-size-bytes), so the
     planner, not Iceberg's size rules, chooses the files; a group of one file (a
     partition that already has one) is not rewritten (min-input-files 2). Options:
     apache/iceberg docs/docs/spark-procedures.md, rewrite_data_files. --#}
{% macro _auto_merge_call_sql(merge) %}
    {%- set target = merge['target_file_size_bytes'] | int -%}
    call {{ merge['catalog_name'] }}.system.rewrite_data_files(
        table => {{ dbt_merge._sql_string(merge['table_name']) }},
        strategy => 'binpack',
        where => {{ dbt_merge._auto_merge_sql_text(merge['merge_where']) }},
        options => map(
            'min-input-files', '2',
            'target-file-size-bytes', '{{ target }}',
            'min-file-size-bytes', '{{ [target - 1, 0] | max }}'
        )
    )
{%- endmacro %}


{#-- One JOIN event row of the auto-merge events table (old files -> new files). Also
     written by the upsert's compaction, with no merge: merge_index, min_key and
     max_key are then null. --#}
{% macro _auto_merge_event_sql(events, plan_relation, table, merge, parents, children, result, snapshot) %}
    insert into {{ events }}
    select
        'JOIN' as event_type,
        {{ dbt_merge._sql_string(table) }} as table_name,
        {{ dbt_merge._sql_string(plan_relation.identifier) }} as plan_model,
        cast({{ 'null' if merge['merge_index'] is none else merge['merge_index'] }} as int) as merge_index,
        {{ 'cast(null as string)' if merge['merge_min_key'] is none else dbt_merge._sql_string(merge['merge_min_key']) }} as min_key,
        {{ 'cast(null as string)' if merge['merge_max_key'] is none else dbt_merge._sql_string(merge['merge_max_key']) }} as max_key,
        cast(array({% for p in parents %}{{ dbt_merge._sql_string(p) }}{{ ', ' if not loop.last }}{% endfor %}) as array<string>) as parent_ids,
        cast(array({% for c in children %}{{ dbt_merge._sql_string(c) }}{{ ', ' if not loop.last }}{% endfor %}) as array<string>) as child_ids,
        cast({{ result['rewritten_bytes_count'] }} as bigint) as rewritten_bytes,
        cast({{ snapshot }} as bigint) as snapshot_id,
        {{- dbt_merge._provenance_stamp_sql() }}
{% endmacro %}


{#-- A string literal; double-quoted when that needs no escapes, so that a where
     clause with quoted values stays readable. --#}
{% macro _auto_merge_sql_text(text) %}
    {%- if '"' not in text and '\\' not in text -%}
        {{- '"' ~ text ~ '"' -}}
    {%- else -%}
        {{- dbt_merge._sql_string(text) -}}
    {%- endif -%}
{% endmacro %}
