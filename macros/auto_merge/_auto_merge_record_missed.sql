{#-- A planned merge whose files are all gone may have been executed by a run that died
     after its rewrite committed and before its event did. If one snapshot removed
     every planned file, was a rewrite (operation replace) and has no event for this
     table yet, its JOIN event (planned files -> the files that snapshot added) is
     recorded now, so no rewrite goes without provenance and none is recorded twice.
     Returns the snapshot id recorded, or none. --#}
{% macro _auto_merge_record_missed(plan_relation, table, merge, planned) %}
    {% set quoted = [] %}
    {% for path in planned %}{% do quoted.append(dbt_merge._sql_string(path)) %}{% endfor %}
    {% set removed_by -%}
        select cast(snapshot_id as string) as snapshot_id from {{ table }}.all_entries
        where status = 2 and data_file.file_path in ({{ quoted | join(', ') }})
        group by snapshot_id
        having count(distinct data_file.file_path) = {{ planned | length }}
    {%- endset %}
    {% set found = run_query(removed_by).rows %}
    {% if found | length != 1 %}
        {{ return(none) }}
    {% endif %}
    {% set snapshot = found[0][0] %}
    {% set summary = run_query("select operation, summary['removed-files-size'] as removed_bytes from " ~ table ~ ".snapshots where snapshot_id = " ~ snapshot).rows %}
    {% if summary | length != 1 or summary[0][0] != 'replace' %}
        {{ return(none) }}
    {% endif %}
    {% set added = run_query('select data_file.file_path from ' ~ table ~ '.all_entries where status = 1 and snapshot_id = ' ~ snapshot ~ ' order by 1') %}
    {% set children = added.columns[0].values() | map('string') | list %}
    {% set result = {'rewritten_bytes_count': summary[0][1] or 0} %}
    {{ return(snapshot if dbt_merge._auto_merge_record_event(plan_relation, table, merge, planned, children, result, snapshot) else none) }}
{% endmacro %}
