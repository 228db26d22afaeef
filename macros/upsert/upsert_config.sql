{#--
    The upsert settings of the current model (incremental_strategy='upsert'), checked and
    resolved: the Hudi `payload` aliases mapped onto merge_mode / partial_update /
    overwrite_non_defaults, keys as lists, the table type (copy_on_write by default, or
    merge_on_read). With `columns` (the batch's column names) the
    key, ordering and delete columns are checked against the model too. Every error
    names the model, the setting and the value, and comes before anything is written.
--#}
{% macro upsert_config(columns=none) %}
    {{ return(adapter.dispatch('upsert_config', 'dbt_merge')(columns)) }}
{% endmacro %}


{% macro _upsert_settings() %}
    {{ return({
        'merge_modes': ['event_time_ordering', 'commit_time_ordering', 'custom'],
        'table_types': ['copy_on_write', 'merge_on_read'],
        'payloads': {
            'OverwriteWithLatestAvroPayload': {'merge_mode': 'commit_time_ordering', 'partial_update': false, 'overwrite_non_defaults': false},
            'DefaultHoodieRecordPayload': {'merge_mode': 'event_time_ordering', 'partial_update': false, 'overwrite_non_defaults': false},
            'EventTimeAvroPayload': {'merge_mode': 'event_time_ordering', 'partial_update': false, 'overwrite_non_defaults': false},
            'OverwriteNonDefaultsWithLatestAvroPayload': {'merge_mode': 'commit_time_ordering', 'partial_update': false, 'overwrite_non_defaults': true},
            'PartialUpdateAvroPayload': {'merge_mode': 'event_time_ordering', 'partial_update': true, 'overwrite_non_defaults': false},
        },
        'defaults': {'merge_mode': 'event_time_ordering', 'partial_update': false, 'overwrite_non_defaults': false},
        'table_type_default': 'copy_on_write',
        'hudi_delete_marker': '_hoodie_is_deleted',
        'config_keys': ['unique_key', 'precombine_key', 'merge_mode', 'partial_update',
                        'overwrite_non_defaults', 'delete_column', 'arrival_column',
                        'custom_merger', 'payload', 'provenance', 'table_type',
                        'inline_compaction'],
    }) }}
{% endmacro %}


{% macro _upsert_error(setting, message) %}
    {% set msg -%}
        dbt_merge upsert in model {{ model.name }}, config '{{ setting }}': {{ message }}
    {%- endset %}
    {% do exceptions.raise_compiler_error(msg) %}
{% endmacro %}


{#-- A key setting as a list of names: a string, a list of strings, or none. --#}
{% macro _upsert_names(setting, value) %}
    {% if value is none %}
        {{ return([]) }}
    {% elif value is string %}
        {{ return([value] if value.strip() else []) }}
    {% elif value is sequence and value is not mapping %}
        {% for name in value if name is not string or not name.strip() %}
            {% do dbt_merge._upsert_error(setting, 'expected column names but received the value: ' ~ value) %}
        {% endfor %}
        {{ return(value | list) }}
    {% endif %}
    {% do dbt_merge._upsert_error(setting, 'expected a column name or a list of column names but received the value: ' ~ value) %}
{% endmacro %}


{% macro default__upsert_config(columns) %}
    {% set known = dbt_merge._upsert_settings() %}
    {% do dbt_merge._check_upsert_config_keys(known) %}
    {% set resolved = dbt_merge._upsert_mode_config(known) %}
    {% do resolved.update(dbt_merge._upsert_table_type_config(known)) %}
    {% do resolved.update(dbt_merge._upsert_column_config(resolved, columns)) %}
    {{ return(resolved) }}
{% endmacro %}


{#-- The merge mode and its flags: a Hudi payload alias or the settings themselves,
     and the combinations that contradict each other. --#}
{% macro _upsert_mode_config(known) %}
    {% set resolved = {} %}
    {% set payload = config.get('payload') %}
    {% if payload is not none %}
        {% if payload not in known.payloads %}
            {% do dbt_merge._upsert_error('payload', 'invalid payload provided: ' ~ payload ~ '. Expected one of: ' ~ (known.payloads.keys() | join(', '))) %}
        {% endif %}
        {% for setting, implied in known.payloads[payload].items() %}
            {% set explicit = config.get(setting) %}
            {% if explicit is not none and explicit != implied %}
                {% do dbt_merge._upsert_error(setting, 'is set to ' ~ explicit ~ ' but payload ' ~ payload ~ ' means ' ~ setting ~ ' = ' ~ implied ~ '. Remove one of the two') %}
            {% endif %}
            {% do resolved.update({setting: implied}) %}
        {% endfor %}
    {% else %}
        {% for setting, default in known.defaults.items() %}
            {% set value = config.get(setting) %}
            {% do resolved.update({setting: default if value is none else value}) %}
        {% endfor %}
    {% endif %}

    {% if resolved.merge_mode not in known.merge_modes %}
        {% do dbt_merge._upsert_error('merge_mode', 'invalid merge mode provided: ' ~ resolved.merge_mode ~ '. Expected one of: ' ~ (known.merge_modes | join(', '))) %}
    {% endif %}
    {% do resolved.update({'provenance': config.get('provenance', false)}) %}
    {% for setting in ['partial_update', 'overwrite_non_defaults', 'provenance'] %}
        {% if resolved[setting] is not boolean %}
            {% do dbt_merge._upsert_error(setting, 'expected true or false but received the value: ' ~ resolved[setting]) %}
        {% endif %}
    {% endfor %}
    {% if resolved.partial_update and resolved.overwrite_non_defaults %}
        {% do dbt_merge._upsert_error('partial_update', 'both partial_update and overwrite_non_defaults are true; only one is allowed') %}
    {% endif %}
    {% for setting in ['partial_update', 'overwrite_non_defaults'] if resolved.merge_mode == 'custom' and resolved[setting] %}
        {% do dbt_merge._upsert_error(setting, 'is true, but merge_mode custom renders every column with custom_merger, which ' ~ setting ~ ' would override. Only one is allowed: remove ' ~ setting ~ ' or use another merge_mode') %}
    {% endfor %}

    {% do resolved.update({'payload': payload}) %}
    {{ return(resolved) }}
{% endmacro %}


{#-- The table type (copy_on_write or merge_on_read), the file format it needs, and
     inline compaction's thresholds. --#}
{% macro _upsert_table_type_config(known) %}
    {#-- Hudi's table types: copy_on_write rewrites the data files that hold a changed
         key; merge_on_read writes the changed rows and row-level deletes (Iceberg
         position deletes, Delta deletion vectors) that compaction folds back --#}
    {% set table_type = config.get('table_type') or known.table_type_default %}
    {% if table_type not in known.table_types %}
        {% do dbt_merge._upsert_error('table_type', 'invalid table type provided: ' ~ table_type ~ '. Expected one of: ' ~ (known.table_types | join(', '))) %}
    {% endif %}
    {#-- dbt-databricks builds delta tables unless told otherwise --#}
    {% set file_format = config.get('file_format') or ('delta' if adapter.type() == 'databricks' else 'parquet') %}
    {% if table_type == 'merge_on_read' and file_format not in ['iceberg', 'delta'] %}
        {% do dbt_merge._upsert_error('table_type', 'merge_on_read needs row-level deletes: file_format iceberg (position deletes) or delta (deletion vectors), not ' ~ file_format) %}
    {% endif %}
    {% do dbt_merge._check_upsert_tblproperties(table_type, file_format) %}

    {#-- compaction at the end of a run, of the data files past these thresholds --#}
    {% set inline_compaction = config.get('inline_compaction') %}
    {% if inline_compaction is not none %}
        {% set inline_compaction = dbt_merge._upsert_compaction_thresholds('inline_compaction', inline_compaction) %}
        {% if table_type != 'merge_on_read' %}
            {% do dbt_merge._upsert_error('inline_compaction', 'is set but table_type is ' ~ table_type ~ ': only merge_on_read tables have row-level deletes to compact') %}
        {% elif file_format not in ['iceberg', 'delta'] %}
            {% do dbt_merge._upsert_error('inline_compaction', 'needs file_format iceberg (its metadata tables and rewrite_data_files) or delta (REORG TABLE ... APPLY (PURGE)), not ' ~ file_format) %}
        {% endif %}
    {% endif %}

    {{ return({'table_type': table_type, 'file_format': file_format, 'inline_compaction': inline_compaction}) }}
{% endmacro %}


{#-- The key, ordering, delete and arrival columns and the custom merger, checked
     against the mode and, given the batch's column names, against the model. --#}
{% macro _upsert_column_config(resolved, columns) %}
    {% set unique_key = dbt_merge._upsert_names('unique_key', config.get('unique_key')) %}
    {% if not unique_key %}
        {% do dbt_merge._upsert_error('unique_key', 'the upsert strategy needs a unique_key (one column or a list)') %}
    {% endif %}
    {% set precombine_key = dbt_merge._upsert_names('precombine_key', config.get('precombine_key')) %}
    {% if not precombine_key and (resolved.merge_mode == 'event_time_ordering' or resolved.partial_update) %}
        {% do dbt_merge._upsert_error('precombine_key', 'merge_mode ' ~ resolved.merge_mode ~ (' with partial_update' if resolved.partial_update else '') ~ ' orders versions by it: set precombine_key (one column or a list)') %}
    {% endif %}
    {% set delete_column = config.get('delete_column') %}
    {% set delete_column_detected = false %}
    {% set arrival_column = config.get('arrival_column') %}
    {% for setting, value in [('delete_column', delete_column), ('arrival_column', arrival_column)] %}
        {% if value is not none and (value is not string or not value.strip()) %}
            {% do dbt_merge._upsert_error(setting, 'expected a column name but received the value: ' ~ value) %}
        {% endif %}
    {% endfor %}

    {% set custom_merger = config.get('custom_merger') %}
    {% if resolved.merge_mode == 'custom' %}
        {% if custom_merger is none %}
            {% do dbt_merge._upsert_error('custom_merger', "merge_mode custom needs custom_merger: the name of a macro (column, source, target) that renders a column's merged value") %}
        {% elif custom_merger not in context %}
            {% do dbt_merge._upsert_error('custom_merger', 'no macro named ' ~ custom_merger ~ ' in this project') %}
        {% endif %}
    {% elif custom_merger is not none %}
        {% do dbt_merge._upsert_error('custom_merger', 'is set but merge_mode is ' ~ resolved.merge_mode ~ '; custom_merger needs merge_mode custom') %}
    {% endif %}

    {% if columns is not none %}
        {% set present = columns | map('lower') | list %}
        {#-- Hudi honours a boolean _hoodie_is_deleted column without configuration
             (apache/hudi HoodieRecord.HOODIE_IS_DELETED_FIELD, read by BaseAvroPayload and
             so by its default payloads): so does the upsert, when no delete_column is set --#}
        {% set hudi_marker = dbt_merge._upsert_settings().hudi_delete_marker %}
        {% if delete_column is none and hudi_marker in present %}
            {% set delete_column = columns[present.index(hudi_marker)] %}
            {% set delete_column_detected = true %}
            {{ log('dbt_merge upsert in model ' ~ model.name ~ ": delete_column is not set and the batch has Hudi's " ~ delete_column ~ ' column: it is the delete column (a row where it is true deletes its key). Set delete_column to use another column', info=true) }}
        {% endif %}
        {% for setting, names in [('unique_key', unique_key), ('precombine_key', precombine_key), ('delete_column', [delete_column] if delete_column else []), ('arrival_column', [arrival_column] if arrival_column else [])] %}
            {% for name in names if name | lower not in present %}
                {% do dbt_merge._upsert_error(setting, 'column ' ~ name ~ ' is not in the model. Its columns: ' ~ (columns | join(', '))) %}
            {% endfor %}
        {% endfor %}
    {% endif %}

    {{ return({
        'unique_key': unique_key,
        'precombine_key': precombine_key,
        'delete_column': delete_column,
        'delete_column_detected': delete_column_detected,
        'arrival_column': arrival_column,
        'custom_merger': custom_merger,
    }) }}
{% endmacro %}


{#-- A config key that is not an upsert setting but looks like one (case, dashes and
     underscores aside: the same name, a plural, or at most two letters more or less
     at the end) is a typo that would be silently ignored: fail and name the setting
     it resembles. Other unknown keys belong to dbt, the adapter or the user. --#}
{% macro _check_upsert_config_keys(known) %}
    {% set settings = known.config_keys %}
    {% set normalized = {} %}
    {% for name in settings %}{% do normalized.update({name: name | lower | replace('_', '')}) %}{% endfor %}
    {% for key in (model.config or {}).keys() if key not in settings %}
        {% set typed = key | lower | replace('_', '') | replace('-', '') %}
        {% for name, wanted in normalized.items() %}
            {% set longer, shorter = (typed, wanted) if typed | length >= wanted | length else (wanted, typed) %}
            {% if typed == wanted or (longer.startswith(shorter) and longer | length - shorter | length <= 2 and shorter | length >= 6) %}
                {% do dbt_merge._upsert_error(key, 'Cannot use options [' ~ key ~ '], they are not supported by the upsert strategy. Did you mean ' ~ name ~ '?') %}
            {% endif %}
        {% endfor %}
    {% endfor %}
{% endmacro %}


{#-- The model's own tblproperties must not contradict its table type: the write modes
     (and format version 1, which has no row-level deletes) on Iceberg, deletion
     vectors on Delta. dbt_merge sets these itself (_upsert_table_type_properties). --#}
{% macro _check_upsert_tblproperties(table_type, file_format) %}
    {% set given = config.get('tblproperties') or {} %}
    {% if given is not mapping %}
        {{ return(none) }}
    {% endif %}
    {% set wanted = dbt_merge._upsert_table_type_properties({'table_type': table_type, 'file_format': file_format}) %}
    {% for key, value in given.items() if key in wanted and (value | string | lower) != wanted[key] %}
        {% do dbt_merge._upsert_error('tblproperties', "sets '" ~ key ~ "' = '" ~ value ~ "', but table_type " ~ table_type ~ " writes '" ~ wanted[key] ~ "' there (dbt_merge sets it): remove it from tblproperties, or choose the table_type that matches") %}
    {% endfor %}
    {% if table_type == 'merge_on_read' and file_format == 'iceberg' and (given.get('format-version') | string) == '1' %}
        {% do dbt_merge._upsert_error('tblproperties', "sets 'format-version' = '1', but table_type merge_on_read writes position deletes, which need Iceberg format version 2 or later") %}
    {% endif %}
{% endmacro %}
