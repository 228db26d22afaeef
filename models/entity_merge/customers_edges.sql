{{ dbt_merge.equality_edges('customers') }}
