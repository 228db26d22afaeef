{#-- A model's pre-hook: a Python model on an adapter that cannot run Python models
     (dbt-spark over Thrift, HTTP or ODBC runs them on Databricks only) fails at once,
     naming the model, the adapter and the way out, before anything is written or
     submitted; every other model renders nothing (an empty hook runs no statement).
     The package's own Python models have it (dbt_project.yml); a project adds it to
     its own: +pre-hook: "{{ dbt_merge.require_python_models() }}". --#}
{% macro require_python_models() %}
    {%- if execute and model.language == 'python' and adapter.type() not in ['spark_session', 'databricks'] %}
        {%- do exceptions.raise_compiler_error("dbt_merge: Python model " ~ model.name ~ " cannot run on the " ~ adapter.type() ~ " adapter (dbt-spark submits Python models to Databricks only, not to a Thrift, HTTP or ODBC server). Run it on the spark_session adapter or on Databricks, or leave it out of this target's selection (--exclude " ~ model.name ~ ")") %}
    {%- endif %}
{% endmacro %}
