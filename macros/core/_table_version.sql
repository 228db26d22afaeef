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


{#-- The current snapshot of an Iceberg table and its summary's totals, in one query
     (the snapshot _table_version finds, joined with its summary): {snapshot (a string),
     records, position_deletes, equality_deletes, delete_files, data_files}, a total the
     summary lacks 0; none for a table without a snapshot. --#}
{% macro _iceberg_current_snapshot(relation) %}
    {% set totals = ['records', 'position-deletes', 'equality-deletes', 'delete-files', 'data-files'] %}
    {% set columns = [] %}
    {% for total in totals %}
        {% do columns.append("coalesce(cast(s.summary['total-" ~ total ~ "'] as bigint), 0)") %}
    {% endfor %}
    {% set found = run_query(
        'select cast(s.snapshot_id as string), ' ~ columns | join(', ')
        ~ ' from ' ~ relation ~ '.history as h join ' ~ relation ~ '.snapshots as s on s.snapshot_id = h.snapshot_id'
        ~ ' where h.is_current_ancestor order by h.made_current_at desc limit 1'
    ).rows %}
    {% if found | length == 0 %}
        {{ return(none) }}
    {% endif %}
    {% set current = {'snapshot': found[0][0]} %}
    {% for total in totals %}
        {% do current.update({total | replace('-', '_'): found[0][loop.index]}) %}
    {% endfor %}
    {{ return(current) }}
{% endmacro %}
