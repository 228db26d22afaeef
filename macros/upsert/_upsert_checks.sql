{#-- Checks the upsert materialization runs before anything is written. --#}

{#-- The batch: the delete column is boolean; keys are never null (a null key cannot be
     matched); ordering values are never null, except on a delete whose every
     precombine_key column is null: like a delete from Hudi's DELETE statement, which
     carries no ordering value, it deletes its key whatever the stored ordering value.
     An upsert without an ordering value cannot be ordered: it fails the run, as Hudi
     fails on a null ordering value. --#}
{% macro _check_upsert_batch(relation, cfg, batch_columns) %}
    {% set types = dbt_merge._column_types(batch_columns) %}
    {% if cfg.delete_column and types[cfg.delete_column | lower] | lower != 'boolean' %}
        {% set detected = " (Hudi's delete marker, the delete column because delete_column is not set)" if cfg.delete_column_detected else '' %}
        {% do dbt_merge._upsert_error('delete_column', 'column ' ~ cfg.delete_column ~ detected ~ ' has type ' ~ types[cfg.delete_column | lower] ~ ', expected boolean') %}
    {% endif %}
    {% set unordered_delete = dbt_merge._upsert_unordered_delete_sql(cfg) %}
    {% set counts = [] %}
    {% for name in cfg.unique_key %}
        {% do counts.append("count_if(" ~ adapter.quote(name) ~ " is null)") %}
    {% endfor %}
    {% for name in cfg.precombine_key %}
        {% do counts.append("count_if(" ~ adapter.quote(name) ~ " is null and not " ~ unordered_delete ~ ")") %}
    {% endfor %}
    {% if unordered_delete != 'false' %}
        {% do counts.append("count_if(" ~ unordered_delete ~ ")") %}
    {% endif %}
    {% set found = run_query('select ' ~ (counts | join(', ')) ~ ' from ' ~ relation).rows[0] %}
    {% set names = cfg.unique_key + cfg.precombine_key %}
    {% for name in names %}
        {% if found[loop.index0] > 0 and loop.index0 < cfg.unique_key | length %}
            {% do dbt_merge._upsert_error('unique_key', found[loop.index0] ~ ' row(s) of the batch have a null ' ~ name ~ '; a version without a key or an ordering value cannot be merged. Filter or fill them in the model') %}
        {% elif found[loop.index0] > 0 %}
            {% set deletes = ' (a delete, ' ~ cfg.delete_column ~ ' true, may have no ordering value at all: every precombine_key null; it then deletes its key unconditionally)' if cfg.delete_column else '' %}
            {% do dbt_merge._upsert_error('precombine_key', found[loop.index0] ~ ' row(s) of the batch have a null ' ~ name ~ ' and are not deletes without an ordering value; an upsert without an ordering value cannot be ordered' ~ deletes ~ '. Filter or fill them in the model') %}
        {% endif %}
    {% endfor %}
    {{ return({'unordered_deletes': found[names | length] if unordered_delete != 'false' else 0}) }}
{% endmacro %}


{#-- A condition on a batch row (alias.column, or the bare column without alias): a
     delete that has no ordering value (delete column true, every precombine_key column
     null). `false` without a delete column or a precombine_key. --#}
{% macro _upsert_unordered_delete_sql(cfg, alias='') %}
    {%- if not cfg.delete_column or not cfg.precombine_key %}
        {{- return('false') }}
    {%- endif %}
    {%- set prefix = alias ~ '.' if alias else '' %}
    {%- set parts = ['coalesce(' ~ prefix ~ adapter.quote(cfg.delete_column) ~ ', false)'] %}
    {%- for key in cfg.precombine_key %}
        {%- do parts.append(prefix ~ adapter.quote(key) ~ ' is null') %}
    {%- endfor %}
    {{- return('(' ~ (parts | join(' and ')) ~ ')') }}
{% endmacro %}


{#-- What fixes a table's merge behaviour, as stored in its table property dbt_merge.upsert. --#}
{% macro _upsert_table_settings(cfg) %}
    {{ return(tojson({
        'unique_key': cfg.unique_key | map('lower') | list,
        'precombine_key': cfg.precombine_key | map('lower') | list,
        'merge_mode': cfg.merge_mode,
        'partial_update': cfg.partial_update,
        'overwrite_non_defaults': cfg.overwrite_non_defaults,
        'delete_column': (cfg.delete_column | lower) if cfg.delete_column else none,
        'table_type': cfg.table_type,
    }, sort_keys=true)) }}
{% endmacro %}


{#-- Settings added to the lock later, with the value a table stored before them has:
     tables built before table_type existed are copy_on_write. --#}
{% macro _upsert_settings_added_later() %}
    {{ return({'table_type': 'copy_on_write'}) }}
{% endmacro %}


{#-- The mode is fixed once the table exists: a changed config fails and says what changed.
     With adopt, a table without settings (created by an adapter's own first run) gets
     them stored instead. --#}
{% macro _check_upsert_table_settings(relation, settings, cfg, adopt=false) %}
    {% set found = run_query("show tblproperties " ~ relation ~ " ('dbt_merge.upsert')") %}
    {% set stored_text = found.rows[0][1] if found.rows | length > 0 else '' %}
    {% if adopt and not (stored_text | string).startswith('{') %}
        {% do dbt_merge._store_upsert_table_settings(relation, settings, cfg) %}
        {{ return(none) }}
    {% endif %}
    {% if not (stored_text | string).startswith('{') %}
        {% do dbt_merge._upsert_error('incremental_strategy', 'table ' ~ relation ~ ' was not built by the upsert strategy (it has no dbt_merge.upsert table property); run with --full-refresh to rebuild it') %}
    {% endif %}
    {% set stored = dbt_merge._upsert_settings_added_later() %}
    {% do stored.update(fromjson(stored_text)) %}
    {% set wanted = fromjson(settings) %}
    {% set changes = [] %}
    {% for key in wanted | sort if stored.get(key) != wanted[key] %}
        {% do changes.append(key ~ ': ' ~ stored.get(key) ~ ' -> ' ~ wanted[key]) %}
    {% endfor %}
    {% if changes %}
        {% do dbt_merge._upsert_error(changes[0].split(':')[0], 'table ' ~ relation ~ ' was built with other merge settings (' ~ (changes | join('; ')) ~ '). They are fixed once the table exists: run with --full-refresh to rebuild it with the new ones') %}
    {% endif %}
{% endmacro %}


{#-- One commit stores the lock and the table type's write properties, so a table
     that has the settings also writes the way they say. --#}
{% macro _store_upsert_table_settings(relation, settings, cfg) %}
    {% set properties = {'dbt_merge.upsert': settings} %}
    {% do properties.update(dbt_merge._upsert_table_type_properties(cfg)) %}
    {% call statement('upsert_settings') %}
        alter table {{ relation }} set tblproperties ({{ dbt_merge._sql_properties(properties) }})
    {% endcall %}
{% endmacro %}


{#-- The table properties of a table type. Iceberg (format version 2, the default of
     Iceberg 1.10): the write modes of MERGE, UPDATE and DELETE (copy-on-write or
     merge-on-read; apache/iceberg docs/docs/configuration.md). Delta: deletion vectors
     (docs.delta.io/latest/delta-deletion-vectors.html), off for copy_on_write so that
     a workspace default does not turn the table into merge-on-read. --#}
{% macro _upsert_table_type_properties(cfg) %}
    {% set merge_on_read = cfg.table_type == 'merge_on_read' %}
    {% if cfg.file_format == 'iceberg' %}
        {% set mode = 'merge-on-read' if merge_on_read else 'copy-on-write' %}
        {{ return({'write.merge.mode': mode, 'write.update.mode': mode, 'write.delete.mode': mode}) }}
    {% elif cfg.file_format == 'delta' %}
        {{ return({'delta.enableDeletionVectors': 'true' if merge_on_read else 'false'}) }}
    {% endif %}
    {{ return({}) }}
{% endmacro %}
