{#--
    The datasets of an entity merge: the declared entries, their columns as the warehouse
    has them, and the properties they bring (one column per property across datasets).
--#}

{#-- The datasets, "<model or seed name> <alias>" in declaration order (the position is
     the offset), each ref()'d for its relation. --#}
{% macro _entity_merge_datasets(merge_name, raw_datasets) %}
    {% if raw_datasets is string or raw_datasets is not sequence or raw_datasets | length == 0 %}
        {% do dbt_merge._entity_merge_error(merge_name, 'datasets', 'expected a non-empty list of "<model or seed name> <alias>" but received the value: ' ~ raw_datasets) %}
    {% endif %}
    {% set datasets = [] %}
    {% set by_alias = {} %}
    {% for entry in raw_datasets %}
        {% set parts = (entry | string).split() %}
        {% if entry is not string or parts | length not in [1, 2] %}
            {% do dbt_merge._entity_merge_error(merge_name, 'datasets', 'entry ' ~ loop.index0 ~ ' is ' ~ entry ~ ', expected "<model or seed name> <alias>"') %}
        {% endif %}
        {% set alias = parts[-1] %}
        {% if not modules.re.match('^[A-Za-z_][A-Za-z0-9_]*$', alias) %}
            {% do dbt_merge._entity_merge_error(merge_name, 'datasets', 'alias ' ~ alias ~ ' of entry ' ~ loop.index0 ~ ' is not a plain identifier') %}
        {% endif %}
        {% if alias | lower in by_alias %}
            {% do dbt_merge._entity_merge_error(merge_name, 'datasets', 'duplicate alias ' ~ alias ~ ': used by ' ~ by_alias[alias | lower].name ~ ' and ' ~ parts[0]) %}
        {% endif %}
        {% set dataset = {
            'name': parts[0], 'alias': alias, 'offset': loop.index0,
            'relation': ref(parts[0]), 'columns': {}, 'column_names': {},
        } %}
        {% do datasets.append(dataset) %}
        {% do by_alias.update({alias | lower: dataset}) %}
    {% endfor %}
    {{ return(datasets) }}
{% endmacro %}


{#-- Reads a dataset's columns and types into it (lower-cased name -> type, and -> name),
     with the SQL of its id, deleted flag and $ids; the id column must exist and the
     deleted column, where there is one, be boolean. --#}
{% macro _entity_merge_dataset_columns(spec, dataset) %}
    {% set id_key = spec.id_column | lower %}
    {% set deleted_key = spec.deleted_column | lower %}
    {% set columns = adapter.get_columns_in_relation(dataset.relation) %}
    {% do dataset.columns.update(dbt_merge._column_types(columns)) %}
    {% for column in columns %}
        {% do dataset.column_names.update({column.name | lower: column.name}) %}
    {% endfor %}
    {% if dataset.columns | length == 0 %}
        {% do dbt_merge._entity_merge_error(spec.name, 'datasets', 'dataset ' ~ dataset.name ~ ' (alias ' ~ dataset.alias ~ ') was not found or has no columns; build it first') %}
    {% endif %}
    {% if id_key not in dataset.columns %}
        {% do dbt_merge._entity_merge_error(spec.name, 'id_column', 'dataset ' ~ dataset.name ~ ' (alias ' ~ dataset.alias ~ ') has no id column ' ~ spec.id_column ~ '. Its columns: ' ~ (dataset.column_names.values() | join(', '))) %}
    {% endif %}
    {% do dbt_merge._check_entity_dataset_reserved_columns(spec, dataset) %}
    {% do dataset.update({
        'id_sql': adapter.quote(dataset.column_names[id_key]),
        'deleted_sql': adapter.quote(dataset.column_names[deleted_key]) if deleted_key in dataset.columns else none,
        'ids_sql': adapter.quote(dataset.column_names['$ids']) if '$ids' in dataset.columns else none,
    }) %}
    {% if dataset.deleted_sql and dataset.columns[deleted_key] | lower != 'boolean' %}
        {% do dbt_merge._entity_merge_error(spec.name, 'deleted_column', 'column ' ~ spec.deleted_column ~ ' of dataset ' ~ dataset.name ~ ' has type ' ~ dataset.columns[deleted_key] ~ ', expected boolean') %}
    {% endif %}
{% endmacro %}


{#-- The id and deleted columns the merge reads must not take a name Iceberg reserves
     for a metadata column (Sesam's default deleted column `_deleted` is one): Spark
     cannot read such a column of an Iceberg table, and the run would fail in the middle
     with Iceberg's ValidationException. Fails at compile time instead, before anything
     is written, and says both ways out. --#}
{% macro _check_entity_dataset_reserved_columns(spec, dataset) %}
    {% set reserved = dbt_merge._entity_merge_settings().iceberg_reserved_columns %}
    {% set read = [] %}
    {% for setting in ['id_column', 'deleted_column'] if spec[setting] | lower in reserved and spec[setting] | lower in dataset.columns %}
        {% do read.append(setting) %}
    {% endfor %}
    {% if read and dbt_merge._table_provider(dataset.relation) == 'iceberg' %}
        {% set setting = read[0] %}
        {% set column = dataset.column_names[spec[setting] | lower] %}
        {% do dbt_merge._entity_merge_error(spec.name, setting, 'dataset ' ~ dataset.name ~ ' (alias ' ~ dataset.alias ~ ') is an Iceberg table with a column ' ~ column ~ ', a name Iceberg reserves for its metadata column, so Spark cannot read it. Either set ' ~ setting ~ ': <another name> in the merge and give the column that name in ' ~ dataset.name ~ ', or build ' ~ dataset.name ~ ' in another file format (file_format: parquet or delta). Nothing was written') %}
    {% endif %}
{% endmacro %}


{#-- Adds a dataset's properties to properties (lower-cased name -> {name, type,
     datasets}): every column but the id, the deleted flag and names starting with _ or
     $. A property has one type across datasets (integral types as bigint, float as
     double), and no property takes the name of an output column. --#}
{% macro _entity_merge_add_properties(spec, dataset, properties) %}
    {% set known = dbt_merge._entity_merge_settings() %}
    {% set reserved = [spec.id_column | lower, spec.deleted_column | lower] %}
    {% for key, data_type in dataset.columns.items() if key not in reserved and not key.startswith('_') and not key.startswith('$') %}
        {% set element = dbt_merge._array_element_type(data_type) %}
        {% set normalized = dbt_merge._normalized_type(element if element else data_type) %}
        {% set name = dataset.column_names[key] %}
        {% if key in known.output_columns %}
            {% do dbt_merge._entity_merge_error(spec.name, 'datasets', 'property ' ~ name ~ ' of dataset ' ~ dataset.name ~ ' has the name of an output column; rename it in a model before the merge') %}
        {% endif %}
        {% if key in properties and properties[key].type != normalized %}
            {% do dbt_merge._entity_merge_error(spec.name, 'datasets', 'property ' ~ name ~ ' has type ' ~ properties[key].type ~ ' in ' ~ (properties[key].datasets | join(', ')) ~ ' but ' ~ normalized ~ ' in ' ~ dataset.name ~ '; cast it to one type in a model before the merge') %}
        {% endif %}
        {% if key not in properties %}
            {% do properties.update({key: {'name': name, 'type': normalized, 'datasets': []}}) %}
        {% endif %}
        {% do properties[key].datasets.append(dataset.name) %}
    {% endfor %}
{% endmacro %}


{#-- change_columns (alias -> column): a dataset whose records carry a column that grows
     whenever a record changes (an update time, a version). A change-following run then
     reads only its rows at or after the largest value it has stored (plus rows with a
     null value), instead of every row. Sets dataset.change_sql (the quoted column) and
     dataset.change_mark_sql (its value as a bigint: microseconds, days or the number)
     and dataset.change_from_sql (a format string: a mark back in the column's type),
     none for the other datasets. The column must be a timestamp, a date or an integer. --#}
{% macro _entity_merge_change_columns(spec, change_columns, datasets) %}
    {% if change_columns is not mapping %}
        {% do dbt_merge._entity_merge_error(spec.name, 'change_columns', 'expected a mapping of dataset alias to column but received the value: ' ~ change_columns) %}
    {% endif %}
    {% set by_alias = {} %}
    {% for dataset in datasets %}
        {% do dataset.update({'change_sql': none, 'change_mark_sql': none, 'change_from_sql': none}) %}
        {% do by_alias.update({dataset.alias | lower: dataset}) %}
    {% endfor %}
    {% set marks = {
        'timestamp': 'unix_micros({})', 'date': 'unix_date({})', 'bigint': 'cast({} as bigint)',
        'int': 'cast({} as bigint)', 'smallint': 'cast({} as bigint)', 'tinyint': 'cast({} as bigint)',
    } %}
    {#-- a mark back in the column's type, so that the filter prunes files by their stats --#}
    {% set froms = {'timestamp': 'timestamp_micros({})', 'date': 'date_from_unix_date({})'} %}
    {% for alias, column in change_columns.items() %}
        {% if (alias | string | lower) not in by_alias %}
            {% do dbt_merge._entity_merge_error(spec.name, 'change_columns', 'names the alias ' ~ alias ~ ', which is not a dataset of the merge. Its aliases: ' ~ (datasets | map(attribute='alias') | join(', '))) %}
        {% endif %}
        {% set dataset = by_alias[alias | string | lower] %}
        {% if column is not string or (column | lower) not in dataset.columns %}
            {% do dbt_merge._entity_merge_error(spec.name, 'change_columns', 'dataset ' ~ dataset.name ~ ' (alias ' ~ dataset.alias ~ ') has no column ' ~ column ~ '. Its columns: ' ~ (dataset.column_names.values() | join(', '))) %}
        {% endif %}
        {% set data_type = dataset.columns[column | lower] | lower %}
        {% if data_type not in marks %}
            {% do dbt_merge._entity_merge_error(spec.name, 'change_columns', 'column ' ~ column ~ ' of dataset ' ~ dataset.name ~ ' has type ' ~ data_type ~ '; a change column must be a timestamp, a date or an integer') %}
        {% endif %}
        {% set quoted = dataset.alias ~ '.' ~ adapter.quote(dataset.column_names[column | lower]) %}
        {% do dataset.update({
            'change_sql': quoted,
            'change_mark_sql': marks[data_type].format(quoted),
            'change_from_sql': froms.get(data_type, '{}'),
        }) %}
    {% endfor %}
{% endmacro %}
