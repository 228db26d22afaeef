{#-- The provenance events table of an upsert model with provenance=true, for a model
     that exposes it: `select * from {{ dbt_merge.upsert_provenance(ref('orders')) }}`
     (the ref puts the events in the model's lineage). --#}
{% macro upsert_provenance(model_relation) %}
    {{ return(dbt_merge._upsert_provenance_relation(model_relation)) }}
{% endmacro %}
