-- SPEC §1 "The Sesam example": the merged output, row for row. Returns the differences.
with

actual as (
    select
        `_id`,
        array_join(`$ids`, '|') as ids,
        `$deleted` as is_deleted,
        `_updated`,
        entity
    from {{ ref('sesam_golden') }}
),

expected as (
    select `_id`, ids, is_deleted, `_updated`, entity
    from {{ ref('sesam_expected') }}
),

missing as (
    select 'expected, not produced' as problem, * from (select * from expected except select * from actual)
),

unexpected as (
    select 'produced, not expected' as problem, * from (select * from actual except select * from expected)
)

select * from missing
union all
select * from unexpected
