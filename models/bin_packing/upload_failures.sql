{{ config(materialized='view') }}

-- fragment sets that cannot be reassembled, with the reason: never silently dropped
select
    bin_id,
    fragment_identifier as upload_id,
    fragment_count,
    failure_reason,
    members,
    member_indexes,
    bytes,
    opened_at,
    merged_at as failed_at
from {{ ref('upload_reassembly') }}
where status = 'failed'
