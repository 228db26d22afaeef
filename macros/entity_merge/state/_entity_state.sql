{#--
    The state a change-following entity merge keeps between runs: per input record a
    fingerprint and its edges (the edges model), per node of the graph its component
    (the components model), both stamped with the batch that wrote them.
--#}

{#-- A record's fingerprint: a 64-bit hash of every column of its row, seeded with the
     dataset's column names and types (a renamed or retyped column changes every
     fingerprint) and with each column's null flag before its value (Spark's hash skips
     nulls, so a value moving between columns is still a change). Nested columns
     (array, struct, map) are hashed as their JSON, which keeps the positions of null
     elements. Hashing the columns costs about a quarter of hashing the row as JSON. --#}
{% macro _entity_fingerprint_sql(dataset) %}
    {%- set parts = [dbt_merge._sql_string(dataset.columns.items() | map('join', ':') | join(','))] %}
    {%- for key, data_type in dataset.columns.items() %}
        {%- set column = dataset.alias ~ '.' ~ adapter.quote(dataset.column_names[key]) %}
        {%- do parts.append(column ~ ' is null') %}
        {%- do parts.append('to_json(' ~ column ~ ')' if '<' in data_type else column) %}
    {%- endfor %}
    {{- 'xxhash64(' ~ (parts | join(', ')) ~ ')' -}}
{% endmacro %}


{#-- The number of the batch a run writes: the time in microseconds, and always above
     every batch the stored table holds (relation, none on a first run), so numbers only
     grow, across --full-refresh too. --#}
{% macro _entity_next_batch(relation) %}
    {% set query %}
        select greatest(
            unix_micros(current_timestamp()),
            {%- if relation is not none %}
            (select coalesce(max(`_batch`), 0) + 1 from {{ relation }})
            {%- else %}
            0
            {%- endif %}
        )
    {% endset %}
    {{ return(run_query(query).rows[0][0] | int) }}
{% endmacro %}


{#-- A stored state table must have the columns a change-following run reads; one built
     by an older dbt_merge (or as another model) needs a rebuild. Returns the stored
     columns, lower-cased. --#}
{% macro _check_entity_state_columns(spec, relation, expected) %}
    {% set stored = adapter.get_columns_in_relation(relation) | map(attribute='name') | map('lower') | list %}
    {% set missing = [] %}
    {% for column in expected if column not in stored %}{% do missing.append(column) %}{% endfor %}
    {% if missing %}
        {% do dbt_merge._entity_merge_error(spec.name, 'incremental_strategy', 'the stored table ' ~ relation ~ ' has no column ' ~ (missing | join(', ')) ~ ' (its columns: ' ~ (stored | join(', ')) ~ '), so it cannot follow the change; run it once with --full-refresh') %}
    {% endif %}
    {{ return(stored) }}
{% endmacro %}


{#-- Where a change-following run of the merged model (this) starts: {since, version},
     since the components' last batch when this table's rows were last written and
     version the components' snapshot (Iceberg) or version (Delta) of that moment, whose
     components give the ids this table holds (time travel). That moment is the commit
     time of the newest commit of this table's current history that wrote rows: a
     rollback makes an older snapshot current again, and a compaction (an Iceberg
     'replace', a Delta OPTIMIZE or REORG) rewrites the same rows; the time either was
     made current says nothing of the components the rows came from. none, so the run
     compares every entity as before, when the components have no batches (an edges
     model of an older dbt_merge, or a table edges model that rewrites them all), a
     file format is not Iceberg or Delta, or the components have no snapshot from that
     moment, were rolled back past it or were rebuilt since. unchanged: the components
     have not committed since this table last did (then since is none). previous: the
     components carry previous_component (the component before the run that wrote a
     row). format: the tables' file format. --#}
{% macro _entity_change_scope(spec, components) %}
    {% set columns = adapter.get_columns_in_relation(components) | map(attribute='name') | map('lower') | list %}
    {% set file_format = config.get('file_format') %}
    {% if '_batch' not in columns or file_format not in ['iceberg', 'delta'] %}
        {{ return(none) }}
    {% endif %}
    {% if file_format == 'iceberg' %}
        {% set query %}
            select cast(snapshot_id as string), is_current_ancestor
            from {{ components }}.history
            where made_current_at <= (
                select max(committed_at)
                from {{ this }}.snapshots
                where operation != 'replace'
                    and snapshot_id in (select snapshot_id from {{ this }}.history where is_current_ancestor)
            )
            order by made_current_at desc
            limit 1
        {% endset %}
        {% set found = run_query(query).rows %}
    {% else %}
        {#-- a Delta merged model over components of another format (a project that
             moved between formats): its history does not say --#}
        {% if dbt_merge._table_provider(components) != 'delta' %}
            {{ return(none) }}
        {% endif %}
        {% set found = dbt_merge._entity_delta_built_from(components) %}
        {% if found is none %}
            {{ return(none) }}
        {% endif %}
    {% endif %}
    {% if found | length == 0 or found[0][0] is none %}
        {#-- the components' snapshots of that moment expired, or their table is newer --#}
        {% do log('dbt_merge: ' ~ model.name ~ ': ' ~ components ~ ' keeps no snapshot from when this table'
            ~ ' was last written (expired, or the table was replaced since): every entity is compared', info=true) %}
        {{ return(none) }}
    {% endif %}
    {% if not found[0][1] %}
        {#-- the components were rolled back past the snapshot this table was built from --#}
        {% do log('dbt_merge: ' ~ model.name ~ ': ' ~ components ~ ' was rolled back past snapshot ' ~ found[0][0]
            ~ ', which this table was built from: every entity is compared', info=false) %}
        {{ return(none) }}
    {% endif %}
    {% set version = found[0][0] %}
    {% if version == dbt_merge._table_version(components, file_format) %}
        {#-- the components have not committed since this table last did: nothing to
             read (metadata only, no scan) --#}
        {{ return({'since': none, 'version': version, 'unchanged': true, 'format': file_format}) }}
    {% endif %}
    {% set query %}
        select
            (select max(`_batch`) from {{ components }} version as of {{ version }}),
            (select min(`_batch`) from {{ components }})
    {% endset %}
    {% set batches = run_query(query).rows[0] %}
    {% if batches[0] is none or batches[1] is none or batches[1] > batches[0] %}
        {% do log('dbt_merge: ' ~ model.name ~ ': ' ~ components ~ ' was rebuilt since snapshot ' ~ version
            ~ ', which this table was built from: every entity is compared', info=true) %}
        {{ return(none) }}
    {% endif %}
    {% do log('dbt_merge: ' ~ model.name ~ ': follows the change of ' ~ components ~ ' since batch '
        ~ batches[0] ~ ' (its ' ~ ('snapshot ' if file_format == 'iceberg' else 'version ') ~ version ~ ')', info=false) %}
    {{ return({
        'since': batches[0] | int, 'version': version, 'unchanged': false,
        'previous': 'previous_component' in columns, 'format': file_format,
    }) }}
{% endmacro %}


{#-- _entity_change_scope on Delta: [[version, current]], the components' version when
     this table last wrote rows (the commit time of its newest WRITE, MERGE, UPDATE,
     DELETE, CREATE/REPLACE TABLE AS SELECT or TRUNCATE; an OPTIMIZE, a REORG or a
     property change rewrites or writes no rows) and whether no RESTORE of the
     components came after it; [] when none of the components' newest 100 versions is
     that old. none (and a log line) when that newest write of this table is a RESTORE:
     its rows are an older version's, and what components those came from is not
     recorded. --#}
{% macro _entity_delta_built_from(components) %}
    {#-- a merged model writes once a run, its components once or twice: their newest
         100 commits reach back about 50 runs --#}
    {% set limit = 100 %}
    {% set writes = ['WRITE', 'MERGE', 'UPDATE', 'DELETE', 'STREAMING UPDATE', 'TRUNCATE', 'RESTORE',
        'CREATE TABLE AS SELECT', 'REPLACE TABLE AS SELECT', 'CREATE OR REPLACE TABLE AS SELECT'] %}
    {% set written = [] %}
    {% for row in run_query('describe history ' ~ this ~ ' limit ' ~ limit).rows if row['operation'] in writes %}
        {% do written.append(row) %}
    {% endfor %}
    {% if written | length == 0 %}
        {{ return([]) }}
    {% endif %}
    {% if written[0]['operation'] == 'RESTORE' %}
        {% do log('dbt_merge: ' ~ model.name ~ ': ' ~ this ~ ' was restored to an older version (version '
            ~ written[0]['version'] ~ '): every entity is compared', info=true) %}
        {{ return(none) }}
    {% endif %}
    {% set restored = [] %}
    {% for row in run_query('describe history ' ~ components ~ ' limit ' ~ limit).rows %}
        {% if row['timestamp'] <= written[0]['timestamp'] %}
            {{ return([[row['version'] | string, restored | length == 0]]) }}
        {% endif %}
        {% if row['operation'] == 'RESTORE' %}{% do restored.append(row['version']) %}{% endif %}
    {% endfor %}
    {{ return([]) }}
{% endmacro %}


{#-- The settings a change-following merge's state depends on, as the declaration
     gives them (defaults filled in); max_merged is a check, not part of the state. --#}
{% macro _entity_merge_locked_settings(spec, decl) %}
    {{ return({
        'datasets': decl.get('datasets'),
        'equality': decl.get('equality', []),
        'equality_sets': decl.get('equality_sets', []),
        'identity': spec.identity,
        'strategy': spec.strategy,
        'id_column': spec.id_column,
        'deleted_column': spec.deleted_column,
    }) }}
{% endmacro %}


{#-- The declaration as the state stores it (column `declaration` of the edges). --#}
{% macro _entity_declaration_json(spec) %}
    {{ return(tojson(spec.declaration, sort_keys=true)) }}
{% endmacro %}


{#-- A change-following run reads state that one declaration built: when the stored
     edges (relation) were built from another one, fail before anything is written,
     naming the settings that changed. --#}
{% macro _check_entity_declaration(spec, relation) %}
    {% set found = run_query('select declaration from ' ~ relation ~ ' where declaration is not null limit 1') %}
    {% if found.rows | length == 0 %}
        {{ return(none) }}
    {% endif %}
    {% set stored = fromjson(found.rows[0][0]) %}
    {% set changed = [] %}
    {% for key in spec.declaration | sort if stored.get(key) != fromjson(tojson(spec.declaration[key])) %}
        {% do changed.append(key) %}
    {% endfor %}
    {% if changed %}
        {% set details = [] %}
        {% for key in changed %}{% do details.append(key ~ ' was ' ~ tojson(stored.get(key)) ~ ', is ' ~ tojson(spec.declaration[key])) %}{% endfor %}
        {% do dbt_merge._entity_merge_error(spec.name, changed | join(', '), 'changed since the stored state (' ~ relation ~ ') was built: ' ~ (details | join('; ')) ~ '. A merge that follows the change keeps the state of one declaration: run its models with --full-refresh to rebuild it') %}
    {% endif %}
{% endmacro %}


{#-- Computes a select once, before the model's statement, into the table
     <model>__dbt_merge_<part> beside the model (replaced by every run, like dbt's
     __dbt_tmp tables), and returns it. A change-following run stages what its statement
     reads more than once, so Spark does not compute it again for every read; checks in
     it (identity first) fail here, before anything is written. --#}
{% macro _entity_stage(part, select_sql) %}
    {% set relation = dbt_merge._entity_side_relation(this, part) %}
    {% do dbt_merge._execute('drop table if exists ' ~ relation) %}
    {#-- Of the model's format (a run that stages is on Iceberg or Delta), but parquet
         beside a Delta model on the embedded Spark (spark_session), where a Delta
         table's commit makes a small stage cost 1.8-2.3 s against 0.6-0.9 s (a stage is
         written once and read by the same run). Never Spark's default, a Hive text
         table, which a value holding a line break breaks. --#}
    {% set file_format = config.get('file_format') or 'parquet' %}
    {% if file_format == 'delta' and adapter.type() == 'spark_session' %}
        {% set file_format = 'parquet' %}
    {% endif %}
    {% do dbt_merge._execute('create table ' ~ relation ~ ' using ' ~ file_format ~ ' as\n' ~ select_sql) %}
    {{ return(relation) }}
{% endmacro %}
