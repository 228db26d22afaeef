from dbt_merge.entity_merge import entity_components


def model(dbt, session):
    # incremental: closes again only the components the edges' new batches touch
    dbt.config(materialized="incremental", incremental_strategy="entity_state")
    previous = session.table(str(dbt.this)) if dbt.is_incremental else None
    return entity_components(dbt.ref("customers_edges"), previous=previous)
