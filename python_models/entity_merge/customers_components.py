from dbt_merge.entity_merge import entity_components


def model(dbt, session):
    dbt.config(materialized="table")
    return entity_components(dbt.ref("customers_edges"))
