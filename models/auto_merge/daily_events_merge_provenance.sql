{#-- The events table exists once a merge has run; the pre_hook creates it empty
     before that, so this view builds on a fresh warehouse. --#}
{{ config(
    materialized='view',
    pre_hook="{{ dbt_merge.get_create_auto_merge_provenance_sql(dbt_merge.auto_merge_provenance(ref('daily_events_merge_plan')), config.get('file_format')) }}",
) }}

select *
from {{ dbt_merge.auto_merge_provenance(ref('daily_events_merge_plan')) }}
where plan_model = 'daily_events_merge_plan'
