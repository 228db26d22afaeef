{#--
    A dataset's change read from its upsert model's provenance events instead of the
    digest's pass over every record. An upsert model with provenance=true records one
    event per key each commit changed, stamped with the table version
    (get_upsert_provenance_sql), and each commit's events are files of their own: the
    events of a few versions cost a fraction of hashing every record
    (bench/changelog_bench.py). Iceberg's own changelog does not serve: it refuses
    tables with delete files and reads every rewritten file of the others.

    The buckets of the keys whose events carry a version after the one the digest
    describes are then the dataset's changed buckets (_entity_changed_buckets_sql);
    everything after is as with the digest: the records of those buckets are compared
    with their stored fingerprints, and the next digest follows from the stored one.
    A key whose event says nothing changed in the end (changed, then changed back)
    only costs its bucket a comparison.
--#}

{#-- Marks each Iceberg dataset of spec whose change since the snapshot the stored digest
     describes (stored, as _entity_digest_snapshots gives it) up to the snapshot this
     run reads (snapshots) its upsert model's events hold (_entity_event_versions):
     sets dataset.events to {relation, model, versions}. Returns their names. --#}
{% macro _entity_mark_event_sources(spec, snapshots, stored) %}
    {% set fed = [] %}
    {% for dataset in spec.datasets if not dataset.get('unread') and dataset.get('table_format') == 'iceberg' %}
        {% set since = stored.get(dataset.offset | string) %}
        {% set upto = snapshots.get(dataset.offset | string) %}
        {% set versions = dbt_merge._entity_event_versions(spec, dataset, since, upto) if since is not none and upto is not none else none %}
        {% if versions is not none %}
            {% set events = dbt_merge._upsert_provenance_relation(dataset.table) %}
            {% do dataset.update({'events': {'relation': events, 'model': dataset.table.identifier, 'versions': versions}}) %}
            {% do fed.append(dataset.name) %}
        {% endif %}
    {% endfor %}
    {{ return(fed) }}
{% endmacro %}


{#-- The versions of the dataset's table after since up to upto (snapshot ids, as
     strings) whose events hold its change between the two, or none when they may not:
      * the table is an upsert model's (its property dbt_merge.upsert) keyed by the
        merge's id column alone, so an event's record_key is the entity's id as the
        node names it (both cast(id as string));
      * its events table exists and has recorded up to upto at least
        (dbt_merge.provenance_version);
      * since, upto and the recorded version are in the table's current history, in
        that order (no rollback, no table replaced since);
      * no version after since is marked as a gap in the events
        (dbt_merge.provenance_gap_at: an expired version, provenance turned on for a
        table that had rows, a rebuild of the upsert).
     A write outside the upsert moves the table past its recorded version, so the
     dataset is hashed until the upsert's next run records that diff. --#}
{% macro _entity_event_versions(spec, dataset, since, upto) %}
    {% set table = dataset.table %}
    {% set found = run_query("show tblproperties " ~ table ~ " ('dbt_merge.upsert')").rows %}
    {% set settings = (found[0][1] | string) if found | length > 0 else '' %}
    {% if not settings.startswith('{') or fromjson(settings).get('unique_key') != [spec.id_column | lower] %}
        {{ return(none) }}
    {% endif %}
    {% set events = dbt_merge._upsert_provenance_relation(table) %}
    {% if adapter.get_relation(database=events.database, schema=events.schema, identifier=events.identifier) is none %}
        {{ return(none) }}
    {% endif %}
    {% set properties = dbt_merge._table_properties(events) %}
    {% set history = run_query('select cast(snapshot_id as string) from ' ~ table ~ '.history where is_current_ancestor order by made_current_at').columns[0].values() | list %}
    {% set recorded = properties.get('dbt_merge.provenance_version') %}
    {% if since not in history or upto not in history or recorded not in history %}
        {{ return(none) }}
    {% endif %}
    {% set first, last = history.index(since), history.index(upto) %}
    {% if first >= last or history.index(recorded) < last %}
        {{ return(none) }}
    {% endif %}
    {% set gap = properties.get('dbt_merge.provenance_gap_at') %}
    {% if gap in history and history.index(gap) > first %}
        {{ return(none) }}
    {% endif %}
    {{ return(history[first + 1:last + 1]) }}
{% endmacro %}


{#-- The select of the buckets (dataset_offset, bucket) of the keys whose events (the
     dataset's events, from _entity_mark_event_sources) carry one of its versions. --#}
{% macro _entity_event_buckets_sql(dataset) %}
    {%- set node = dbt_merge._entity_node_of_sql(dataset.offset, 'record_key') %}
    select distinct {{ dataset.offset }} as dataset_offset, {{ dbt_merge._entity_bucket_sql(node) }} as bucket
    from {{ dataset.events.relation }}
    where model_name = {{ dbt_merge._sql_string(dataset.events.model) }}
        and table_version in ({% for version in dataset.events.versions %}{{ dbt_merge._sql_string(version) }}{{ ', ' if not loop.last }}{% endfor %})
{%- endmacro %}
