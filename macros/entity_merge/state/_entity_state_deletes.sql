{#--
    The state tables of a change-following merge (its edges and components models,
    incremental_strategy='entity_state') write row-level deletes: Iceberg's position
    deletes (the write modes merge-on-read) and Delta's deletion vectors, as an upsert
    of table_type merge_on_read does (_upsert_table_type_properties). A delivery
    changes rows spread over every data file, and copy-on-write rewrites each file
    holding one: the whole table, on every run. With row-level deletes a MERGE writes
    the changed rows and a delete file per data file it touched (10,000 keys into 25M
    rows, a MERGE that only updates and deletes: 5.5-11.8 s against 48-53 s
    copy-on-write, 2026-12-03, a loaded machine). Readers then apply the
    deletes, so once they have piled up past a threshold the run that wrote them
    compacts the table (_entity_state_compact).
--#}

{#-- The table properties that make the state table target (table_format iceberg or
     delta) write row-level deletes, set where the table lacks them: once, after the
     full build that created it with dbt's own create table as (an alter table, which
     commits no data: a new Delta version, no Iceberg snapshot), or after the first run
     of a table built before dbt_merge set them. A key the model's tblproperties config
     names is left as the model says. --#}
{% macro _entity_state_use_row_deletes(target, table_format) %}
    {% set wanted = dbt_merge._upsert_table_type_properties({'table_type': 'merge_on_read', 'file_format': table_format}) %}
    {% set given = config.get('tblproperties') or {} %}
    {% set stored = dbt_merge._table_properties(target) %}
    {% set missing = {} %}
    {% for key, value in wanted.items() if key not in given and stored.get(key) != value %}
        {% do missing.update({key: value}) %}
    {% endfor %}
    {% if missing %}
        {% do dbt_merge._execute('alter table ' ~ target ~ ' set tblproperties ('
            ~ dbt_merge._sql_properties(missing) ~ ')') %}
    {% endif %}
{% endmacro %}


{#-- After a state MERGE's commit: the state table target compacted when its
     row-level deletes have piled up past _entity_state_compaction(): its data files
     with deletes rewritten without the deleted rows, then (Iceberg) the delete files,
     which point at no data file any more. Iceberg: rewrite_data_files
     (get_upsert_compaction_sql) and rewrite_position_delete_files, two commits; Delta:
     REORG TABLE ... APPLY (PURGE), one, its deletion vectors read through the
     spark_session adapter (the only one that runs the entity_state strategy; a file
     without a record count counts none). No commit changes a row; the edges' digest is
     stamped after them (finish_incremental_entity_state). A run that dies before them
     leaves the deletes for the next run to compact. Logs what it measured. Returns the
     Iceberg table's current snapshot where it did not compact (the one its check
     read), else none. --#}
{% macro _entity_state_compact(target, table_format) %}
    {% set limits = dbt_merge._entity_state_compaction() %}
    {% if table_format == 'iceberg' %}
        {% set current = dbt_merge._iceberg_current_snapshot(target) %}
        {% if current is none %}
            {{ return(none) }}
        {% endif %}
        {% set records, deleted, delete_files, data_files = current.records, current.position_deletes, current.delete_files, current.data_files %}
    {% elif table_format == 'delta' %}
        {% set files = adapter.delta_file_deletes(target.schema ~ '.' ~ target.identifier) %}
        {% set records = files | rejectattr('record_count', 'none') | sum(attribute='record_count') %}
        {% set deleted = files | sum(attribute='deleted_rows') %}
        {% set data_files, delete_files = files | length, files | selectattr('deleted_rows', 'gt', 0) | list | length %}
    {% endif %}
    {% if deleted <= limits.deleted_ratio * records and delete_files <= limits.delete_files * data_files %}
        {{ return(current.snapshot if table_format == 'iceberg' else none) }}
    {% endif %}
    {% do log('dbt_merge: ' ~ model.name ~ ': ' ~ deleted ~ ' deleted rows of ' ~ records ~ ' in ' ~ delete_files ~ ' delete files for '
        ~ data_files ~ ' data files, over deleted_ratio = ' ~ limits.deleted_ratio ~ ' or delete_files = ' ~ limits.delete_files
        ~ ' a data file: the table is compacted', info=false) %}
    {% if table_format == 'iceberg' %}
        {% do dbt_merge._execute(dbt_merge.get_upsert_compaction_sql(target, {'delete_files': 1, 'deleted_ratio': none})) %}
        {#-- every data file with a delete was rewritten: the delete files now point at
             none, but stay in the table (and in its summary's totals, which the next
             check and the merged model's live rows read) until they are rewritten --#}
        {% do dbt_merge._execute("call spark_catalog.system.rewrite_position_delete_files(table => "
            ~ dbt_merge._sql_string(target.schema ~ '.' ~ target.identifier) ~ ", options => map('rewrite-all', 'true'))") %}
    {% else %}
        {% do dbt_merge._execute('reorg table ' ~ target ~ ' apply (purge)') %}
    {% endif %}
    {{ return(none) }}
{% endmacro %}


{#-- When a state table is compacted (_entity_state_compact): its deleted rows over
     deleted_ratio of its rows, or its delete files over delete_files a data file (on
     Delta a file has one deletion vector at most, so only the ratio counts). The state
     model's config state_compaction ({deleted_ratio, delete_files}), else the var
     dbt_merge_state_compaction, else 0.1 and 8. --#}
{% macro _entity_state_compaction() %}
    {% set limits = {'deleted_ratio': 0.1, 'delete_files': 8} %}
    {% set given = config.get('state_compaction', var('dbt_merge_state_compaction', {})) %}
    {% if given is not mapping or given.keys() | reject('in', limits.keys()) | list
        or given.values() | reject('number') | list or given.values() | select('lt', 0) | list %}
        {% do exceptions.raise_compiler_error("dbt_merge: model " ~ model.name ~ ", setting 'state_compaction': must be a dict of deleted_ratio (a share of the rows) and delete_files (delete files a data file), each a number of 0 or more, got " ~ given) %}
    {% endif %}
    {% do limits.update(given) %}
    {{ return(limits) }}
{% endmacro %}
