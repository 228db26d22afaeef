{#--
    The settings of an entity merge declaration: what may be declared, and the checks of
    the declaration itself and of its scalar settings (identity, strategy, max_merged,
    the column names). Every error names the merge, the setting and the value.
--#}

{#-- iceberg_reserved_columns: Iceberg's metadata columns (MetadataColumns;
     `describe table extended` of an Iceberg 1.10 table lists them). A data column of
     one of these names cannot be read through Spark (ValidationException "Table column
     names conflict with names reserved for Iceberg metadata columns"). --#}
{% macro _entity_merge_settings() %}
    {{ return({
        'settings': ['datasets', 'equality', 'equality_sets', 'identity', 'strategy',
                     'max_merged', 'id_column', 'deleted_column', 'change_columns'],
        'identities': ['composite', 'first'],
        'strategies': dbt_merge._entity_strategies().keys() | list,
        'functions': {
            'lower': 'lower({})', 'upper': 'upper({})', 'trim': 'trim({})',
            'ltrim': 'ltrim({})', 'rtrim': 'rtrim({})', 'string': 'cast({} as string)',
        },
        'output_columns': ['entity', '$merged'],
        'iceberg_reserved_columns': ['_spec_id', '_partition', '_file', '_pos', '_deleted',
                                     '_row_id', '_last_updated_sequence_number'],
        'max_merged_default': 50000,
    }) }}
{% endmacro %}


{% macro _entity_merge_error(merge_name, setting, message) %}
    {% set msg -%}
        dbt_merge: entity merge '{{ merge_name }}', setting '{{ setting }}': {{ message }}
    {%- endset %}
    {% do exceptions.raise_compiler_error(msg) %}
{% endmacro %}


{#-- The declaration of the merge under vars: dbt_merge: entity_merges: a mapping of
     known settings. --#}
{% macro _entity_merge_declaration(merge_name, merges) %}
    {% set known = dbt_merge._entity_merge_settings() %}
    {% if merges is not mapping or merge_name not in merges %}
        {% set msg -%}
            dbt_merge: unknown entity merge '{{ merge_name }}'. Declared merges: [{{ (merges.keys() | list | sort | join(', ')) if merges is mapping else '' }}]. Declare it under vars: dbt_merge: entity_merges: {{ merge_name }}.
        {%- endset %}
        {% do exceptions.raise_compiler_error(msg) %}
    {% endif %}
    {% set decl = merges[merge_name] %}
    {% if decl is not mapping %}
        {% do dbt_merge._entity_merge_error(merge_name, merge_name, 'expected a mapping of settings but received the value: ' ~ decl) %}
    {% endif %}
    {% set unknown = decl | reject('in', known.settings) | list %}
    {% if unknown %}
        {% do dbt_merge._entity_merge_error(merge_name, unknown | join(', '), 'cannot use settings [' ~ (unknown | join(', ')) ~ '], they are not supported. Expected some of: ' ~ (known.settings | join(', '))) %}
    {% endif %}
    {{ return(decl) }}
{% endmacro %}


{#-- The scalar settings with their defaults, checked: {name, identity, strategy,
     max_merged, id_column, deleted_column}. --#}
{% macro _entity_merge_options(merge_name, decl) %}
    {% set known = dbt_merge._entity_merge_settings() %}
    {% set identity = decl.get('identity', 'composite') %}
    {% if identity not in known.identities %}
        {% do dbt_merge._entity_merge_error(merge_name, 'identity', 'invalid identity provided: ' ~ identity ~ '. Expected one of: ' ~ (known.identities | join(', '))) %}
    {% endif %}
    {% set strategy = decl.get('strategy', 'default') %}
    {% if strategy not in known.strategies %}
        {% do dbt_merge._entity_merge_error(merge_name, 'strategy', 'invalid merge strategy provided: ' ~ strategy ~ '. Expected one of: ' ~ (known.strategies | join(', '))) %}
    {% endif %}
    {% set max_merged = decl.get('max_merged', known.max_merged_default) %}
    {% if max_merged is not integer or max_merged < 1 %}
        {% do dbt_merge._entity_merge_error(merge_name, 'max_merged', 'is set to ' ~ max_merged ~ ' but must be a positive integer') %}
    {% endif %}
    {% set id_column = decl.get('id_column', '_id') %}
    {% set deleted_column = decl.get('deleted_column', '_deleted') %}
    {% for setting, value in [('id_column', id_column), ('deleted_column', deleted_column)] %}
        {% if value is not string or not value.strip() %}
            {% do dbt_merge._entity_merge_error(merge_name, setting, 'expected a column name but received the value: ' ~ value) %}
        {% endif %}
    {% endfor %}
    {{ return({
        'name': merge_name,
        'identity': identity,
        'strategy': strategy,
        'max_merged': max_merged,
        'id_column': id_column,
        'deleted_column': deleted_column,
    }) }}
{% endmacro %}
