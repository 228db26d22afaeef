{{ dbt_merge.equality_edges('sesam') }}
