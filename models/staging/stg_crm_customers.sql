-- CRM customers as delivered so far, with their email list as an array (`a@x;b@y` →
-- [a@x, b@y]): the seed crm_customers (delivery 1) with the record versions of
-- crm_customer_changes up to var('customers_delivery') (default 1) in place
with

source as (
    select * from {{ ref('crm_customers') }}
),

changes as (
    select * from {{ ref('crm_customer_changes') }}
    where delivery <= {{ var('customers_delivery', 1) }}
),

-- the latest delivered version of each changed record
latest_changes as (
    select
        `_id`,
        full_name,
        emails,
        phone,
        city,
        is_deleted
    from (
        select
            changes.*,
            row_number() over (
                partition by `_id` order by delivery desc, change_id desc
            ) as version_rank
        from changes
    ) as ranked
    where version_rank = 1
),

delivered as (
    select
        source.`_id`,
        source.full_name,
        source.emails,
        source.phone,
        source.city,
        source.is_deleted
    from source
    left anti join latest_changes
        on latest_changes.`_id` = source.`_id`
    union all
    select * from latest_changes
),

renamed as (
    select
        `_id`,
        full_name,
        filter(split(emails, ';'), email -> trim(email) != '') as emails,
        phone,
        city,
        is_deleted
    from delivered
)

select * from renamed
