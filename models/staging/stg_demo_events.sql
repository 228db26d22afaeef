with

source as (

    select * from {{ ref('demo_events') }}

),

renamed as (

    select
        -- ids
        event_id,
        customer_id,

        -- properties
        customer_name,
        event_type,
        cast(amount as decimal(12, 2)) as amount,

        -- timestamps
        cast(event_at as timestamp) as event_at

    from source

)

select * from renamed
