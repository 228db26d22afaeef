"""Every SQL statement of the dbt_merge package, rendered for file_format delta, parses in
sqlglot's Databricks dialect.

Delta tables cannot be written in this session (the test run's, with Iceberg's catalog;
Delta runs in processes of their own: test_*_on_delta.py) nor on Databricks here, so
this is the check that what dbt-databricks would run is Databricks SQL. A project that
installs the package builds its datasets on the local adapter (Iceberg), then one `dbt
compile` with file_format delta renders every macro that returns SQL (entity merge,
provenance, generic tests, the Databricks upsert path, the format-independent
auto-merge SQL) in models and data tests; each statement is parsed strictly
(ErrorLevel.RAISE) with a few structural checks. The queries the macros run while
rendering (their checks and introspection) are recorded from dbt's SQLQuery events and
parsed the same way.

Coverage is read from the manifest, not kept by hand: every macro of the package must
be rendered here (RENDERED: the compiled node it shows in, and the node must reach it
through the manifest's macro calls), run here (EXECUTED), rendered by
test_upsert_delta_sql.py (PARSED_IN_UPSERT_FILE), or listed with a reason in NOT_SQL
(no statement of its own) or NOT_ON_DATABRICKS (refused, or never reached, for Delta
on dbt-databricks). A default__ implementation goes with its dispatching macro.

Executing an auto-merge plan needs Iceberg (<table>.data_files, CALL rewrite_data_files)
or a Delta table on the spark_session adapter (Delta's file list): a plan of a Delta table
on dbt-databricks, or of another format, fails before anything runs
(test_execute_auto_merge_refuses_other_formats).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import sqlglot
from dbt.tests.util import run_dbt
from sqlglot import exp

from tests.functional import test_upsert_delta_sql
from tests.functional.entity_merge_fixtures import InstallsDbtMerge, Recorder, merge_vars

DELTA_VARS = json.dumps({"file_format": "delta"})

# -- the datasets and the models that render the macros -----------------------------------

DATASETS = {
    "crm.sql": """
        {{ config(materialized='view') }}
        select * from values
            ('c1', 'Ann@x.org', '+47 12 34 56 78', array('VIP'), false, 1),
            ('c2', 'bob@y.org', '12345679', array('new'), true, 2)
            as t(_id, email, phone, tags, is_deleted, score)
    """,
    "billing.sql": """
        {{ config(materialized='view') }}
        select * from values
            ('b1', 'ann@x.org', '99 12 34 56 78', array('vip'), array('b1', 'b0'), 3.5D)
            as t(_id, email, phone, tags, `$ids`, amount)
    """,
    "bins.sql": """
        {{ config(materialized='view') }}
        select 'bin-1' as bin_id, 'merged' as status, array('m1', 'm2') as members,
            'full' as merge_reason, timestamp'2024-01-01 00:00:00' as merged_at
    """,
    "order_batch.sql": """
        {{ config(materialized='view') }}
        select * from values
            (1, 'eu', 5, 'a', 'p1', false, 1), (1, 'eu', 6, 'b', null, false, 2),
            (2, 'us', 1, 'c', 'p2', true, 3)
            as t(id, region, ts, name, price, is_deleted, ingested_at)
    """,
    "orders_target.sql": """
        {{ config(materialized='table') }}
        select * from {{ ref('order_batch') }} where false
    """,
    # a hand-written auto-merge plan over a Delta model and a parquet table
    "delta_plan.sql": """
        select * from values
            {%- for table in ['delta_events', 'loose_events'] %}
            ({{ loop.index0 }}, 'merge', 'spark_catalog', '{{ this.schema }}.{{ table }}',
             '2024-01-01', '2024-01-02', "day >= '2024-01-01'", "partition.day = 1",
             100000, 2000, array('{{ table }}/f0.parquet', '{{ table }}/f1.parquet'),
             7, 'day')
            {{- ',' if not loop.last }}
            {%- endfor %}
            as t(merge_index, action, catalog_name, table_name, merge_min_key,
                 merge_max_key, merge_where, merge_files_where, target_file_size_bytes,
                 size_bytes, file_paths, snapshot_id, sort_column)
    """,
    "delta_events.sql": """
        {{ config(file_format='delta') }}
        select 1 as id, date'2024-01-01' as day
    """,
}
# the entity merge "people" (MERGES); components as a plain SQL view (instead of
# the Python closure, dbt_merge.entity_merge.entity_components): only their columns count
PIPELINE = {
    "people_edges.sql": "{{ dbt_merge.equality_edges('people') }}",
    "people_components.sql": (
        "select distinct src as node, src as component from {{ ref('people_edges') }}"
    ),
    "people.sql": """
        {{ config(materialized='incremental', incremental_strategy='merge', unique_key='_id') }}
        {{ dbt_merge.merge_entities('people', ref('people_components')) }}
    """,
    "people_components_batch.sql": (
        "{{ config(materialized='view') }}\n"
        "select node, component, cast(0 as bigint) as `_batch`, false as `$drop`"
        " from {{ ref('people_components') }}"
    ),
    # as a components model writes it: it says which nodes are stored
    "people_components_batch_known.sql": (
        "{{ config(materialized='view') }}\n"
        "select node, component, cast(0 as bigint) as `_batch`, false as `$drop`,"
        " node like '0|%' as `$stored` from {{ ref('people_components') }}"
    ),
}
# what `dbt run` builds before the compile: views, and orders_target as an Iceberg table
BUILT = [
    "crm",
    "billing",
    "bins",
    "order_batch",
    "orders_target",
    "delta_plan",
    "people_edges",
    "people_components",
    "people_components_batch",
    "people_components_batch_known",
]
# tables created directly, as a previous run would have left them: the incremental
# models compile their incremental SQL, and loose_events is outside the dbt project
TABLES_OF_EARLIER_RUNS = {
    "people": "(`_id` string, `$ids` array<string>, `$deleted` boolean, `_updated` bigint,"
    " `$replaced` boolean, entity string, email array<string>) using iceberg",
    "people_provenance": "(child_id string, child_updated bigint) using iceberg",
    "bins_provenance": "(child_id string) using iceberg",
    "people_follow_edges": "(src string, dst string, fingerprint bigint, `_batch` bigint,"
    " declaration string) using iceberg",
    "people_follow_components": "(node string, component string, `_batch` bigint) using iceberg",
    # the edges' digest, empty (as before a first digest): a Delta table cannot be made here
    "people_follow_edges__dbt_merge_digest": "(dataset_offset int, bucket int, records bigint,"
    " digest bigint, buckets int, edges_snapshot string) using iceberg",
    "loose_events": "(id int) using parquet",
}

UPSERT_CONFIG = (
    "materialized='incremental', incremental_strategy='upsert', unique_key='id',"
    " precombine_key='ts', delete_column='is_deleted'"
)
ENTITY_PROVENANCE = """
{{ config(materialized='incremental', incremental_strategy='append') }}
{{ dbt_merge.entity_provenance('people', ref('people')) }}
"""
BIN_PROVENANCE = """
{{ config(materialized='incremental', incremental_strategy='append') }}
{{ dbt_merge.bin_provenance(ref('bins')) }}
"""
MERGED = "{{{{ dbt_merge.merge_entities('{merge}', ref('people_components')) }}}}"
# the entity_state strategy of a components batch (ref BATCH) into a components state
# table (a table of an earlier run), as a batch over the key-list limit is written
# (placeholders, then the MERGE)
COMPONENTS_STATE = """
    {{ config(materialized='view', state_filter_limit=0) }}
    {%- set arg_dict = {
        'target_relation': api.Relation.create(
            schema=target.schema, identifier='people_follow_components', type='table'
        ),
        'temp_relation': ref('BATCH'),
    } -%}
    {% if execute %}{{ dbt_merge.get_incremental_entity_state_sql(arg_dict) }}{% endif %}
"""
RENDERING = {
    # built: incremental runs (is_incremental() is true when compiled)
    "people_provenance.sql": ENTITY_PROVENANCE,
    "bins_provenance.sql": BIN_PROVENANCE,
    # a change-following merge's edges, and the MERGE of its state strategy
    "people_follow_edges.sql": (
        "{{ config(materialized='incremental', incremental_strategy='entity_state') }}\n"
        "{{ dbt_merge.equality_edges('people') }}"
    ),
    "entity_state_sql.sql": """
        {{ config(materialized='view') }}
        {%- set arg_dict = {
            'target_relation': ref('people_follow_edges'), 'temp_relation': ref('people_edges'),
        } -%}
        {% if execute %}{{ dbt_merge.get_incremental_entity_state_sql(arg_dict) }}{% endif %}
    """,
    # a components batch, and one that says which nodes are stored (its placeholders are
    # appended without reading the table)
    "entity_state_components_sql.sql": COMPONENTS_STATE.replace("BATCH", "people_components_batch"),
    "entity_state_components_known_sql.sql": COMPONENTS_STATE.replace(
        "BATCH", "people_components_batch_known"
    ),
    # never built: first runs
    "people_provenance_first.sql": ENTITY_PROVENANCE,
    "bins_provenance_first.sql": BIN_PROVENANCE,
    "people_first.sql": """
        {{ config(materialized='incremental', incremental_strategy='merge', unique_key='_id') }}
        {{ dbt_merge.merge_entities('people', ref('people_components')) }}
    """,
    "people_listed.sql": MERGED.format(merge="people_listed"),
    "people_plain.sql": MERGED.format(merge="people_plain"),
    # the dbt-databricks upsert path: a first run, then the strategy's MERGE
    "orders_first.sql": f"""
        {{{{ config({UPSERT_CONFIG}) }}}}
        {{% call dbt_merge.precombined() %}}
            select * from {{{{ ref('order_batch') }}}}
        {{% endcall %}}
    """,
    "orders_merge.sql": f"""
        {{{{ config({UPSERT_CONFIG}, table_type='merge_on_read') }}}}
        {{%- set arg_dict = {{
            'target_relation': ref('orders_target'),
            'temp_relation': ref('order_batch'),
            'incremental_predicates': ['DBT_INTERNAL_DEST.ts > 0'],
        }} -%}}
        {{% if execute %}}{{{{ dbt_merge.get_incremental_upsert_sql(arg_dict) }}}}{{% endif %}}
    """,
    # the SQL closure (materialized='entity_components'): the statements of its rounds
    "closure_sql.sql": """
        {{ config(materialized='view') }}
        {%- set edges = 'select * from ' ~ ref('people_edges') -%}
        {%- if execute -%}
        {%- set columns = ['src', 'dst', 'fingerprint', '_batch', 'declaration'] -%}
        {%- set scratch = dbt_merge._entity_closure_scratch(this) -%}
        {{ dbt_merge._entity_closure_create_sql(
            scratch.nodes, dbt_merge._entity_closure_nodes_sql(edges, columns, true)) }};
        {{ dbt_merge._entity_closure_create_sql(
            scratch.edges_0, dbt_merge._entity_closure_edges_sql(edges, columns, true)) }};
        {{ dbt_merge._entity_closure_checksum_sql(scratch.edges_0) }};
        {{ dbt_merge._entity_closure_stars_sql(scratch.edges_0) }};
        {{ dbt_merge._entity_closure_create_sql(
            scratch.edges_1, dbt_merge._entity_closure_round_sql(scratch.edges_0)) }};
        {{ dbt_merge._entity_closure_overwrite_sql(
            scratch.edges_0, dbt_merge._entity_closure_round_sql(scratch.edges_1)) }};
        {{ dbt_merge._entity_closure_labels_sql(
            columns, scratch, {'edges': scratch.edges_1, 'batch': 7}) }};
        {{ dbt_merge._entity_closure_labels_sql(
            ['src', 'dst'], scratch, {'edges': scratch.edges_1, 'batch': none}) }}
        {%- endif %}
    """,
    # auto-merge: what does not depend on the table format
    "auto_merge_sql.sql": """
        {{ config(materialized='view') }}
        {%- set plan = ref('delta_plan') -%}
        {%- if execute -%}
        {%- set events = dbt_merge.auto_merge_provenance(plan) -%}
        {{ dbt_merge._auto_merge_merges_sql(plan) }};
        {{ dbt_merge.get_create_auto_merge_provenance_sql(events) }};
        {{ dbt_merge._auto_merge_event_sql(
            events, plan, 'spark_catalog.sales.events',
            {'merge_index': 0, 'merge_min_key': '2024-01-01', 'merge_max_key': "it's late"},
            ['s3://b/f0.parquet', 's3://b/f1.parquet'], ['s3://b/f2.parquet'],
            {'rewritten_bytes_count': 1234}, '5678') }}
        {%- endif %}
    """,
}
MERGE_TESTS = """
version: 2
models:
  - name: people
    data_tests:
      - dbt_merge.identity_is_deterministic:
          arguments: {merge: people, components: "{{ ref('people_components') }}"}
      - dbt_merge.deleted_entities_not_merged:
          arguments: {merge: people, components: "{{ ref('people_components') }}"}
  - name: people_listed
    data_tests:
      - dbt_merge.identity_is_deterministic:
          arguments: {merge: people_listed, components: "{{ ref('people_components') }}"}
      - dbt_merge.deleted_entities_not_merged:
          arguments: {merge: people_listed, components: "{{ ref('people_components') }}"}
"""
PEOPLE = {
    "datasets": ["crm c", "billing b"],
    "equality_sets": [
        [["lower", "c.email"], ["lower", "b.email"]],
        [["lower", "c.tags"], "b.tags"],  # arrays: one edge per element
    ],
    # an expression operand: its type comes from DESCRIBE QUERY
    "equality": [
        [
            "eq",
            "right(regexp_replace(c.phone, '[^0-9]', ''), 8)",
            "right(regexp_replace(b.phone, '[^0-9]', ''), 8)",
        ]
    ],
    "identity": "composite",
    "strategy": "compact",
    "deleted_column": "is_deleted",
}
MERGES = {
    "people": PEOPLE,
    "people_listed": {**PEOPLE, "identity": "first", "strategy": "list"},
    "people_plain": {**PEOPLE, "strategy": "default"},
}

# -- coverage ------------------------------------------------------------------------------

# macro -> the compiled node (model name, or <generic test>:<merge>) whose SQL renders it
RENDERED = {
    "equality_edges": "people_edges",
    "merge_entities": "people",
    "_merge_entities_sql": "people_first",
    "_entity_members_ctes": "people_first",
    "_entity_records_ctes": "people_first",
    "_entity_checked_cte": "people_listed",
    "_entity_changes_ctes": "people",
    "_entity_compared_ctes": "people",
    "_entity_same_as_stored_sql": "people",
    "_entity_stored_column_sql": "people",
    "_entity_retired_ctes": "people",
    "_entity_fingerprint_sql": "people_edges",
    "_entity_current_records_sql": "people_edges",
    "get_incremental_entity_state_sql": "entity_state_sql",
    "_entity_state_keys": "entity_state_sql",
    "_entity_identity_sql": "people_first",
    "_entity_member_order": "people_first",
    "entity_provenance": "people_provenance",
    "bin_provenance": "bins_provenance",
    "test_identity_is_deterministic": "identity_is_deterministic:people",
    "test_deleted_entities_not_merged": "deleted_entities_not_merged:people",
    "precombined": "orders_first",
    "_upsert_first_batch_sql": "orders_first",
    "get_incremental_upsert_sql": "orders_merge",
    "_upsert_changes_sql": "orders_merge",
    "_upsert_merge_rules": "orders_merge",
    "_upsert_merge_source": "orders_merge",
    "_auto_merge_merges_sql": "auto_merge_sql",
    "_entity_closure_create_sql": "closure_sql",
    "_entity_closure_overwrite_sql": "closure_sql",
    "_entity_closure_nodes_sql": "closure_sql",
    "_entity_closure_edges_sql": "closure_sql",
    "_entity_closure_pairs_sql": "closure_sql",
    "_entity_closure_id": "closure_sql",
    "_entity_closure_stars_sql": "closure_sql",
    "_entity_closure_checksum_sql": "closure_sql",
    "_entity_closure_round_sql": "closure_sql",
    "_entity_closure_labels_sql": "closure_sql",
    "get_create_auto_merge_provenance_sql": "auto_merge_sql",
    "_auto_merge_event_sql": "auto_merge_sql",
}
# macro -> a pattern of the statement it runs itself while rendering (or, for the
# auto-merge check, in `dbt run-operation dbt_merge.execute_auto_merge`)
EXECUTED = {
    "_check_entity_ids": (
        r"having entity_id is null or count\(\*\) > 1"
        r"|where node is null or records > 1 order by"
    ),
    "_check_max_merged": r"having count\(\*\) > \d+\s+order by member_count",
    "_entity_next_batch": r"select greatest\( unix_micros\(current_timestamp\(\)\)",
    "_check_entity_declaration": r"select declaration from \S+people_follow_edges",
    "_entity_state_target_filter": (
        r"select distinct `src` as value from \S+people_edges limit 20001\)"
    ),
    "_entity_state_placeholders_sql": (
        r"insert into \S+people_follow_components \(`node`, `component`, `_batch`\) select"
    ),
    # beside a Delta model a stage is parquet on the spark_session adapter (which this
    # compile runs on), Delta on dbt-databricks: the same statement but that word
    "_entity_stage": (
        r"create table \S+people_follow_edges__dbt_merge_"
        r"(changed using parquet as .*count_if\(is_record\)"
        r"|batch using parquet as .*true as `\$drop`)"
    ),
    "_expression_type": r"describe query select",
    "_query_columns": r"describe query\s+select \* from \S+order_batch",
    "_check_upsert_batch": r"select count_if\(",
    "_check_upsert_table_settings": r"show tblproperties \S+ \('dbt_merge\.upsert'\)",
    "_store_upsert_table_settings": r"alter table \S+ set tblproperties \('dbt_merge\.upsert'",
    "_auto_merge_table_formats": r"describe table extended \S+loose_events",
    "_entity_stored_digest": (
        r"create table if not exists \S+people_follow_edges__dbt_merge_digest .*using delta"
    ),
    "_entity_digest_plan": r"create or replace temporary view \S+__dbt_merge_digest_plan as",
}
# rendered and parsed by test_upsert_delta_sql.py (each is called in its model)
PARSED_IN_UPSERT_FILE = (
    "get_upsert_merge_sql",
    "get_upsert_precombine_sql",
    "get_upsert_provenance_sql",
)
NOT_SQL = {
    # every family
    "_auto_merge_delta_marker": "returns the text a Delta merge's commit carries",
    "_auto_merge_stale_message": "returns a log line",
    "_column_types": "returns column name -> type (a dict)",
    "require_python_models": "a pre-hook: renders nothing, or raises a compiler error",
    "dbt_spark_validate_strategy": "returns a strategy name, or raises (dbt-spark only)",
    "_refuse_entity_state": "raises a compiler error off the spark_session adapter",
    "_execute": "runs the statement it is given (each caller's SQL is checked where it "
    "is rendered)",
    "_upsert_refuse_steps_after_merge": "raises a compiler error",
    "_upsert_check_file_format": "raises a compiler error",
    # entity merge
    "_entity_merge_settings": "returns the known settings (a dict)",
    "materialization_entity_components_spark": "runs the statements of the closure's "
    "_entity_closure_*_sql macros (closure_sql), drop table if exists, and dbt's "
    "create_table_as with the labels' query",
    "_entity_closure_rounds": "runs the closure's statements (closure_sql) and the stars "
    "query; returns the last edges table",
    "_entity_closure_create": "runs _entity_closure_create_sql's statement",
    "_entity_closure_write": "runs _entity_closure_create_sql's or "
    "_entity_closure_overwrite_sql's statement",
    "_entity_closure_settings": "returns the checked configs, or raises",
    "_entity_closure_error": "raises a compiler error",
    "_entity_closure_columns": "returns column names (its describe query is _query_columns')",
    "_entity_closure_scratch": "returns relations (a dict)",
    "_entity_closure_drop": "runs dbt's drop_relation for each scratch table",
    "_entity_merge_error": "raises a compiler error",
    "_entity_state_filter_limit": "returns a number (the most keys a state MERGE lists)",
    "_entity_state_broadcast_limit": "returns a number (the most rows of a batch written "
    "with placeholders)",
    "_entity_state_saved_threshold": "returns the name of a session setting",
    "_entity_state_rewrite_limit": "returns a number (the most rows of a components batch "
    "written by a MERGE)",
    "_entity_digest_snapshots_property": "returns the name of a table property",
    "_entity_mark_unread": "marks datasets in a dict, returns their names",
    "_entity_compare_all_share": "returns a number (the largest share of the merged table "
    "a change-following run emits again)",
    "_entity_affected_join_rows": "returns a number (the most affected nodes the datasets "
    "are filtered by)",
    "_conf_bytes": "returns a number (a Spark size setting in bytes)",
    "_entity_merge_spec": "returns the checked declaration (a dict)",
    "_entity_merge_parse_spec": "parse-time stand-in of _entity_merge_spec (a dict)",
    "_entity_merge_declaration": "returns the declaration (a dict)",
    "_entity_merge_options": "returns the checked scalar settings (a dict)",
    "_entity_merge_datasets": "returns the datasets (a list of dicts)",
    "_entity_merge_dataset_columns": "reads a dataset's columns into its dict",
    "_check_entity_dataset_reserved_columns": "raises a compiler error or nothing",
    "_table_provider": "returns a table's provider (a string) from describe table extended, "
    "run only for a dataset column with a name Iceberg reserves",
    "_entity_merge_add_properties": "adds a dataset's properties to a dict",
    "_entity_merge_rules": "returns the declared rules (a list of dicts)",
    "_entity_merge_groups": "returns the equality groups (a list of dicts)",
    "_check_entity_merge_group_types": "raises a compiler error or nothing",
    "_entity_merge_operand": "returns an operand (a dict); its SQL is parsed in people_edges",
    "_entity_merge_expression_operand": "returns an operand (a dict); its SQL is parsed in "
    "people_edges",
    "_entity_merge_function_operand": "returns an operand (a dict); its SQL is parsed in "
    "people_edges",
    "_array_element_type": "returns a type name",
    "_normalized_type": "returns a type name",
    "_inspect_expression": "returns the columns an operand expression uses (a dict)",
    "default___inspect_expression": "the implementation dbt-databricks uses: a pattern "
    "match, returns a dict",
    "spark_session___inspect_expression": "the spark_session implementation: Python "
    "(sqlglot), returns a dict",
    "_entity_value_node_prefix": "returns the value-node prefix (a string)",
    "_is_entity_node_sql": "a condition, parsed inside merge_entities and _check_max_merged",
    "_entity_value_node_sql": "an expression, parsed inside equality_edges",
    "_entity_value_nodes_sql": "an expression, parsed inside equality_edges",
    "_entity_changed_records_sql": "a select, parsed inside the staging CREATE that "
    "_entity_stage runs for people_follow_edges",
    "_entity_edge_rows_sql": "a select, parsed inside equality_edges (people_edges) and the "
    "staging CREATE of people_follow_edges",
    "_entity_record_rows_sql": "the selects of a record's rows, parsed inside "
    "_entity_edge_rows_sql",
    "_entity_change_marks": "a select of max(change_mark) by dataset, run only for a merge "
    "with change_columns, which this project does not declare",
    "_entity_merge_change_columns": "sets each dataset's change SQL (a dict update)",
    "_entity_id_sql": "an expression, parsed inside equality_edges and merge_entities",
    "_entity_node_sql": "an expression, parsed inside equality_edges and merge_entities",
    "_entity_node_of_sql": "an expression, parsed inside equality_edges",
    "_entity_node_offset_sql": "an expression, parsed inside equality_edges and merge_entities",
    "_entity_node_id_sql": "an expression, parsed inside merge_entities",
    "_entity_ids_sql": "an expression, parsed inside merge_entities",
    "_entity_is_deleted_sql": "an expression, parsed inside merge_entities",
    "_entity_is_live_sql": "an expression, parsed inside equality_edges",
    "_entity_properties": "returns the properties in name order (a list of dicts)",
    "_entity_member_properties_sql": "columns, parsed inside merge_entities",
    "_member_node_sql": "an expression, parsed inside merge_entities",
    "_json_scalar_sql": "an expression, parsed inside merge_entities (strategy compact)",
    "_entity_strategies": "returns the strategy macros by name (a dict)",
    "_entity_digest_buckets": "returns a number (the digest's buckets per dataset)",
    "_entity_bucket_sql": "an expression, parsed inside the digest's selects (Iceberg only)",
    "_entity_digest_mix_sql": "an expression, parsed inside the digest's selects (Iceberg only)",
    "_entity_uses_digest": "returns whether the edges model keeps a digest (a boolean)",
    "_entity_state_on_iceberg": "returns whether the model is a state model on Iceberg (a boolean)",
    "_entity_state_format": "returns the state model's table format (iceberg, delta or none)",
    "_entity_feed_operations": "returns the names of Delta operations (a list)",
    "_entity_mark_feed_sources": "marks datasets in a dict, returns their names",
    "_entity_dataset_snapshots": "runs _table_provider and _table_version, returns a dict",
    "_entity_pin_datasets": "sets the datasets' relations (time travel) in a dict",
    "_entity_side_relation": "returns a relation beside the model (used by _entity_stage)",
    "_entity_strategy_default": "returns SQL fragments (a dict), parsed inside people_plain",
    "_entity_strategy_compact": "returns SQL fragments (a dict), parsed inside people_first",
    "_entity_strategy_list": "returns SQL fragments (a dict), parsed inside people_listed",
    "_entity_object_sql": "an expression, parsed inside people_plain and people_first",
    "_entity_property_field_sql": "an expression, parsed inside people_plain and people_first",
    "_entity_property_column": "returns a column (a dict), parsed inside people_plain",
    "_member_json_sql": "an expression, parsed inside merge_entities (strategy list)",
    # core
    "_sql_string": "a string literal, parsed inside the statements that use it",
    "_sql_string_sql": "an expression, parsed inside the query _entity_state_target_filter runs",
    "_provenance_stamp_sql": "two columns, parsed inside every provenance statement",
    "_failpoint": "raises an injected failure, or renders nothing",
    "_session_setting": "reads a session setting: only for the state strategy's broadcast "
    "threshold (spark_session adapter) and branch (Iceberg)",
    "_check_entity_state_columns": "reads a table's columns (adapter); raises or nothing",
    "_entity_merge_locked_settings": "returns the declared settings (a dict)",
    "_entity_declaration_json": "returns JSON text, a string literal inside equality_edges",
    # upsert
    "upsert_config": "returns the resolved settings (a dict)",
    "upsert_provenance": "returns the events table (a relation)",
    "_upsert_provenance_relation": "returns the events table (a relation)",
    "_upsert_settings": "returns the known settings (a dict)",
    "_upsert_error": "raises a compiler error",
    "_upsert_names": "returns a list of column names",
    "_upsert_table_settings": "returns JSON text (stored by _store_upsert_table_settings)",
    "_upsert_update_columns": "returns the column names a MERGE updates",
    "_upsert_order_sql": "an expression, parsed inside the precombine of orders_merge",
    "_upsert_phased_sql": "a select, parsed inside the precombine of orders_merge",
    "_upsert_unordered_delete_sql": "a condition, parsed inside the precombine and the "
    "MERGE of orders_merge",
    "_upsert_prepare": "returns the prepared state (a dict); its checks run in orders_merge",
    "_upsert_mode_config": "returns the merge mode and flags (a dict)",
    "_upsert_table_type_config": "returns the table type settings (a dict)",
    "_check_upsert_tblproperties": "raises when tblproperties contradict the table type",
    "_upsert_column_config": "returns the column settings (a dict)",
    "_check_upsert_config_keys": "raises on a config key that resembles a setting",
    "_upsert_settings_added_later": "returns the values of later lock settings (a dict)",
    "_upsert_table_type_properties": "returns table properties (a dict), set by the ALTER of "
    "_store_upsert_table_settings",
    "_upsert_compaction_thresholds": "returns the checked thresholds (a dict)",
    # auto-merge
    "auto_merge_provenance": "returns the events table (a relation)",
    "_auto_merge_plan_relation": "returns the plan (a relation)",
    "_auto_merge_sql_text": "a string literal inside the CALL of _auto_merge_call_sql",
}
SPARK_SESSION_PROVENANCE = (
    "the spark_session upsert materialization's provenance=true only: "
    "get_incremental_upsert_sql, the dbt-databricks path, refuses provenance "
    "(test_upsert.py::TestUpsertAsCustomStrategy::test_provenance_needs_the_materialization)"
)
SPARK_SESSION_FLOW = (
    "a step of the spark_session adapter's incremental flow; dbt-databricks runs "
    "get_incremental_upsert_sql alone, which prepares itself (orders_merge)"
)
ICEBERG_ONLY = "Iceberg only; runs after _auto_merge_table_formats has passed every table"
AUTO_MERGE_DELTA = (
    "a plan of a Delta table runs through the spark_session adapter only (Delta's file list,"
    " adapter.delta_rewrite_merge): refused by _auto_merge_table_formats on other adapters;"
    " run on Delta in test_upsert_on_delta.py"
)
UPSERT_COMPACTION = (
    "merge_on_read compaction of an Iceberg table: inline_compaction needs the "
    "spark_session flow (an error on dbt-databricks), execute_upsert_compaction refuses "
    "a Delta table on other adapters; on Delta it is _compact_upsert_delta_table"
)
# the change-following path of a merged model: its scope is found in the components'
# history, which on Delta is `describe history` of Delta tables; this compile's tables are
# Iceberg (no Delta jar in this session), so _entity_change_scope returns none here
CHANGE_SCOPE = (
    "only with _entity_change_scope's scope: from a Delta table's history, run on Delta "
    "tables in test_entity_merge_on_delta.py (this compile's components are Iceberg)"
)
DIGEST = (
    "reached with a stored edges digest only, which finish_incremental_entity_state, a step "
    "of the spark_session flow, writes (entity_state runs on the spark_session adapter "
    "only: _refuse_entity_state): tested on Iceberg in test_entity_merge_following.py and "
    "on Delta in test_entity_merge_on_delta.py"
)
# a state batch with placeholders on Iceberg goes to a branch (Delta has none: there
# the placeholders and the MERGE are written as before)
STATE_BRANCH = (
    "Iceberg branches: only where file_format is iceberg (tested in "
    "test_entity_merge_following.py and test_concurrent_writers.py)"
)
# Iceberg commits a snapshot for a MERGE that changes nothing, Delta no version: only on
# Iceberg is the batch's changing rows counted first, and the MERGE skipped when none is left
NOTHING_TO_WRITE = (
    "Iceberg only: on Delta the MERGE of no changing row commits no version and runs "
    "as it is (tested on Iceberg in test_upsert.py)"
)
NOT_ON_DATABRICKS = {
    "_upsert_cached_relation": NOTHING_TO_WRITE,
    "_upsert_drop_cached": NOTHING_TO_WRITE,
    "_upsert_broadcast_rows": NOTHING_TO_WRITE,
    "_upsert_sample_keys": NOTHING_TO_WRITE,
    "_upsert_rows_var": NOTHING_TO_WRITE,
    "_upsert_nothing_to_write": NOTHING_TO_WRITE,
    "dbt_spark_validate_get_incremental_strategy": "the project's own routing on "
    "dbt-spark (dbt_spark_validate_strategy's caller)",
    "dbt_spark_get_incremental_sql": "the project's own routing on dbt-spark "
    "(dbt_spark_incremental_sql's caller)",
    "spark__drop_relation": "the project's own routing on dbt-spark "
    "(dbt_spark_drop_relation's caller)",
    "dbt_spark_drop_relation": "dbt-spark only (a Thrift server's Iceberg session catalog)",
    "_dbt_spark_drop_purges": "dbt-spark only (dbt_spark_drop_relation's check)",
    "dbt_spark_incremental_sql": "dbt-spark only (dbt-databricks finds "
    "get_incremental_upsert_sql itself); its upsert SQL is get_upsert_merge_sql's",
    "execute_auto_merge": "Iceberg, and Delta on the spark_session adapter: any other "
    "table fails before anything runs (test_execute_auto_merge_refuses_other_formats)",
    "_execute_auto_merge_run": ICEBERG_ONLY,
    "_execute_auto_merge_delta": AUTO_MERGE_DELTA,
    "_auto_merge_record_event": "appends a merge's event after its rewrite: "
    f"{ICEBERG_ONLY}, or {AUTO_MERGE_DELTA}",
    "_auto_merge_selected_files": f"reads <table>.data_files; {ICEBERG_ONLY}",
    "_auto_merge_call_sql": f"CALL <catalog>.system.rewrite_data_files; {ICEBERG_ONLY}",
    "_auto_merge_record_missed": f"reads <table>.all_entries and snapshots; {ICEBERG_ONLY}",
    "prepare_incremental_upsert": SPARK_SESSION_FLOW,
    "get_first_run_upsert_sql": SPARK_SESSION_FLOW,
    "finish_incremental_upsert": SPARK_SESSION_FLOW,
    "_create_upsert_provenance_table": SPARK_SESSION_PROVENANCE,
    "_table_version": "reads a table's history: by the spark_session upsert "
    "materialization's provenance, the Iceberg-only auto-merge runner and the edges' "
    "digest once stored (the spark_session flow)",
    "_upsert_version_exists": SPARK_SESSION_PROVENANCE,
    "_upsert_recorded_version": SPARK_SESSION_PROVENANCE,
    "_upsert_provenance_before": SPARK_SESSION_PROVENANCE,
    "_upsert_provenance_after": SPARK_SESSION_PROVENANCE,
    "_set_upsert_recorded_version": SPARK_SESSION_PROVENANCE,
    "execute_upsert_compaction": "Iceberg, and Delta on the spark_session adapter: any other "
    "table fails before anything runs (on Delta elsewhere: REORG TABLE ... APPLY (PURGE))",
    "_compact_upsert_delta_table": "reads a Delta table's files through the spark_session "
    "adapter (adapter.delta_file_deletes); run on Delta in test_upsert_on_delta.py",
    "get_upsert_compaction_sql": f"CALL <catalog>.system.rewrite_data_files; {UPSERT_COMPACTION}",
    "_compact_upsert_table": UPSERT_COMPACTION,
    "_upsert_pending_deletes_sql": f"reads <table>.position_deletes; {UPSERT_COMPACTION}",
    "_upsert_small_files_sql": f"reads <table>.data_files; {UPSERT_COMPACTION}",
    "_upsert_compaction_sizes": UPSERT_COMPACTION,
    "_upsert_compaction_outcome": UPSERT_COMPACTION,
    "_upsert_provenance_skip_compaction": UPSERT_COMPACTION,
    "_upsert_compaction_event": f"appends a compaction's event; {UPSERT_COMPACTION}",
    "_upsert_compaction_marker": "the userMetadata of a compaction's REORG through the "
    "spark_session adapter (adapter.execute_with_commit_metadata)",
    "_upsert_compaction_record_missed": "reads <table>.snapshots and all_entries, or a "
    f"Delta table's history and commits through the spark_session adapter; {UPSERT_COMPACTION}",
    "_entity_change_scope": "reads the components' history: here (Iceberg components "
    "under a delta config) it returns none after their provider; on Delta tables it runs "
    "in test_entity_merge_on_delta.py",
    "_entity_delta_built_from": f"describe history of the merged model and its components; "
    f"{CHANGE_SCOPE}",
    "_entity_old_ids_ctes": f"time travel to the components' version; {CHANGE_SCOPE}",
    "_entity_old_ids_sql": f"time travel to the components' version; {CHANGE_SCOPE}",
    "_entity_affected_cte": CHANGE_SCOPE,
    "_entity_affected_sql": f"time travel to the components' version; {CHANGE_SCOPE}",
    "_entity_state_read_setting": STATE_BRANCH,
    "_entity_state_mark_read": STATE_BRANCH,
    "_entity_state_read_base": STATE_BRANCH,
    "_entity_state_branch": STATE_BRANCH,
    "_entity_state_rewrite_sql": "rewrites a components table on an Iceberg branch: only "
    "where file_format is iceberg (tested in test_entity_merge_following.py)",
    "_entity_state_check_base": STATE_BRANCH,
    "_entity_state_publish": STATE_BRANCH,
    "_entity_state_raise_broadcast": "sets a session setting on the spark_session adapter only",
    "_entity_state_restore_broadcast": "sets a session setting on the spark_session adapter only",
    "_entity_current_sql": CHANGE_SCOPE,
    "_entity_changed_buckets_sql": DIGEST,
    "_entity_stored_rows_sql": DIGEST,
    "_entity_state_digest_sql": DIGEST,
    "_entity_next_digest_sql": DIGEST,
    "_entity_no_record_sql": DIGEST,
    "_entity_carried_records_sql": DIGEST,
    "_entity_live_rows": f"a Delta table's count (an Iceberg table's summary); {CHANGE_SCOPE}",
    "_entity_digest_snapshots": f"{DIGEST}; show tblproperties of the digest",
    "_entity_mark_event_sources": f"{DIGEST}; marks datasets in a dict, returns their names",
    "_entity_event_versions": f"{DIGEST}; reads an upsert's Iceberg history and properties",
    "_entity_event_buckets_sql": DIGEST,
    "_entity_feed_refusal": f"{DIGEST}; reads a Delta dataset's properties and history",
    "_table_properties": f"show tblproperties, for {DIGEST}",
    "_entity_feed_buckets_sql": f"{DIGEST}; reads a Delta dataset's change data feed",
    "finish_incremental_entity_state": f"{DIGEST}; a step of the spark_session flow",
    "_entity_rebuild_share": f"{DIGEST}; the edges rebuild by their digest",
    "_entity_edges_rebuild": f"{DIGEST}; the edges rebuild by their digest",
    "_entity_rebuilt_edge_rows_sql": f"{DIGEST}; the edges rebuild by their digest",
    "_entity_state_replace_sql": "replaces a state table rebuilt by the edges' Iceberg-only "
    "digest, or by a components run with its Iceberg table by name (tested in "
    "test_entity_merge_following.py)",
    "_entity_state_use_row_deletes": "alters a state table after its commit, in "
    "finish_incremental_entity_state, a step of the spark_session flow (tested on Delta in "
    "test_entity_merge_on_delta.py, on Iceberg in test_entity_merge_following.py)",
    "_sql_properties": "returns the text of a tblproperties list (inside "
    "_store_upsert_table_settings' alter table, parsed there, and "
    "_entity_state_use_row_deletes')",
    "_entity_state_compact": "compacts a state table after its commit, in "
    "finish_incremental_entity_state, a step of the spark_session flow (tested on Delta in "
    "test_entity_merge_on_delta.py, on Iceberg in test_entity_merge_following.py)",
    "_entity_state_compaction": "returns the compaction thresholds of a state model (a dict)",
    "_iceberg_current_snapshot": "reads an Iceberg table's history and snapshots (the state "
    "compaction's check, the merged model's live rows on Iceberg)",
}

# -- expected shape of each rendered node ----------------------------------------------------

# node -> (statement types, SQL text each must contain)
SHAPES = {
    "people_edges": ([exp.Query], ["explode(", "concat('0|'"]),
    "people_follow_edges": (
        [exp.Query],
        ["people_follow_edges__dbt_merge_batch"],
    ),
    "entity_state_sql": (
        [exp.Merge],
        ["when matched and source.`$drop` then delete", "<=>", "and target.`src` in ('"],
    ),
    # updates and deletes only (the new nodes were inserted first): an inner join
    "entity_state_components_sql": (
        [exp.Merge],
        ["when matched and source.`$drop` then delete", "on target.`node` <=> source.`node`"],
    ),
    "entity_state_components_known_sql": (
        [exp.Merge],
        ["when matched and source.`$drop` then delete", "on target.`node` <=> source.`node`"],
    ),
    "people": (
        [exp.Query],
        ["full outer join previous", "`$replaced`", "(select coalesce(max(`_updated`)"],
    ),
    "people_first": ([exp.Query], ["array_distinct(flatten(", "- 1 as `_updated`"]),
    "people_listed": ([exp.Query], ["assert_true(", "as `$merged`"]),
    "people_plain": ([exp.Query], ["having_0[0].j_0"]),
    "people_provenance": ([exp.Query], ["left anti join", "'REPLACED'"]),
    "people_provenance_first": ([exp.Query], ["'REPLACED'"]),
    "bins_provenance": ([exp.Query], ["left anti join", "'JOIN' as event_type"]),
    "bins_provenance_first": ([exp.Query], ["'JOIN' as event_type"]),
    "orders_first": ([exp.Query], ["row_number() over", "not coalesce(`is_deleted`, false)"]),
    "orders_merge": ([exp.Merge], ["DBT_INTERNAL_DEST.ts > 0", "then delete"]),
    "auto_merge_sql": ([exp.Query, exp.Create, exp.Insert], ["using iceberg", "'JOIN'"]),
    "identity_is_deterministic:people": ([exp.Query], ["distribute by rand()"]),
    "identity_is_deterministic:people_listed": ([exp.Query], ["members[0].member_id"]),
    "deleted_entities_not_merged:people": ([exp.Query], ["merged by the closure"]),
    "deleted_entities_not_merged:people_listed": ([exp.Query], ["as expected_id"]),
}
# the tables each node's statements must read or write
TABLES = {
    "people_edges": {"crm", "billing"},
    "people_follow_edges": {"people_follow_edges__dbt_merge_batch"},
    "entity_state_sql": {"people_follow_edges", "people_edges"},
    "entity_state_components_sql": {"people_follow_components", "people_components_batch"},
    "entity_state_components_known_sql": {
        "people_follow_components",
        "people_components_batch_known",
    },
    "people": {"crm", "billing", "people_components", "people"},
    "people_first": {"crm", "billing", "people_components"},
    "people_listed": {"crm", "billing", "people_components"},
    "people_plain": {"crm", "billing", "people_components"},
    "people_provenance": {"people", "people_provenance"},
    "people_provenance_first": {"people"},
    "bins_provenance": {"bins", "bins_provenance"},
    "bins_provenance_first": {"bins"},
    "orders_first": {"order_batch"},
    "orders_merge": {"orders_target", "order_batch"},
    "auto_merge_sql": {"delta_plan", "auto_merge_provenance"},
    "identity_is_deterministic:people": {"crm", "billing", "people_components", "people"},
    "identity_is_deterministic:people_listed": {"crm", "people_listed"},
    "deleted_entities_not_merged:people": {"crm", "people_components", "people"},
    "deleted_entities_not_merged:people_listed": {"crm", "people_listed"},
}
DISPATCHED = "default__"  # the implementation dispatch picks on dbt-databricks too


def parse(sql: str) -> exp.Expression:
    """One statement, parsed strictly as Databricks SQL."""
    return sqlglot.parse_one(sql, read="databricks", error_level=sqlglot.ErrorLevel.RAISE)


def parse_all(sql: str) -> list[exp.Expression]:
    """Every statement of a text (split by sqlglot: a `;` in a comment is no split)."""
    parsed = sqlglot.parse(sql, read="databricks", error_level=sqlglot.ErrorLevel.RAISE)
    return [statement for statement in parsed if statement is not None]


def flat(sql: str) -> str:
    return " ".join(sql.split())


def node_key(node) -> str:
    if node.resource_type == "test":
        return f"{node.test_metadata.name}:{node.test_metadata.kwargs['merge']}"
    return node.name


def package_macros(manifest: dict) -> dict[str, dict]:
    return {m["name"]: m for m in manifest["macros"].values() if m["package_name"] == "dbt_merge"}


def reachable(manifest: dict, unique_id: str) -> set[str]:
    """dbt_merge macros a node calls, directly or through other macros and dispatch."""
    node = manifest["nodes"][unique_id]
    names = {m.split(".")[-1] for m in node["depends_on"]["macros"] if ".dbt_merge." in m}
    names |= set(re.findall(r"\bdbt_merge\.(\w+)\s*\(", node["raw_code"]))
    macros = package_macros(manifest)
    seen: set[str] = set()
    while names:
        name = names.pop()
        if name in seen or name not in macros:
            continue
        seen.add(name)
        names |= {m.split(".")[-1] for m in macros[name]["depends_on"]["macros"]}
        names.add(DISPATCHED + name)
    return seen


def check_executed(queries: list[str], name: str) -> None:
    """The statements of EXECUTED[name] among queries: at least one, each parsed."""
    found = [q for q in queries if re.search(EXECUTED[name], flat(q), re.IGNORECASE)]
    assert found, f"{name} ran no statement matching {EXECUTED[name]!r}"
    for query in found:
        if name in ("_expression_type", "_query_columns"):
            # sqlglot (30.x, also read="spark") has no DESCRIBE QUERY, which Databricks
            # and Spark have: parse the query it describes
            query = re.sub(r"(?is)^\s*(/\*.*?\*/)?\s*describe\s+query\s+", "", query)
            assert isinstance(parse(query), exp.Select)
        elif name == "_check_upsert_table_settings":
            # sqlglot does not model SHOW TBLPROPERTIES (Databricks SQL): it parses it
            # as an opaque Command, so only its keyword is checked
            parsed = parse(query)
            assert isinstance(parsed, exp.Command) and parsed.this.upper() == "SHOW"
        elif name == "_entity_state_placeholders_sql":
            parsed = parse(query)
            assert isinstance(parsed, exp.Insert) and isinstance(parsed.expression, exp.Query)
        elif name == "_auto_merge_table_formats":
            assert isinstance(parse(query), exp.Describe)
        elif name in ("_entity_stage", "_entity_digest_plan"):
            parsed = parse(query)
            assert isinstance(parsed, exp.Create) and isinstance(parsed.expression, exp.Query)
        elif name == "_entity_stored_digest":
            # a table with its columns, no query
            parsed = parse(query)
            assert isinstance(parsed, exp.Create) and isinstance(parsed.this, exp.Schema)
        elif name == "_store_upsert_table_settings":
            assert isinstance(parse(query), exp.Alter)
            # orders_merge is merge_on_read: deletion vectors, set with the lock
            assert "'delta.enableDeletionVectors' = 'true'" in flat(query)
        else:
            assert isinstance(parse(query), exp.Query)
    if name == "_entity_state_placeholders_sql":
        # both forms: the stored keys found by a read of the table, or named by the batch
        assert any("left anti join" in flat(q) for q in found), found
        assert any("and not source.`$stored`" in flat(q) for q in found), found


class TestDeltaSql(InstallsDbtMerge):
    @pytest.fixture(scope="class")
    def models(self):
        return {**DATASETS, **PIPELINE, **RENDERING, "merge_tests.yml": MERGE_TESTS}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        # Iceberg while the datasets are built, delta (--vars) when the macros render
        return {
            **merge_vars(**MERGES),
            "models": {"+file_format": "{{ var('file_format', 'iceberg') }}"},
        }

    @pytest.fixture(scope="class")
    def built(self, project, spark):
        run_dbt(["deps"])
        run_dbt(["run", "--select", *BUILT])
        for name, definition in TABLES_OF_EARLIER_RUNS.items():
            spark.sql(f"create table {project.test_schema}.{name} {definition}")
        return project

    @pytest.fixture(scope="class")
    def compiled(self, built):
        recorder = Recorder()
        results = run_dbt(["compile", "--write-json", "--vars", DELTA_VARS], callbacks=[recorder])
        manifest = json.loads((Path(built.project_root) / "target" / "manifest.json").read_text())
        nodes = {node_key(r.node): r.node for r in results}
        return nodes, recorder.queries, manifest

    @pytest.fixture(scope="class")
    def refused(self, built):
        """execute_auto_merge of a plan over a Delta model and a parquet table."""
        recorder = Recorder()
        args = json.dumps({"plan": "delta_plan", "execute": True})
        run_dbt(
            ["run-operation", "dbt_merge.execute_auto_merge", "--args", args, "--vars", DELTA_VARS],
            expect_pass=False,
            callbacks=[recorder],
        )
        return recorder

    def test_every_macro_is_checked_or_excused(self, compiled):
        nodes, _, manifest = compiled
        package = set(package_macros(manifest))
        categories = [RENDERED, EXECUTED, PARSED_IN_UPSERT_FILE, NOT_SQL, NOT_ON_DATABRICKS]
        listed = [name for category in categories for name in category]
        assert len(listed) == len(set(listed)), "a macro is in one category only"

        def covered(name: str) -> bool:
            base = name.removeprefix(DISPATCHED)
            return name in listed or (base != name and base in package and base in listed)

        missing = sorted(name for name in package if not covered(name))
        assert missing == [], (
            f"dbt_merge macros without a Databricks SQL check: {missing}. Render and parse "
            "them in tests/functional/test_delta_sql.py (RENDERED or EXECUTED), or say why "
            "they produce no statement in NOT_SQL / NOT_ON_DATABRICKS"
        )
        assert sorted(set(listed) - package) == [], "listed macros that no longer exist"

        for name, key in RENDERED.items():
            assert name in reachable(manifest, nodes[key].unique_id), f"{key} does not call {name}"
        for name in PARSED_IN_UPSERT_FILE:
            assert f"dbt_merge.{name}(" in test_upsert_delta_sql.RENDER, name

    @pytest.mark.parametrize("key", sorted(SHAPES))
    def test_rendered_sql_parses_as_databricks_sql(self, compiled, key):
        nodes, _, _ = compiled
        node = nodes[key]
        if node.resource_type == "model":
            assert node.config.get("file_format") == "delta", "rendered for Delta"
        types, texts = SHAPES[key]
        parsed = parse_all(node.compiled_code)
        assert len(parsed) == len(types), (key, [type(p).__name__ for p in parsed])
        for statement, expected in zip(parsed, types, strict=True):
            assert isinstance(statement, expected), (key, type(statement).__name__)
        tables = {t.name for p in parsed for t in p.find_all(exp.Table)}
        assert TABLES[key] <= tables, (key, sorted(tables))
        text = flat(node.compiled_code)
        for snippet in texts:
            assert snippet in text, (key, snippet)

    def test_statement_details(self, compiled):
        nodes, _, _ = compiled
        merge = parse(nodes["orders_merge"].compiled_code)
        assert merge.this.name == "orders_target" and merge.this.alias == "DBT_INTERNAL_DEST"
        whens = [w.sql(dialect="databricks") for w in merge.find_all(exp.When)]
        assert whens[-1].startswith("WHEN NOT MATCHED") and whens[-1].endswith("INSERT *")
        select, create, insert = parse_all(nodes["auto_merge_sql"].compiled_code)
        assert select.find(exp.Group), "one row per merge"
        assert create.args["exists"] and create.kind == "TABLE"
        assert [c.name for c in create.find_all(exp.ColumnDef)][:2] == ["event_type", "table_name"]
        assert insert.this.name == "auto_merge_provenance"
        assert "it\\'s late" in nodes["auto_merge_sql"].compiled_code, "quoted for Spark"

    @pytest.mark.parametrize("name", sorted(set(EXECUTED) - {"_auto_merge_table_formats"}))
    def test_statements_run_while_rendering_parse(self, compiled, name):
        _, queries, _ = compiled
        check_executed(queries, name)

    def test_execute_auto_merge_refuses_other_formats(self, refused, spark, built):
        """A plan that names a parquet table fails before any merge runs; its Delta
        table passes the check on the spark_session adapter (refused on others)."""
        text = flat(" ".join(refused.messages))
        schema = built.test_schema
        expected = (
            f"dbt_merge.execute_auto_merge of plan {schema}.delta_plan, setting 'file_format': "
            f"table spark_catalog.{schema}.loose_events has file_format parquet "
            "(the provider of the table), and only Iceberg and Delta tables can be merged by"
            " it. Nothing was changed"
        )
        assert expected in text, text[-2000:]
        assert "delta_events has file_format" not in text
        assert not [q for q in refused.queries if re.search(r"(?i)\b(call|insert)\b", q)]
        assert not [q for q in refused.queries if ".data_files" in q], "no Iceberg metadata read"
        tables = {r.tableName for r in spark.sql(f"show tables in {schema}").collect()}
        assert "auto_merge_provenance" not in tables, "nothing was written"
        check_executed(refused.queries, "_auto_merge_table_formats")
