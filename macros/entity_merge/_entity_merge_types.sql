{#-- The element type of an array type, or none. --#}
{% macro _array_element_type(data_type) %}
    {% set found = modules.re.match('(?is)^\\s*array\\s*<(.*)>\\s*$', data_type | string) %}
    {{ return(found.group(1).strip() if found else none) }}
{% endmacro %}


{#-- Types that compare equal (and share one property column): integral types widen to
     bigint, float to double; everything else must match exactly. --#}
{% macro _normalized_type(data_type) %}
    {% set t = (data_type | string).strip().lower() %}
    {% if t in ['tinyint', 'smallint', 'int', 'integer', 'bigint', 'byte', 'short', 'long'] %}
        {{ return('bigint') }}
    {% elif t in ['float', 'real', 'double'] %}
        {{ return('double') }}
    {% elif t.startswith('varchar') or t.startswith('char') %}
        {{ return('string') }}
    {% endif %}
    {{ return(t) }}
{% endmacro %}
