-- the upload fragments delivered so far: deliveries up to var('stream_delivery') (default 1)
with

source as (
    select * from {{ ref('upload_fragments') }}
),

delivered as (
    select
        fragment_id,
        upload_id,
        fragment_count,
        fragment_index,
        size_bytes,
        arrived_at
    from source
    where delivery <= {{ var('stream_delivery', 1) }}
)

select * from delivered
