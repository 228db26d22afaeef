-- one delivery of the orders feed: the batch chosen by var('orders_batch') (default 1)
with

source as (
    select * from {{ ref('order_changes') }}
),

delivered as (
    select
        order_id,
        customer_id,
        status,
        amount,
        updated_at,
        ingested_at,
        is_deleted
    from source
    where batch = {{ var('orders_batch', 1) }}
)

select * from delivered
