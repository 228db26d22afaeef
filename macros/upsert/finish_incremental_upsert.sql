{#-- After the upsert's commit in the spark_session adapter's flow: a first run stores
     the settings the table is now locked to; with provenance=true, the CREATE / UPDATE /
     DELETE events of this commit (the diff over the batch's keys; a --full-refresh of a
     table that existed marks a gap, since a key it dropped has no event); with
     inline_compaction, the compaction of the data files past its thresholds, last (a
     run that dies before it leaves the MERGE's commit, which reads the same). --#}
{% macro finish_incremental_upsert(arg_dict) %}
    {%- set state = arg_dict['state'] %}
    {%- set target = arg_dict['target_relation'] %}
    {%- if arg_dict['rebuild'] %}
        {%- do dbt_merge._store_upsert_table_settings(target, state.settings, state.cfg) %}
    {%- else %}
        {%- do dbt_merge._upsert_drop_cached(target, state) %}
    {%- endif %}
    {%- if state.cfg.provenance %}
        {#-- the MERGE committed, its events not: the next run records them first --#}
        {%- do dbt_merge._failpoint('upsert.before_provenance') %}
        {%- do dbt_merge._upsert_provenance_after(target, state.events, state.cfg, arg_dict['file_format'], state.before_version, none if arg_dict['rebuild'] else arg_dict['temp_relation'], gap=arg_dict['rebuild'] and arg_dict['existing_relation'] is not none) %}
    {%- endif %}
    {%- if state.cfg.inline_compaction and not arg_dict['rebuild'] %}
        {%- do dbt_merge._compact_upsert_table(target, state.cfg.inline_compaction, execute=true, file_format=arg_dict['file_format']) %}
    {%- endif %}
{% endmacro %}
