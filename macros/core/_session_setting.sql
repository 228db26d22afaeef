{#-- The value of a Spark session setting (`set <name>`), or none when it is not set. --#}
{% macro _session_setting(name) %}
    {%- set value = run_query('set ' ~ name).rows[0][1] %}
    {{- return(none if value == '<undefined>' else value) -}}
{% endmacro %}
