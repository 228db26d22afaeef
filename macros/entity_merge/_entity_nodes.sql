{#--
    The nodes of an entity merge's equality graph: an entity is `<offset>|<id>`, an
    operand value `=<group>:<type>:<value>`. These macros are the one place that
    writes them (with the Python twin of the prefix, VALUE_NODE_PREFIX).
--#}

{#-- The first character of every value node; an entity node starts with its dataset
     offset, a number. dbt_merge.entity_merge.VALUE_NODE_PREFIX is the same string
     (tests/unit/test_entity_merge_macros.py holds them equal). --#}
{% macro _entity_value_node_prefix() %}
    {{ return('=') }}
{% endmacro %}


{#-- SQL condition that a node of the graph (a column of an edges or components table)
     is an entity node, not a value node. --#}
{% macro _is_entity_node_sql(node_sql) %}
    {{- 'not startswith(' ~ node_sql ~ ', ' ~ dbt_merge._sql_string(dbt_merge._entity_value_node_prefix()) ~ ')' -}}
{% endmacro %}


{#-- The value node of an operand value: `=<group>:<type>:<value>`, one namespace per
     equality group and value type. --#}
{% macro _entity_value_node_sql(group_index, value_type, value_sql) %}
    {{- 'concat(' ~ dbt_merge._sql_string(dbt_merge._entity_value_node_prefix() ~ group_index ~ ':' ~ value_type ~ ':') ~ ', cast(' ~ value_sql ~ ' as string))' -}}
{% endmacro %}


{#-- An entity's id as a string. --#}
{% macro _entity_id_sql(dataset) %}
    {{- "cast(" ~ dataset.alias ~ "." ~ dataset.id_sql ~ " as string)" -}}
{% endmacro %}


{#-- The node name of an entity: `<offset>|<id>`. --#}
{% macro _entity_node_sql(dataset) %}
    {{- dbt_merge._entity_node_of_sql(dataset.offset, dbt_merge._entity_id_sql(dataset)) -}}
{% endmacro %}


{#-- The node name of the entity of dataset offset whose id, as a string, is id_text_sql
     (an upsert's event names its key so: _entity_event_buckets_sql). --#}
{% macro _entity_node_of_sql(offset, id_text_sql) %}
    {{- "concat('" ~ offset ~ "|', " ~ id_text_sql ~ ")" -}}
{% endmacro %}


{#-- The dataset offset of an entity node (node_sql: a column of an edges or
     components table), an int: the part of `<offset>|<id>` before the first `|`. --#}
{% macro _entity_node_offset_sql(node_sql) %}
    {{- "cast(substring_index(" ~ node_sql ~ ", '|', 1) as int)" -}}
{% endmacro %}


{#-- The id of an entity node (node_sql: a column), a string: the part of
     `<offset>|<id>` after the first `|` (an id may itself hold `|`). --#}
{% macro _entity_node_id_sql(node_sql) %}
    {{- "substring(" ~ node_sql ~ ", instr(" ~ node_sql ~ ", '|') + 1)" -}}
{% endmacro %}


{#-- The node name of a member (a row or struct with member_offset and member_id):
     `<offset>|<id>`, as _entity_node_sql names it in the equality graph. --#}
{% macro _member_node_sql(member) %}
    {{- "concat(" ~ member ~ ".member_offset, '|', " ~ member ~ ".member_id)" -}}
{% endmacro %}


{#-- The original ids an entity stands for: its `$ids` when it has them, else its id. --#}
{% macro _entity_ids_sql(dataset) %}
    {%- if dataset.ids_sql -%}
        coalesce({{ dataset.alias }}.{{ dataset.ids_sql }}, array({{ dbt_merge._entity_id_sql(dataset) }}))
    {%- else -%}
        array({{ dbt_merge._entity_id_sql(dataset) }})
    {%- endif -%}
{% endmacro %}


{% macro _entity_is_deleted_sql(dataset) %}
    {%- if dataset.deleted_sql -%}
        coalesce({{ dataset.alias }}.{{ dataset.deleted_sql }}, false)
    {%- else -%}
        false
    {%- endif -%}
{% endmacro %}


{% macro _entity_is_live_sql(dataset) %}
    {%- if dataset.deleted_sql -%}
        not {{ dbt_merge._entity_is_deleted_sql(dataset) }}
    {%- else -%}
        true
    {%- endif -%}
{% endmacro %}
