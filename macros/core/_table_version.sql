{#-- The current version of a table as a string: its Iceberg snapshot id or its Delta
     version (none for an empty Iceberg table, which has no snapshot yet, and for a
     file format without versions: the caller says what that means for it). --#}
{% macro _table_version(relation, file_format) %}
    {% if file_format == 'iceberg' %}
        {% set found = run_query('select cast(snapshot_id as string) from ' ~ relation ~ '.history where is_current_ancestor order by made_current_at desc limit 1') %}
        {{ return(found.rows[0][0] if found.rows | length > 0 else none) }}
    {% elif file_format == 'delta' %}
        {% set found = run_query('describe history ' ~ relation ~ ' limit 1') %}
        {{ return(found.rows[0]['version'] | string) }}
    {% endif %}
    {{ return(none) }}
{% endmacro %}
