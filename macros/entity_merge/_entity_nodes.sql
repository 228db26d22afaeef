{#-- An entity's id as a string. --#}
{% macro _entity_id_sql(dataset) %}
    {{- "cast(" ~ dataset.alias ~ "." ~ dataset.id_sql ~ " as string)" -}}
{% endmacro %}


{#-- The node name of an entity: `<offset>|<id>`. --#}
{% macro _entity_node_sql(dataset) %}
    {{- "concat('" ~ dataset.offset ~ "|', " ~ dbt_merge._entity_id_sql(dataset) ~ ")" -}}
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
