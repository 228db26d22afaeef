{% macro _entity_merge_settings() %}
    {{ return({
        'settings': ['datasets', 'equality', 'equality_sets', 'identity', 'strategy',
                     'max_merged', 'id_column', 'deleted_column'],
        'identities': ['composite', 'first'],
        'strategies': ['default', 'compact', 'list'],
        'functions': {
            'lower': 'lower({})', 'upper': 'upper({})', 'trim': 'trim({})',
            'ltrim': 'ltrim({})', 'rtrim': 'rtrim({})', 'string': 'cast({} as string)',
        },
        'output_columns': ['entity', '$merged'],
        'max_merged_default': 50000,
    }) }}
{% endmacro %}


{% macro _entity_merge_error(merge_name, setting, message) %}
    {% set msg -%}
        dbt_merge: entity merge '{{ merge_name }}', setting '{{ setting }}': {{ message }}
    {%- endset %}
    {% do exceptions.raise_compiler_error(msg) %}
{% endmacro %}
