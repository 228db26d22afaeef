{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key='event_id',
    )
}}

with

events as (

    select * from {{ ref('stg_demo_events') }}

    {% if is_incremental() %}
    -- only events newer than the newest one already stored
    where event_at > (select max(event_at) from {{ this }})
    {% endif %}

),

logged as (

    select
        event_id,
        customer_id,
        event_type,
        amount,
        event_at,
        event_type = 'order' as is_order,
        current_timestamp() as loaded_at

    from events

)

select * from logged
