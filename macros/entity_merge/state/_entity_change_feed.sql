{#--
    A Delta dataset's change read from its change data feed (table property
    delta.enableChangeDataFeed) instead of the digest's pass over every record: the
    feed between the version the digest describes and the version this run reads
    (table_changes) holds a row for every record inserted, updated (before and after)
    or deleted in between, whatever wrote it. The buckets of those records' nodes are
    the dataset's changed buckets; everything after is as with the digest (their
    records are compared with their stored fingerprints, and the next digest follows
    from the stored one), as for an upsert's provenance events (_entity_events.sql).

    The feed is used only where it holds every change of those versions; otherwise the
    dataset is hashed, and the log says why (_entity_feed_refusal).
--#}

{#-- Marks each Delta dataset of spec (not unread, not fed by events) whose change since
     the version the stored digest describes (stored, as _entity_digest_snapshots gives
     it) up to the version this run reads (snapshots) its change data feed holds: sets
     dataset.feed to {start, end}, the versions to read. Returns their names. --#}
{% macro _entity_mark_feed_sources(spec, snapshots, stored) %}
    {% set fed = [] %}
    {% for dataset in spec.datasets if dataset.get('table_format') == 'delta' and not dataset.get('unread') and not dataset.get('events') %}
        {% set since = stored.get(dataset.offset | string) %}
        {% set upto = snapshots.get(dataset.offset | string) %}
        {% set refused = dbt_merge._entity_feed_refusal(dataset.table, since, upto) %}
        {% if refused is none %}
            {% do dataset.update({'feed': {'start': (since | int) + 1, 'end': upto | int}}) %}
            {% do fed.append(dataset.name) %}
        {% else %}
            {% do log('dbt_merge: ' ~ model.name ~ ': every record of ' ~ dataset.name ~ ' is hashed, not read from its change data feed: ' ~ refused, info=false) %}
        {% endif %}
    {% endfor %}
    {{ return(fed) }}
{% endmacro %}


{#-- The Delta operations whose commits the change data feed describes: it has their
     changed rows, or infers them from the files they add and remove (dataChange), or
     they change no row (OPTIMIZE, REORG, VACUUM). A property change is one unless it
     names the feed's own property. Anything else (a table replaced, a RESTORE, a
     schema change...) makes the run hash the dataset. --#}
{% macro _entity_feed_operations() %}
    {{ return([
        'WRITE', 'MERGE', 'UPDATE', 'DELETE', 'STREAMING UPDATE', 'OPTIMIZE', 'REORG',
        'VACUUM START', 'VACUUM END', 'SET TBLPROPERTIES', 'UNSET TBLPROPERTIES',
    ]) }}
{% endmacro %}


{#-- Why the change data feed of Delta table `table` cannot say what changed after
     version since up to version upto (strings), or none when it can:
      * a version is missing (the last run read none, or the table is new since);
      * delta.enableChangeDataFeed is not true now;
      * a version in between is not in the table's history (its log was cleaned up), or
        is an operation the feed may not describe (_entity_feed_operations), or
        changes delta.enableChangeDataFeed;
      * the oldest of those versions is older than delta.deletedFileRetentionDuration
        (a week by default): a VACUUM may have removed its change files.
     Metadata only (properties and history), no scan. --#}
{% macro _entity_feed_refusal(table, since, upto) %}
    {% if since is none or upto is none %}
        {{ return('the last run read no version of it') }}
    {% endif %}
    {% set first, last = (since | int) + 1, upto | int %}
    {% if first > last %}
        {{ return('its version ' ~ upto ~ ' is older than the one the last run read (' ~ since ~ '): the table was replaced') }}
    {% endif %}
    {% set properties = dbt_merge._table_properties(table) %}
    {% if properties.get('delta.enableChangeDataFeed', '') | lower != 'true' %}
        {{ return('delta.enableChangeDataFeed is not true') }}
    {% endif %}
    {% set retention = properties.get('delta.deletedFileRetentionDuration', 'interval 1 week') | lower | trim %}
    {% set retention = retention[9:] | trim if retention.startswith('interval ') else retention %}
    {% if not modules.re.match('^[0-9]+ [a-z]+( [0-9]+ [a-z]+)*$', retention) %}
        {{ return('its delta.deletedFileRetentionDuration (' ~ retention ~ ') is not a plain interval') }}
    {% endif %}
    {% set history = {} %}
    {% for row in run_query('describe history ' ~ table ~ ' limit ' ~ (last - first + 1)).rows %}
        {% do history.update({row['version'] | int: row}) %}
    {% endfor %}
    {% for version in range(first, last + 1) %}
        {% set row = history.get(version) %}
        {% if row is none %}
            {{ return('version ' ~ version ~ ' is not in its history') }}
        {% endif %}
        {% set operation = row['operation'] | string %}
        {% if operation not in dbt_merge._entity_feed_operations() %}
            {{ return('version ' ~ version ~ ' is a ' ~ operation ~ ', which its change data feed may not describe') }}
        {% elif 'TBLPROPERTIES' in operation and 'enablechangedatafeed' in (row['operationParameters'] | string | lower) %}
            {{ return('version ' ~ version ~ ' changed delta.enableChangeDataFeed') }}
        {% endif %}
    {% endfor %}
    {% set oldest = history[first]['timestamp'] | string %}
    {% set kept = run_query('select cast(' ~ dbt_merge._sql_string(oldest) ~ ' as timestamp) > current_timestamp() - interval ' ~ retention).rows[0][0] %}
    {% if not kept %}
        {{ return('version ' ~ first ~ ' (' ~ oldest ~ ') is older than delta.deletedFileRetentionDuration (' ~ retention ~ '): a VACUUM may have removed its change files') }}
    {% endif %}
    {{ return(none) }}
{% endmacro %}


{#-- The select of the buckets (dataset_offset, bucket) of the records the dataset's
     change data feed holds between its versions dataset.feed.start and end (every
     change type: a record's row before and after an update has the same id, and a
     changed id makes both buckets change). --#}
{% macro _entity_feed_buckets_sql(dataset) %}
    select distinct {{ dataset.offset }} as dataset_offset, {{ dbt_merge._entity_bucket_sql(dbt_merge._entity_node_sql(dataset)) }} as bucket
    from table_changes({{ dbt_merge._sql_string(dataset.table | string) }}, {{ dataset.feed.start }}, {{ dataset.feed.end }}) as {{ dataset.alias }}
{%- endmacro %}
