{#--
    Provenance of an upsert model (SPEC §5), with config provenance=true: one event per
    key that a run changed, in the table <model>__provenance beside the model.
      CREATE  the key was not stored before the run and is now;
      UPDATE  the stored row changed (same key, different content);
      DELETE  the key was stored and is gone.
    A key the batch touched without changing it (an older version under event-time
    ordering, a delete of a key never stored) records nothing. Events are the diff of
    the model's table before and after its commit (time travel: VERSION AS OF), so
    they are exactly what the MERGE did, whatever the merge mode or custom merger.

    The events are a second commit after the MERGE. If a run dies between the two,
    the next run finds that the table moved past the last recorded version and records
    the missing diff first (table property dbt_merge.provenance_version on the events
    table), so no change goes unrecorded and none is recorded twice.
--#}
{% macro get_upsert_provenance_sql(target, events, cfg, before_version, after_version, keys_relation=none) %}
    {{ return(adapter.dispatch('get_upsert_provenance_sql', 'dbt_merge')(target, events, cfg, before_version, after_version, keys_relation)) }}
{% endmacro %}


{% macro default__get_upsert_provenance_sql(target, events, cfg, before_version, after_version, keys_relation) %}
    {%- set keys = [] %}
    {%- for key in cfg.unique_key %}{% do keys.append(adapter.quote(key)) %}{% endfor %}
    {%- set join_on = [] %}
    {%- for key in keys %}{% do join_on.append('before.' ~ key ~ ' <=> after.' ~ key) %}{% endfor %}
    {%- if keys | length == 1 %}
        {%- set record_key = 'cast(coalesce(after.' ~ keys[0] ~ ', before.' ~ keys[0] ~ ') as string)' %}
    {%- else %}
        {%- set fields = [] %}
        {%- for key in cfg.unique_key %}
            {%- do fields.append(dbt_merge._sql_string(key) ~ ', coalesce(after.' ~ adapter.quote(key) ~ ', before.' ~ adapter.quote(key) ~ ')') %}
        {%- endfor %}
        {%- set record_key = 'to_json(named_struct(' ~ (fields | join(', ')) ~ '))' %}
    {%- endif %}
insert into {{ events }}
with
{%- if keys_relation is not none %}
touched as (
    select distinct {{ keys | join(', ') }} from {{ keys_relation }}
),
{%- endif %}
before as (
    {%- if before_version is none %}
    select {{ keys | join(', ') }}, cast(null as string) as row_json from {{ target }} where false
    {%- else %}
    select {{ keys | join(', ') }}, to_json(struct(*)) as row_json
    from {{ target }} version as of {{ before_version }}
    {%- if keys_relation is not none %}
    left semi join touched using ({{ keys | join(', ') }})
    {%- endif %}
    {%- endif %}
),
after as (
    select {{ keys | join(', ') }}, to_json(struct(*)) as row_json
    from {{ target }} version as of {{ after_version }}
    {%- if keys_relation is not none %}
    left semi join touched using ({{ keys | join(', ') }})
    {%- endif %}
)
select
    case
        when before.row_json is null then 'CREATE'
        when after.row_json is null then 'DELETE'
        else 'UPDATE'
    end as event_type,
    {{ dbt_merge._sql_string(target.identifier) }} as model_name,
    {{ record_key }} as record_key,
    before.row_json as old_row,
    after.row_json as new_row,
    {{ dbt_merge._sql_string(after_version) }} as table_version,
    {{- dbt_merge._provenance_stamp_sql() }}
from before
full outer join after on {{ join_on | join(' and ') }}
where not (before.row_json <=> after.row_json)
{% endmacro %}


{#-- The events table of an upsert model: <model>__provenance in the same schema. --#}
{% macro _upsert_provenance_relation(target) %}
    {{ return(target.incorporate(path={'identifier': target.identifier ~ '__provenance'}, type='table')) }}
{% endmacro %}


{% macro _create_upsert_provenance_table(events, file_format) %}
    {% call statement('create_upsert_provenance') %}
        create table if not exists {{ events }} (
            event_type string,
            model_name string,
            record_key string,
            old_row string,
            new_row string,
            table_version string,
            invocation_id string,
            recorded_at timestamp
        ) using {{ file_format }}
    {% endcall %}
{% endmacro %}


{#-- Whether a table version can still be read (snapshots may have been expired). --#}
{% macro _upsert_version_exists(relation, file_format, version) %}
    {% if file_format == 'iceberg' %}
        {% set found = run_query('select count(*) from ' ~ relation ~ '.snapshots where snapshot_id = ' ~ version) %}
        {{ return(found.rows[0][0] > 0) }}
    {% endif %}
    {% set history = run_query('describe history ' ~ relation) %}
    {{ return(version in (history.columns['version'].values() | map('string') | list)) }}
{% endmacro %}


{#-- The newest table version whose changes are recorded: the events table's property,
     or a newer version its events carry (a run that died between its events and the
     property). --#}
{% macro _upsert_recorded_version(target, events, file_format) %}
    {% set found = run_query("show tblproperties " ~ events ~ " ('dbt_merge.provenance_version')") %}
    {% set value = found.rows[0][1] | string if found.rows | length > 0 else '' %}
    {% set property = value if value and 'does not have property' not in value else none %}
    {% set versions -%}
        select table_version from {{ events }} where model_name = {{ dbt_merge._sql_string(target.identifier) }}
        {%- if property is not none %} union all select {{ dbt_merge._sql_string(property) }}{% endif %}
    {%- endset %}
    {% if file_format == 'iceberg' %}
        {% set newest = run_query('select cast(snapshot_id as string) from ' ~ target ~ '.history where cast(snapshot_id as string) in (' ~ versions ~ ') order by made_current_at desc limit 1') %}
    {% else %}
        {% set newest = run_query('select cast(max(cast(table_version as bigint)) as string) from (' ~ versions ~ ') as recorded') %}
    {% endif %}
    {{ return(newest.rows[0][0] if newest.rows | length > 0 and newest.rows[0][0] is not none else property) }}
{% endmacro %}


{#-- Before the MERGE: create the events table, and record a diff a dead run left out. --#}
{% macro _upsert_provenance_before(target, events, cfg, file_format, existing) %}
    {% if file_format not in ['iceberg', 'delta'] %}
        {% do dbt_merge._upsert_error('provenance', 'needs time travel to record what a run changed: file_format iceberg or delta, not ' ~ file_format) %}
    {% endif %}
    {% do dbt_merge._create_upsert_provenance_table(events, file_format) %}
    {% if not existing %}
        {{ return(none) }}
    {% endif %}
    {% set current = dbt_merge._table_version(target, file_format) %}
    {% set recorded = dbt_merge._upsert_recorded_version(target, events, file_format) %}
    {% if current is not none and recorded is not none and recorded != current %}
        {% if dbt_merge._upsert_version_exists(target, file_format, recorded) %}
            {{ log('dbt_merge: ' ~ target ~ ' changed since version ' ~ recorded ~ ' without provenance (a run died after its commit, or a write outside dbt); recording that diff first', info=true) }}
            {% call statement('upsert_provenance_catch_up') %}
                {{ dbt_merge.get_upsert_provenance_sql(target, events, cfg, recorded, current) }}
            {% endcall %}
            {% do dbt_merge._set_upsert_recorded_version(events, current) %}
        {% else %}
            {{ log('dbt_merge: version ' ~ recorded ~ ' of ' ~ target ~ ' has expired; changes between it and ' ~ current ~ ' have no provenance events', info=true) }}
            {% do dbt_merge._set_upsert_recorded_version(events, current, gap=true) %}
        {% endif %}
    {% elif current is not none and recorded is none %}
        {#-- provenance turned on for a table that has one: its changes so far have no events --#}
        {% do dbt_merge._set_upsert_recorded_version(events, current, gap=true) %}
    {% endif %}
    {{ return(current) }}
{% endmacro %}


{#-- After the MERGE: the events of this run, then the recorded version. A rebuild's
     events (gap) are CREATE events of every row: a key the rebuild dropped has none. --#}
{% macro _upsert_provenance_after(target, events, cfg, file_format, before_version, keys_relation, gap=false) %}
    {% set after_version = dbt_merge._table_version(target, file_format) %}
    {% if after_version is none or after_version == before_version %}
        {{ return(none) }}
    {% endif %}
    {% call statement('upsert_provenance') %}
        {{ dbt_merge.get_upsert_provenance_sql(target, events, cfg, before_version, after_version, keys_relation) }}
    {% endcall %}
    {% do dbt_merge._set_upsert_recorded_version(events, after_version, gap=gap) %}
{% endmacro %}


{#-- Stores the recorded version; with gap, also that the events may lack changes made
     up to it (dbt_merge.provenance_gap_at): an entity merge that reads the table's
     change from its events does not read it across that version
     (_entity_event_versions). --#}
{% macro _set_upsert_recorded_version(events, version, gap=false) %}
    {% call statement('upsert_provenance_version') %}
        alter table {{ events }} set tblproperties ('dbt_merge.provenance_version' = {{ dbt_merge._sql_string(version) }}
        {%- if gap %}, 'dbt_merge.provenance_gap_at' = {{ dbt_merge._sql_string(version) }}{% endif %})
    {% endcall %}
{% endmacro %}
