{#--
    The declaration of one entity merge (vars: dbt_merge: entity_merges: <name>), checked
    and resolved into a plain dict the SQL macros render from. Every error names the
    merge, the setting and the value. At parse time (execute is false) the datasets are
    only ref()'d (_entity_merge_parse_spec), so lineage shows in dbt docs.

    In the order the checks run: the declaration and its scalar settings
    (_entity_merge_settings.sql), the datasets with their columns and properties
    (_entity_merge_datasets.sql), the equality rules and their operands
    (_entity_merge_rules.sql, _entity_merge_operand.sql).
--#}

{% macro _entity_merge_spec(merge_name) %}
    {% set all_vars = var('dbt_merge', {}) %}
    {% set merges = all_vars.get('entity_merges', {}) if all_vars is mapping else {} %}
    {% if not execute %}
        {{ return(dbt_merge._entity_merge_parse_spec(merge_name, merges)) }}
    {% endif %}
    {% set decl = dbt_merge._entity_merge_declaration(merge_name, merges) %}
    {% set spec = dbt_merge._entity_merge_options(merge_name, decl) %}
    {% set datasets = dbt_merge._entity_merge_datasets(merge_name, decl.get('datasets')) %}
    {% set properties = {} %}
    {% for dataset in datasets %}
        {% do dbt_merge._entity_merge_dataset_columns(spec, dataset) %}
        {% do dbt_merge._entity_merge_add_properties(spec, dataset, properties) %}
    {% endfor %}
    {% do dbt_merge._entity_merge_change_columns(spec, decl.get('change_columns', {}), datasets) %}
    {% set rules = dbt_merge._entity_merge_rules(merge_name, decl) %}
    {% do spec.update({
        'declaration': dbt_merge._entity_merge_locked_settings(spec, decl),
        'datasets': datasets,
        'properties': properties,
        'groups': dbt_merge._entity_merge_groups(merge_name, rules, datasets),
    }) %}
    {{ return(spec) }}
{% endmacro %}


{#-- While dbt parses: only ref() the datasets, which puts them in the lineage. Nothing
     is checked yet, so a package whose (disabled) models use a merge the installing
     project does not declare still parses; the checks run when the model compiles. --#}
{% macro _entity_merge_parse_spec(merge_name, merges) %}
    {% set decl = merges.get(merge_name) if merges is mapping else none %}
    {% set raw_datasets = decl.get('datasets') if decl is mapping else none %}
    {% if raw_datasets is string or raw_datasets is not sequence %}
        {% set raw_datasets = [] %}
    {% endif %}
    {% for entry in raw_datasets if entry is string and entry.split() | length in [1, 2] %}
        {% do ref(entry.split()[0]) %}
    {% endfor %}
    {{ return({'name': merge_name, 'datasets': [], 'groups': [], 'properties': {}}) }}
{% endmacro %}
