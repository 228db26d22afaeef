{#-- A failure-injection point at a commit boundary: raises when the environment
     variable DBT_MERGE_FAIL_AT names this point, so a test can stop a run exactly
     there and check what is stored (see docs/architecture.md, "Failure points").
     Does nothing otherwise. --#}
{% macro _failpoint(name) %}
    {% if env_var('DBT_MERGE_FAIL_AT', '') == name %}
        {% do exceptions.raise_compiler_error('dbt_merge: injected failure at ' ~ name ~ ' (DBT_MERGE_FAIL_AT)') %}
    {% endif %}
{% endmacro %}
