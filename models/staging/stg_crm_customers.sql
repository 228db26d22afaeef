-- CRM customers with their email list as an array: `a@x;b@y` → [a@x, b@y]
with

source as (
    select * from {{ ref('crm_customers') }}
),

renamed as (
    select
        `_id`,
        full_name,
        filter(split(emails, ';'), email -> trim(email) != '') as emails,
        phone,
        city,
        is_deleted
    from source
)

select * from renamed
