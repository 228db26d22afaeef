-- the message stream as delivered so far: deliveries up to var('stream_delivery') (default 1)
with

source as (
    select * from {{ ref('message_events') }}
),

delivered as (
    select
        message_id,
        customer_id,
        size_bytes,
        arrived_at
    from source
    where delivery <= {{ var('stream_delivery', 1) }}
)

select * from delivered
