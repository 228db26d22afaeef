{#-- materialized='entity_components': the closure of a merge's equality edges in SQL
     alone, for targets where Python models do not run (dbt-spark over Thrift, HTTP or
     ODBC; Databricks SQL warehouses). The model's SQL selects the edges model:

         {{ config(materialized='entity_components') }}
         select * from {{ ref('customers_edges') }}

     Its table is the Python model's full build over the same edges (entity_components
     in dbt_merge.entity_merge.components): node, component (the smallest node name of
     its component) and, from an edges table with batches, _batch and
     previous_component (null). Large-star/small-star rounds (Kiveris et al. 2014) on
     64-bit ids of the node names, each round one statement into a scratch table beside
     the model (CREATE TABLE AS the first time, INSERT OVERWRITE after) and a query of
     the edges' count and checksum; once a round changes nothing, a query confirms that
     every component is a star around its smallest id. The last statement writes the
     model's table, so a run that dies in a round leaves the previous run's table as it
     was. --#}
{% materialization entity_components, adapter='spark' %}
    {%- set target_relation = this.incorporate(type='table') -%}
    {%- set old_relation = adapter.get_relation(database=this.database, schema=this.schema, identifier=this.identifier) -%}
    {%- set settings = dbt_merge._entity_closure_settings() -%}
    {%- set columns = dbt_merge._entity_closure_columns(sql) -%}

    {{ run_hooks(pre_hooks) }}

    {%- set scratch = dbt_merge._entity_closure_scratch(target_relation) -%}
    {%- do dbt_merge._entity_closure_drop(scratch) %}
    {%- set closed = dbt_merge._entity_closure_rounds(sql, columns, scratch, settings) -%}

    {#-- the model's table, in one statement: create or replace where the table is
         Iceberg or Delta and stays so (readers see the old table until it commits),
         else dropped first as dbt-spark's table materialization does --#}
    {%- set file_format = config.get('file_format') -%}
    {%- if old_relation is not none and not (old_relation.is_table and file_format in ['iceberg', 'delta'] and (old_relation.is_iceberg if file_format == 'iceberg' else old_relation.is_delta)) %}
        {%- do adapter.drop_relation(old_relation) %}
    {%- endif %}
    {%- call statement('main') -%}
        {{ create_table_as(False, target_relation, dbt_merge._entity_closure_labels_sql(columns, scratch, closed)) }}
    {%- endcall -%}
    {%- do dbt_merge._entity_closure_drop(scratch) %}

    {% do persist_docs(target_relation, model) %}
    {{ run_hooks(post_hooks) }}
    {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}


{#-- The materialization's settings, checked before anything runs: max_rounds (an
     integer >= 1, default 100) and node_ids ('hashed', the default, or 'names'); an
     incremental_strategy of entity_state is the Python model's and is refused. --#}
{% macro _entity_closure_settings() %}
    {%- set max_rounds = config.get('max_rounds', 100) -%}
    {%- set node_ids = config.get('node_ids', 'hashed') -%}
    {%- if config.get('incremental_strategy') == 'entity_state' %}
        {%- do dbt_merge._entity_closure_error('incremental_strategy', "'entity_state' follows the change in a Python model (entity_components(..., previous=dbt.this)); the entity_components materialization builds the whole closure on every run: remove incremental_strategy, or build the components with the Python model") %}
    {%- endif %}
    {%- if max_rounds is not number or max_rounds is boolean or max_rounds != max_rounds | int or max_rounds < 1 %}
        {%- do dbt_merge._entity_closure_error('max_rounds', 'is set to ' ~ max_rounds ~ ' but must be an integer >= 1') %}
    {%- endif %}
    {%- if node_ids not in ['hashed', 'names'] %}
        {%- do dbt_merge._entity_closure_error('node_ids', "Invalid value provided: " ~ node_ids ~ ". Expected one of: hashed, names") %}
    {%- endif %}
    {{ return({'max_rounds': max_rounds | int, 'node_ids': node_ids}) }}
{% endmacro %}


{% macro _entity_closure_error(setting, message) %}
    {%- set msg -%}
        dbt_merge: entity_components model {{ model.name }}{{ ", config '" ~ setting ~ "'" if setting }}: {{ message }}
    {%- endset %}
    {%- do exceptions.raise_compiler_error(msg) %}
{% endmacro %}


{#-- The edges query's column names (lower case): src and dst, or a named error; with
     _batch, the rows of an edges table of this package (deleted and gone records have a
     row without dst; placeholders a row without _batch). --#}
{% macro _entity_closure_columns(sql) %}
    {%- if not execute %}{{ return(['src', 'dst', '_batch']) }}{% endif -%}
    {%- set names = dbt_merge._query_columns(sql) | map(attribute='name') | map('lower') | list -%}
    {%- set missing = ['src', 'dst'] | reject('in', names) | list -%}
    {%- if missing %}
        {%- do dbt_merge._entity_closure_error(none, 'the model selects the edges of a merge (columns src and dst, as dbt_merge.equality_edges writes them) but has no column ' ~ missing | join(', ') ~ '; its columns: ' ~ names | join(', ')) %}
    {%- endif %}
    {{ return(names) }}
{% endmacro %}


{#-- The scratch tables of a run, beside the model: <model>__dbt_merge_closure_<step>.
     Parquet (Delta where the model is Delta or on Databricks, whose catalogs manage
     Delta tables); a run drops them first (a run that failed left them) and last. --#}
{% macro _entity_closure_scratch(target_relation) %}
    {%- set tables = {} -%}
    {%- for step in ['nodes', 'edges_0', 'edges_1'] %}
        {%- do tables.update({step: target_relation.incorporate(path={'identifier': target_relation.identifier ~ '__dbt_merge_closure_' ~ step}, type='table')}) %}
    {%- endfor %}
    {{ return(tables) }}
{% endmacro %}


{% macro _entity_closure_drop(scratch) %}
    {%- for relation in scratch.values() %}
        {%- do adapter.drop_relation(relation) %}
    {%- endfor %}
{% endmacro %}


{#-- Writes a round's step into scratch table step: created the first time (steps
     lists those created), overwritten after (no table is created or dropped per
     round). --#}
{% macro _entity_closure_write(scratch, step, sql, steps) %}
    {%- if step in steps %}
        {%- call statement('closure_' ~ step) -%}
            {{ dbt_merge._entity_closure_overwrite_sql(scratch[step], sql) }}
        {%- endcall -%}
    {%- else %}
        {%- do dbt_merge._entity_closure_create(scratch[step], sql) %}
        {%- do steps.append(step) %}
    {%- endif %}
{% endmacro %}


{% macro _entity_closure_overwrite_sql(relation, sql) %}
    insert overwrite table {{ relation }}
    {{ sql }}
{% endmacro %}


{% macro _entity_closure_create(relation, sql) %}
    {%- call statement('closure_' ~ relation.identifier) -%}
        {{ dbt_merge._entity_closure_create_sql(relation, sql) }}
    {%- endcall -%}
{% endmacro %}


{% macro _entity_closure_create_sql(relation, sql) %}
    {%- set file_format = 'delta' if config.get('file_format') == 'delta' or adapter.type() == 'databricks' else 'parquet' -%}
    create table {{ relation }} using {{ file_format }} as
    {{ sql }}
{% endmacro %}


{#-- Runs the closure's rounds; returns the scratch table whose edges are stars: every
     row (a, b) joins id a to b, the smallest id of its component (b is never an a). --#}
{% macro _entity_closure_rounds(sql, columns, scratch, settings) %}
    {%- set hashed = settings.node_ids == 'hashed' -%}
    {%- do dbt_merge._entity_closure_create(scratch.nodes, dbt_merge._entity_closure_nodes_sql(sql, columns, hashed)) %}
    {%- if hashed %}
        {%- set counted = run_query('select count(*), count(distinct id) from ' ~ scratch.nodes).rows[0] -%}
        {%- if counted[0] != counted[1] %}
            {#-- two names hash alike: the rounds work on the names themselves --#}
            {{ log('dbt_merge: ' ~ model.name ~ ': ' ~ (counted[0] - counted[1]) ~ ' node names share a 64-bit hash; the closure works on the names', info=True) }}
            {%- do adapter.drop_relation(scratch.nodes) %}
            {%- set hashed = false -%}
            {%- do dbt_merge._entity_closure_create(scratch.nodes, dbt_merge._entity_closure_nodes_sql(sql, columns, hashed)) %}
        {%- endif %}
    {%- endif %}
    {%- do dbt_merge._entity_closure_create(scratch.edges_0, dbt_merge._entity_closure_edges_sql(sql, columns, hashed)) %}
    {#-- every round writes its large-star and small-star steps, one statement over the
         table of the round before, and compares the edges' checksum (count, xor of the
         edges' hashes) with the previous round's: once a round changes nothing, the
         stars query confirms (a graph without edges has no round) --#}
    {%- set found = run_query(dbt_merge._entity_closure_checksum_sql(scratch.edges_0)).rows[0] -%}
    {%- set state = namespace(edges=scratch.edges_0, created=['edges_0'], done=found[0] == 0, checksum=[found[0], found[1]]) -%}
    {{ log('dbt_merge: ' ~ model.name ~ ': closure round 0, ' ~ found[0] ~ ' edges' ~ (', stars' if state.done else ''), info=True) }}
    {%- for round in range(1, settings.max_rounds + 2) %}
        {%- if not state.done %}
            {%- if round > settings.max_rounds %}
                {%- set largest = run_query('select count(*) + 1 from ' ~ state.edges ~ ' group by b order by 1 desc limit 1').rows[0][0] -%}
                {%- do dbt_merge._entity_closure_drop(scratch) %}
                {%- do dbt_merge._entity_closure_error('max_rounds', 'the closure did not converge in ' ~ settings.max_rounds ~ ' rounds (max_rounds ' ~ settings.max_rounds ~ '); ' ~ state.checksum[0] ~ ' edges were left, the largest component so far has ' ~ largest ~ ' nodes; raise max_rounds') %}
            {%- endif %}
            {%- do dbt_merge._failpoint('entity_components.round') %}
            {%- set step = 'edges_' ~ (round % 2) -%}
            {%- do dbt_merge._entity_closure_write(scratch, step, dbt_merge._entity_closure_round_sql(state.edges), state.created) %}
            {%- set state.edges = scratch[step] -%}
            {%- set found = run_query(dbt_merge._entity_closure_checksum_sql(state.edges)).rows[0] -%}
            {%- if [found[0], found[1]] == state.checksum %}
                {%- set stars = run_query(dbt_merge._entity_closure_stars_sql(state.edges)).rows[0] -%}
                {%- set state.done = stars[0] == stars[1] and stars[2] == 0 -%}
            {%- endif %}
            {%- set state.checksum = [found[0], found[1]] -%}
            {{ log('dbt_merge: ' ~ model.name ~ ': closure round ' ~ round ~ ', ' ~ found[0] ~ ' edges' ~ (', stars' if state.done else ''), info=True) }}
        {%- endif %}
    {%- endfor %}
    {#-- the batch of every row: the edges' last one, as the Python model's full build --#}
    {%- set batch = run_query('select coalesce(max(_batch), 0) from (' ~ sql ~ ') as edges').rows[0][0] if '_batch' in columns else none -%}
    {{ return({'edges': state.edges, 'batch': batch}) }}
{% endmacro %}


{#-- The edges rows that join nodes, as (s, d) name pairs: an edge with one null end
     keeps the other end as a node of its own; with _batch, rows without dst (deleted
     and gone records) or without _batch (placeholders) are left out, as the Python
     model leaves them out. --#}
{% macro _entity_closure_pairs_sql(sql, columns) %}
    select
        coalesce(cast(src as string), cast(dst as string)) as s,
        coalesce(cast(dst as string), cast(src as string)) as d
    from (
        {{ sql }}
    ) as edges
    where (src is not null or dst is not null)
    {%- if '_batch' in columns %}
        and dst is not null
        and _batch is not null
    {%- endif %}
{% endmacro %}


{#-- A node's id in the rounds: its name's 64-bit hash, or the name itself. --#}
{% macro _entity_closure_id(column, hashed) %}
    {{- return('xxhash64(' ~ column ~ ')' if hashed else column) -}}
{% endmacro %}


{% macro _entity_closure_nodes_sql(sql, columns, hashed) %}
    with pairs as (
        {{ dbt_merge._entity_closure_pairs_sql(sql, columns) }}
    ),

    names as (
        select s as node from pairs
        union
        select d as node from pairs
    )

    select node, {{ dbt_merge._entity_closure_id('node', hashed) }} as id from names
{% endmacro %}


{#-- Every edge once, as (a, b) with a > b; self-edges left out. --#}
{% macro _entity_closure_edges_sql(sql, columns, hashed) %}
    with pairs as (
        {{ dbt_merge._entity_closure_pairs_sql(sql, columns) }}
    ),

    ids as (
        select
            {{ dbt_merge._entity_closure_id('s', hashed) }} as s,
            {{ dbt_merge._entity_closure_id('d', hashed) }} as d
        from pairs
    )

    select distinct greatest(s, d) as a, least(s, d) as b
    from ids
    where s != d
{% endmacro %}


{#-- The edges' count and checksum (the xor of their hashes): a round that changes
     nothing leaves both as they were. --#}
{% macro _entity_closure_checksum_sql(edges) %}
    select count(*) as edges, bit_xor(xxhash64(a, b)) as checksum from {{ edges }}
{% endmacro %}


{#-- Whether edges (a > b) are stars: as many edges as distinct a, and no b that is
     an a. One query: edges, distinct a, chained edges. --#}
{% macro _entity_closure_stars_sql(edges) %}
    select
        count(*) as edges,
        count(distinct a) as leaves,
        (select count(*) from {{ edges }} as e left semi join {{ edges }} as f on e.b = f.a) as chained
    from {{ edges }}
{% endmacro %}


{#-- One round over edges (a > b): a large-star step, then a small-star step over its
     result, in one statement (no table between them). Large star: every node u joins
     each larger neighbour v to m, the smallest of u and its neighbours. Small star:
     every node a joins itself and each smaller neighbour b to the smallest of them.
     Window functions instead of a grouping joined back: a node's neighbours are one
     partition; the large-star rows are distributed by their larger end, which is the
     small-star step's partition, so the distinct and the window need no other
     exchange. --#}
{% macro _entity_closure_round_sql(edges) %}
    with neighbours as (
        select a as u, b as v from {{ edges }}
        union all
        select b as u, a as v from {{ edges }}
    ),

    large_star as (
        select distinct a, b
        from (
            select v as a, least(u, m) as b
            from (
                select u, v, min(v) over (partition by u) as m from neighbours
            ) as around
            where v > u
            distribute by a
        ) as hooked
    ),

    small_star as (
        select a, b, min(b) over (partition by a) as m from large_star
    )

    select distinct node as a, m as b
    from (
        select explode(array(a, b)) as node, m from small_star
    ) as moved
    where node != m
{% endmacro %}


{#-- The model's rows: every node with the smallest name of its component (ordinal
     order, as the Python model labels). --#}
{% macro _entity_closure_labels_sql(columns, scratch, closed) %}
    {%- set batched = '_batch' in columns -%}
    with labelled as (
        select
            nodes.node,
            min(nodes.node) over (partition by coalesce(edges.b, nodes.id)) as component
        from {{ scratch.nodes }} as nodes
        left join {{ closed.edges }} as edges on nodes.id = edges.a
    )

    select /*+ REBALANCE */
        node,
        component
    {%- if batched %},
        cast({{ closed.batch }} as bigint) as _batch,
        cast(null as string) as previous_component
    {%- endif %}
    from labelled
    {%- if not batched %}
    where {{ dbt_merge._is_entity_node_sql('node') }}
    {%- endif %}
{% endmacro %}
