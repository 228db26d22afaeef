from dbt_merge.entity_merge import entity_components


def model(dbt, session):
    # incremental: closes again only the components the edges' new batches touch
    dbt.config(materialized="incremental", incremental_strategy="entity_state")
    # by name: read at one snapshot, which the batch carries to the entity_state strategy
    previous = dbt.this if dbt.is_incremental else None
    return entity_components(dbt.ref("customers_edges"), previous=previous)
