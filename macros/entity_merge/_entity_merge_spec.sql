{#--
    The declaration of one entity merge (vars: dbt_merge: entity_merges: <name>), checked
    and resolved into a plain dict the SQL macros render from. Every error names the
    merge, the setting and the value. At parse time (execute is false) the datasets are
    only ref()'d (_entity_merge_parse_spec), so lineage shows in dbt docs.
--#}

{% macro _entity_merge_spec(merge_name) %}
    {% set all_vars = var('dbt_merge', {}) %}
    {% set merges = all_vars.get('entity_merges', {}) if all_vars is mapping else {} %}
    {% if not execute %}
        {{ return(dbt_merge._entity_merge_parse_spec(merge_name, merges)) }}
    {% endif %}
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
    {% set unknown = [] %}
    {% for key in decl %}
        {% if key not in known.settings %}{% do unknown.append(key) %}{% endif %}
    {% endfor %}
    {% if unknown %}
        {% do dbt_merge._entity_merge_error(merge_name, unknown | join(', '), 'cannot use settings [' ~ (unknown | join(', ')) ~ '], they are not supported. Expected some of: ' ~ (known.settings | join(', '))) %}
    {% endif %}

    {#-- identity, strategy, max_merged, column names --#}
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

    {#-- datasets: "<model or seed> <alias>", position = offset --#}
    {% set raw_datasets = decl.get('datasets') %}
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
        {#-- ref() even at parse time: this is what puts the edge in dbt's DAG --#}
        {% set dataset = {
            'name': parts[0], 'alias': alias, 'offset': loop.index0,
            'relation': ref(parts[0]), 'columns': {}, 'column_names': {},
        } %}
        {% do datasets.append(dataset) %}
        {% do by_alias.update({alias | lower: dataset}) %}
    {% endfor %}

    {#-- columns, types, properties --#}
    {% set properties = {} %}
        {% for dataset in datasets %}
            {% for column in adapter.get_columns_in_relation(dataset.relation) %}
                {% do dataset.columns.update({column.name | lower: column.dtype | string}) %}
                {% do dataset.column_names.update({column.name | lower: column.name}) %}
            {% endfor %}
            {% if dataset.columns | length == 0 %}
                {% do dbt_merge._entity_merge_error(merge_name, 'datasets', 'dataset ' ~ dataset.name ~ ' (alias ' ~ dataset.alias ~ ') was not found or has no columns; build it first') %}
            {% endif %}
            {% if id_column | lower not in dataset.columns %}
                {% do dbt_merge._entity_merge_error(merge_name, 'id_column', 'dataset ' ~ dataset.name ~ ' (alias ' ~ dataset.alias ~ ') has no id column ' ~ id_column ~ '. Its columns: ' ~ (dataset.column_names.values() | join(', '))) %}
            {% endif %}
            {% do dataset.update({
                'id_sql': adapter.quote(dataset.column_names[id_column | lower]),
                'deleted_sql': adapter.quote(dataset.column_names[deleted_column | lower]) if deleted_column | lower in dataset.columns else none,
                'ids_sql': adapter.quote(dataset.column_names['$ids']) if '$ids' in dataset.columns else none,
            }) %}
            {% if dataset.deleted_sql and dataset.columns[deleted_column | lower] | lower != 'boolean' %}
                {% do dbt_merge._entity_merge_error(merge_name, 'deleted_column', 'column ' ~ deleted_column ~ ' of dataset ' ~ dataset.name ~ ' has type ' ~ dataset.columns[deleted_column | lower] ~ ', expected boolean') %}
            {% endif %}
            {% for key, data_type in dataset.columns.items() %}
                {% if key not in [id_column | lower, deleted_column | lower] and not key.startswith('_') and not key.startswith('$') %}
                    {% set element = dbt_merge._array_element_type(data_type) %}
                    {% set normalized = dbt_merge._normalized_type(element if element else data_type) %}
                    {% set name = dataset.column_names[key] %}
                    {% if key in known.output_columns %}
                        {% do dbt_merge._entity_merge_error(merge_name, 'datasets', 'property ' ~ name ~ ' of dataset ' ~ dataset.name ~ ' has the name of an output column; rename it in a model before the merge') %}
                    {% endif %}
                    {% if key in properties and properties[key].type != normalized %}
                        {% do dbt_merge._entity_merge_error(merge_name, 'datasets', 'property ' ~ name ~ ' has type ' ~ properties[key].type ~ ' in ' ~ (properties[key].datasets | join(', ')) ~ ' but ' ~ normalized ~ ' in ' ~ dataset.name ~ '; cast it to one type in a model before the merge') %}
                    {% endif %}
                    {% if key not in properties %}
                        {% do properties.update({key: {'name': name, 'type': normalized, 'datasets': []}}) %}
                    {% endif %}
                    {% do properties[key].datasets.append(dataset.name) %}
                {% endif %}
            {% endfor %}
        {% endfor %}

    {#-- rules: "eq" pairs and equality sets; sets sharing an operand become one group --#}
    {% set rules = [] %}
    {% set raw_equality = decl.get('equality', []) or [] %}
    {% set raw_sets = decl.get('equality_sets', []) or [] %}
    {% for setting, raw in [('equality', raw_equality), ('equality_sets', raw_sets)] %}
        {% if raw is string or raw is not sequence %}
            {% do dbt_merge._entity_merge_error(merge_name, setting, 'expected a list but received the value: ' ~ raw) %}
        {% endif %}
    {% endfor %}
    {% for rule in raw_equality %}
        {% set label = 'equality[' ~ loop.index0 ~ ']' %}
        {% if rule is string or rule is not sequence or rule | length != 3 or rule[0] != 'eq' %}
            {% do dbt_merge._entity_merge_error(merge_name, label, 'expected ["eq", <operand>, <operand>] but received the value: ' ~ rule) %}
        {% endif %}
        {% do rules.append({'label': label, 'operands': rule[1:]}) %}
    {% endfor %}
    {% for rule in raw_sets %}
        {% set label = 'equality_sets[' ~ loop.index0 ~ ']' %}
        {% if rule is string or rule is not sequence or rule | length < 2 %}
            {% do dbt_merge._entity_merge_error(merge_name, label, 'expected a list of at least two operands but received the value: ' ~ rule) %}
        {% endif %}
        {% do rules.append({'label': label, 'operands': rule}) %}
    {% endfor %}
    {% if rules | length == 0 %}
        {% do dbt_merge._entity_merge_error(merge_name, 'equality', 'no equality rule: declare equality or equality_sets, otherwise nothing ever merges') %}
    {% endif %}

    {% set groups = [] %}
    {% for rule in rules %}
        {% set operands = [] %}
        {% for raw in rule.operands %}
            {% do operands.append(dbt_merge._entity_merge_operand(merge_name, rule.label, raw, raw, by_alias)) %}
        {% endfor %}
        {% set keys = [] %}
        {% for operand in operands %}{% do keys.append(operand.key) %}{% endfor %}
        {% set merged = {'labels': [rule.label], 'keys': keys, 'operands': operands} %}
        {% for group in groups[:] %}
            {% if group['keys'] | select('in', keys) | list | length > 0 %}
                {% do merged.labels.extend(group.labels) %}
                {% for operand in group.operands %}
                    {% if operand.key not in merged['keys'] %}
                        {% do merged['keys'].append(operand.key) %}
                        {% do merged.operands.append(operand) %}
                    {% endif %}
                {% endfor %}
                {% do groups.remove(group) %}
            {% endif %}
        {% endfor %}
        {% do groups.append(merged) %}
    {% endfor %}

    {#-- typed equality: values of different types never match, so say so now --#}
        {% for group in groups %}
            {% set seen = {} %}
            {% for operand in group.operands %}
                {% set element = dbt_merge._array_element_type(operand.type) %}
                {% set value_type = dbt_merge._normalized_type(element if element else operand.type) %}
                {% if value_type.startswith('map') or value_type.startswith('struct') or value_type.startswith('array') %}
                    {% do dbt_merge._entity_merge_error(merge_name, group.labels | join(' + '), 'operand ' ~ operand.sql ~ ' has type ' ~ operand.type ~ ', which cannot be compared; use an expression that gives a scalar or an array of scalars') %}
                {% endif %}
                {% do seen.update({value_type: seen.get(value_type, []) + [operand.sql]}) %}
            {% endfor %}
            {% if seen | length > 1 %}
                {% set described = [] %}
                {% for value_type, sqls in seen.items() %}{% do described.append(value_type ~ ' (' ~ (sqls | join(', ')) ~ ')') %}{% endfor %}
                {% do dbt_merge._entity_merge_error(merge_name, group.labels | join(' + '), 'operands of different types can never be equal: ' ~ (described | join(' vs ')) ~ '; cast them to one type') %}
            {% endif %}
        {% endfor %}

    {{ return({
        'name': merge_name,
        'datasets': datasets,
        'groups': groups,
        'identity': identity,
        'strategy': strategy,
        'max_merged': max_merged,
        'id_column': id_column,
        'deleted_column': deleted_column,
        'properties': properties,
    }) }}
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
