{#--
    The equality rules of an entity merge: "eq" pairs and equality sets as declared,
    resolved into groups of operands (rules that share an operand become one group, as
    their values are one namespace of value nodes), with typed equality checked.
--#}

{#-- The declared rules, each {label, operands} with a label for errors (equality[i],
     equality_sets[i]); at least one. --#}
{% macro _entity_merge_rules(merge_name, decl) %}
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
    {{ return(rules) }}
{% endmacro %}


{#-- The groups of equality: each {labels, keys, operands}, every operand resolved
     against the datasets; a rule sharing an operand (same key) with earlier groups
     absorbs them. --#}
{% macro _entity_merge_groups(merge_name, rules, datasets) %}
    {% set by_alias = {} %}
    {% for dataset in datasets %}{% do by_alias.update({dataset.alias | lower: dataset}) %}{% endfor %}
    {% set groups = [] %}
    {% for rule in rules %}
        {% set operands = [] %}
        {% for raw in rule.operands %}
            {% do operands.append(dbt_merge._entity_merge_operand(merge_name, rule.label, raw, raw, by_alias)) %}
        {% endfor %}
        {% set merged = {'labels': [rule.label], 'keys': operands | map(attribute='key') | list, 'operands': operands} %}
        {% for group in groups[:] %}
            {% if group['keys'] | select('in', merged['keys']) | list | length > 0 %}
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
    {% do dbt_merge._check_entity_merge_group_types(merge_name, groups) %}
    {{ return(groups) }}
{% endmacro %}


{#-- Typed equality: values of different types never match, so say so now; maps,
     structs and nested arrays cannot be compared at all. --#}
{% macro _check_entity_merge_group_types(merge_name, groups) %}
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
{% endmacro %}
