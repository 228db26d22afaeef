{#--
    The operands of equality rules, each resolved to {alias, offset, sql, type, key}:
    `alias.column`, a Spark SQL expression string over the columns of one alias, or a
    list-form function such as ["lower", "c.f3"] (element-wise on arrays).
--#}

{% macro _entity_merge_operand(merge_name, label, raw, whole, by_alias) %}
    {% set where = label ~ ', operand ' ~ (whole | tojson) %}
    {% if raw is string %}
        {{ return(dbt_merge._entity_merge_expression_operand(merge_name, where, raw, by_alias)) }}
    {% elif raw is sequence and raw is not mapping and raw | length > 0 %}
        {{ return(dbt_merge._entity_merge_function_operand(merge_name, label, raw, whole, by_alias)) }}
    {% endif %}
    {% do dbt_merge._entity_merge_error(merge_name, where, 'expected "<alias>.<column>", a function in list form such as ["lower", "<alias>.<column>"], or a Spark SQL expression string') %}
{% endmacro %}


{#-- `alias.column` (its type from the dataset), or an expression string (checked by
     _inspect_expression, its type from Spark): the columns of exactly one alias. --#}
{% macro _entity_merge_expression_operand(merge_name, where, raw, by_alias) %}
    {% set column_ref = modules.re.match('^\\s*([A-Za-z_][A-Za-z0-9_]*)\\.([A-Za-z_][A-Za-z0-9_]*|`[^`]+`)\\s*$', raw) %}
    {% if column_ref %}
        {% set references = [[column_ref.group(1), column_ref.group(2).strip('`')]] %}
    {% else %}
        {% set inspected = dbt_merge._inspect_expression(raw) %}
        {% if inspected.error %}
            {% do dbt_merge._entity_merge_error(merge_name, where, 'the expression is ' ~ inspected.error) %}
        {% endif %}
        {% set references = inspected.columns %}
    {% endif %}
    {% set aliases = [] %}
    {% for alias, column in references %}
        {% if alias | lower not in by_alias %}
            {% do dbt_merge._entity_merge_error(merge_name, where, 'unknown dataset alias ' ~ alias ~ '. Declared aliases: ' ~ (by_alias.values() | map(attribute='alias') | join(', '))) %}
        {% endif %}
        {% if alias | lower not in aliases %}{% do aliases.append(alias | lower) %}{% endif %}
        {% set dataset = by_alias[alias | lower] %}
        {% if column | lower not in dataset.columns %}
            {% do dbt_merge._entity_merge_error(merge_name, where, 'unknown column ' ~ column ~ ' in dataset ' ~ dataset.name ~ ' (alias ' ~ dataset.alias ~ '). Its columns: ' ~ (dataset.column_names.values() | join(', '))) %}
        {% endif %}
    {% endfor %}
    {% if aliases | length != 1 %}
        {% do dbt_merge._entity_merge_error(merge_name, where, 'an operand must use the columns of exactly one dataset alias, this one uses ' ~ (aliases | length) ~ ((': ' ~ aliases | join(', ')) if aliases else '')) %}
    {% endif %}
    {% set dataset = by_alias[aliases[0]] %}
    {% if column_ref %}
        {% set column = references[0][1] %}
        {% set sql = dataset.alias ~ '.' ~ adapter.quote(dataset.column_names.get(column | lower, column)) %}
        {% set data_type = dataset.columns.get(column | lower, 'unknown') %}
    {% else %}
        {% set sql = '(' ~ raw.strip() ~ ')' %}
        {% set data_type = dbt_merge._expression_type(sql, dataset) %}
    {% endif %}
    {{ return({'alias': dataset.alias, 'offset': dataset.offset, 'sql': sql, 'type': data_type, 'key': dataset.alias | lower ~ ':' ~ sql}) }}
{% endmacro %}


{#-- ["<function>", <operand>]: a known function of one operand, applied to each element
     when the operand is an array. --#}
{% macro _entity_merge_function_operand(merge_name, label, raw, whole, by_alias) %}
    {% set functions = dbt_merge._entity_merge_settings().functions %}
    {% set where = label ~ ', operand ' ~ (whole | tojson) %}
    {% set fn = raw[0] %}
    {% if fn not in functions %}
        {% do dbt_merge._entity_merge_error(merge_name, where, 'unknown function ' ~ fn ~ '. Expected one of: ' ~ (functions.keys() | join(', ')) ~ ', or write a Spark SQL expression string') %}
    {% endif %}
    {% if raw | length != 2 %}
        {% do dbt_merge._entity_merge_error(merge_name, where, 'function ' ~ fn ~ ' takes exactly one operand, received ' ~ (raw | length - 1)) %}
    {% endif %}
    {% set inner = dbt_merge._entity_merge_operand(merge_name, label, raw[1], whole, by_alias) %}
    {% if dbt_merge._array_element_type(inner.type) %}
        {% set sql = 'transform(' ~ inner.sql ~ ', dbt_merge_value -> ' ~ functions[fn].format('dbt_merge_value') ~ ')' %}
        {% set data_type = 'array<string>' %}
    {% else %}
        {% set sql = functions[fn].format(inner.sql) %}
        {% set data_type = 'string' %}
    {% endif %}
    {{ return({'alias': inner.alias, 'offset': inner.offset, 'sql': sql, 'type': data_type, 'key': inner.alias | lower ~ ':' ~ sql}) }}
{% endmacro %}


{#-- The Spark type of an expression operand, asked of Spark itself (DESCRIBE QUERY). --#}
{% macro _expression_type(sql, dataset) %}
    {% set described = run_query('describe query select ' ~ sql ~ ' as dbt_merge_value from ' ~ dataset.relation ~ ' as ' ~ dataset.alias) %}
    {{ return(described.rows[0][1] | string) }}
{% endmacro %}
