{#-- The provenance events table of auto-merge plans: <plan schema>.auto_merge_provenance,
     one table for every plan of the schema. `select * from
     {{ dbt_merge.auto_merge_provenance(ref('my_plan')) }}` puts it in the lineage. --#}
{% macro auto_merge_provenance(plan_relation) %}
    {{ return(adapter.dispatch('auto_merge_provenance', 'dbt_merge')(plan_relation)) }}
{% endmacro %}


{% macro default__auto_merge_provenance(plan_relation) %}
    {{ return(plan_relation.incorporate(path={'identifier': 'auto_merge_provenance'}, type='table')) }}
{% endmacro %}
