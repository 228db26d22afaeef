"""incremental_strategy='upsert' from a project that installs dbt_merge (SPEC §2)."""

from __future__ import annotations

import json
import os

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.conftest import dbt_env
from tests.functional.entity_merge_fixtures import InstallsDbtMerge

# (id, ts, name, price, is_deleted), three batches chosen by env_var('DBT_MERGE_TEST_BATCH').
# When that variable is not set, var('batch') chooses, because test_concurrent_writers.py
# imports this model and chooses its batch with --vars.
BATCHES = {
    1: [
        "(1, 2, 'name_2', 'price_2', false)",
        "(2, 5, 'x', null, false)",  # three versions of 2 in one batch: ts 7 wins
        "(2, 7, 'y', null, false)",
        "(2, 6, 'z', null, false)",
        "(3, 2, 'name_1', null, false)",
        "(4, 5, 's', null, false)",
        "(7, 1, 'x', null, true)",  # a delete on the first run: never stored
    ],
    2: [
        "(1, 1, 'name_1', 'price_1', false)",  # older than stored
        "(3, 1, null, 'price_1', false)",  # older, partial
        "(4, 3, null, null, true)",  # older delete
        "(5, 1, 'new', null, false)",
        "(6, 1, 'gone', null, true)",  # delete of a key never stored
    ],
    3: ["(4, 5, null, null, true)"],  # a delete with the stored ordering value: a tie
    # batch 2's new key (first: the one key of a sample of one) and delete of a key never
    # stored again, a newer version of 2 and one more new key
    4: [
        "(5, 1, 'new', null, false)",
        "(6, 1, 'gone', null, true)",
        "(2, 8, 'y8', null, false)",
        "(8, 1, 'eight', null, false)",
    ],
}

BATCH_SQL = """
{{ config(materialized='view') }}
{% set batches = BATCHES_JSON %}
select
    cast(id as int) as id,
    cast(ts as int) as ts,
    cast(name as string) as name,
    cast(price as string) as price,
    cast(is_deleted as boolean) as is_deleted
from values {{ batches[env_var('DBT_MERGE_TEST_BATCH', var('batch', 1) | string)] | join(', ') }}
    as t(id, ts, name, price, is_deleted)
""".replace("BATCHES_JSON", json.dumps({str(k): v for k, v in BATCHES.items()}))


def upsert_model(**config) -> str:
    settings = {
        "materialized": "incremental",
        "incremental_strategy": "upsert",
        "file_format": "iceberg",
        "unique_key": "id",
        **config,
    }
    rendered = ", ".join(
        f"{k}={v}" if str(v).startswith("env_var(") else f"{k}={v!r}" for k, v in settings.items()
    )
    return f"{{{{ config({rendered}) }}}}\nselect * from {{{{ ref('batch') }}}}"


def run_with_env(args: list[str], env: dict, *, capture: bool = False, **kwargs):
    """One dbt call (run_dbt, or run_dbt_and_capture with capture) under dbt_env(env)."""
    with dbt_env(env):
        return (run_dbt_and_capture if capture else run_dbt)(args, **kwargs)


PYTHON_UPSERT = """
def model(dbt, session):
    dbt.config(
        materialized="incremental",
        incremental_strategy="upsert",
        file_format="iceberg",
        unique_key="id",
        precombine_key="ts",
        delete_column="is_deleted",
    )
    return dbt.ref("batch")
"""

MODELS = {
    "batch.sql": BATCH_SQL,
    "python_event_time.py": PYTHON_UPSERT,
    "event_time.sql": upsert_model(
        precombine_key="ts",
        delete_column="is_deleted",
        merge_mode="env_var('DBT_MERGE_TEST_EVENT_MODE', 'event_time_ordering')",
    ),
    "commit_time.sql": upsert_model(
        precombine_key="ts", delete_column="is_deleted", merge_mode="commit_time_ordering"
    ),
    "partial.sql": upsert_model(
        precombine_key="ts", delete_column="is_deleted", partial_update=True
    ),
    "partial_payload.sql": upsert_model(
        precombine_key="ts", delete_column="is_deleted", payload="PartialUpdateAvroPayload"
    ),
    "non_defaults.sql": upsert_model(
        precombine_key="ts",
        delete_column="is_deleted",
        payload="OverwriteNonDefaultsWithLatestAvroPayload",
    ),
}


# What the models of MODELS store: after batch 1 (every model the same: precombined,
# the delete left out), after batch 2 (and again after it runs twice), and the keys of
# event_time after batch 3. Shared with the same scenario on Delta (test_upsert_on_delta).
FIRST = [
    (1, 2, "name_2", "price_2"),
    (2, 7, "y", None),
    (3, 2, "name_1", None),
    (4, 5, "s", None),
]
PARTIAL_SECOND = [
    (1, 2, "name_2", "price_2"),
    (2, 7, "y", None),
    (3, 2, "name_1", "price_1"),  # stored is newer: base, its null price filled
    (4, 5, "s", None),
    (5, 1, "new", None),
]
SECOND = {
    "event_time": [
        (1, 2, "name_2", "price_2"),  # an older version never overwrites
        (2, 7, "y", None),
        (3, 2, "name_1", None),
        (4, 5, "s", None),  # an older delete does not delete
        (5, 1, "new", None),
    ],
    # a Python model upserts the same way
    "python_event_time": [
        (1, 2, "name_2", "price_2"),
        (2, 7, "y", None),
        (3, 2, "name_1", None),
        (4, 5, "s", None),
        (5, 1, "new", None),
    ],
    "commit_time": [
        (1, 1, "name_1", "price_1"),  # the incoming version always wins
        (2, 7, "y", None),
        (3, 1, None, "price_1"),
        (5, 1, "new", None),  # 4 deleted by the incoming delete
    ],
    "partial": PARTIAL_SECOND,
    "partial_payload": PARTIAL_SECOND,  # the payload alias
    "non_defaults": [
        (1, 1, "name_1", "price_1"),
        (2, 7, "y", None),
        (3, 1, "name_1", "price_1"),  # null name keeps the stored one; ts goes back
        (5, 1, "new", None),
    ],
}
THIRD_EVENT_TIME_KEYS = [1, 2, 3, 5]


def table(spark, schema, name):
    return [
        tuple(r)
        for r in spark.sql(f"select id, ts, name, price from {schema}.{name} order by id").collect()
    ]


def data_files(spark, schema, name) -> set[str]:
    """The data files of an Iceberg table's current snapshot."""
    return {r[0] for r in spark.sql(f"select file_path from {schema}.{name}.data_files").collect()}


def snapshot_count(spark, schema, name) -> int:
    return spark.sql(f"select count(*) from {schema}.{name}.snapshots").first()[0]


def delete_files(spark, schema, name) -> int:
    """How many delete files (position or equality) the current snapshot has."""
    return spark.sql(f"select count(*) from {schema}.{name}.delete_files").first()[0]


def properties(spark, schema, name) -> dict[str, str]:
    return {r.key: r.value for r in spark.sql(f"show tblproperties {schema}.{name}").collect()}


WRITE_MODES = ("write.merge.mode", "write.update.mode", "write.delete.mode")
OTHER_TYPE = {"copy_on_write": "merge_on_read", "merge_on_read": "copy_on_write"}


class TableType:
    """Every upsert model of the class's project gets table_type (var table_type changes it).
    Scenario classes run as they are for copy_on_write (the default) and again, with the
    same expected results, as a `...MergeOnRead` subclass."""

    table_type = "copy_on_write"

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": {"+table_type": f"{{{{ var('table_type', '{self.table_type}') }}}}"}}

    def check_write_modes(self, spark, schema, name):
        mode = self.table_type.replace("_", "-")
        stored = properties(spark, schema, name)
        assert {key: stored.get(key) for key in WRITE_MODES} == dict.fromkeys(WRITE_MODES, mode)
        assert json.loads(stored["dbt_merge.upsert"])["table_type"] == self.table_type


class TestUpsertSemantics(TableType, InstallsDbtMerge):
    @pytest.fixture(scope="class")
    def models(self):
        return MODELS

    def run_batch(self, number):
        return run_with_env(["run"], {"batch": number})

    def test_three_batches(self, project, spark):
        schema = project.test_schema
        run_dbt(["deps"])
        self.run_batch(1)
        for name in ("event_time", "commit_time", "non_defaults", "partial"):
            assert table(spark, schema, name) == FIRST, f"{name}: precombined, delete left out"
        upserts = [name.split(".")[0] for name in MODELS if name != "batch.sql"]
        for name in upserts:
            self.check_write_modes(spark, schema, name)
        stored_files = data_files(spark, schema, "commit_time")

        self.run_batch(2)
        # commit_time updates keys 1 and 3 and deletes 4, in place
        if self.table_type == "merge_on_read":
            assert delete_files(spark, schema, "commit_time") > 0, "row-level deletes"
            assert stored_files <= data_files(spark, schema, "commit_time"), (
                "merge-on-read rewrites no data file"
            )
        else:
            assert not stored_files <= data_files(spark, schema, "commit_time"), (
                "copy-on-write rewrites the files that hold a changed key"
            )
        for name in upserts:
            assert delete_files(spark, schema, name) == 0 or self.table_type == "merge_on_read"
        for name, rows in SECOND.items():
            assert table(spark, schema, name) == rows, name

        before = {name: table(spark, schema, name) for name in upserts}
        snapshots = {name: snapshot_count(spark, schema, name) for name in upserts}
        self.run_batch(2)
        after = {name: table(spark, schema, name) for name in upserts}
        assert after == before, "re-running the same batch is idempotent"
        assert {name: snapshot_count(spark, schema, name) for name in upserts} == snapshots, (
            "the same batch again writes nothing: no snapshot"
        )
        # the same look without the broadcast (a batch over dbt_merge_upsert_broadcast_rows)
        run_with_env(["run", "--vars", '{"dbt_merge_upsert_broadcast_rows": 0}'], {"batch": 2})
        assert {name: snapshot_count(spark, schema, name) for name in upserts} == snapshots
        if self.table_type == "copy_on_write":
            _, output = run_with_env(
                [
                    "run",
                    "--select",
                    "event_time",
                    "--vars",
                    '{"dbt_merge_upsert_broadcast_rows": -1}',
                ],
                {"batch": 4},
                capture=True,
                expect_pass=False,
            )
            assert (
                "dbt_merge upsert in model event_time, var 'dbt_merge_upsert_broadcast_rows':"
                " expected a number of rows of 0 or more, got -1"
            ) in output
            assert table(spark, schema, "event_time") == before["event_time"], "nothing written"

        # the first look, at a sample of one key (5, unchanged), finds no change; the look
        # at the whole batch finds 2's
        _, output = run_with_env(
            ["--debug", "run", "--vars", '{"dbt_merge_upsert_sample_keys": 1}'],
            {"batch": 4},
            capture=True,
        )
        assert "event_time: no change among the precombined versions of the first 1 keys" in (
            output
        )
        changed = {2: (2, 8, "y8", None), 8: (8, 1, "eight", None)}
        for name in upserts:
            kept = [row for row in before[name] if row[0] not in changed]
            assert table(spark, schema, name) == sorted([*kept, *changed.values()]), name
            assert snapshot_count(spark, schema, name) == snapshots[name] + 1

        self.run_batch(3)
        assert [r[0] for r in table(spark, schema, "event_time")] == [*THIRD_EVENT_TIME_KEYS, 8], (
            "a delete with an equal ordering value wins (ties go to the incoming version)"
        )

    def test_merge_mode_is_fixed_once_the_table_exists(self, project, spark):
        schema = project.test_schema
        before = table(spark, schema, "event_time")
        _, output = run_with_env(
            ["run", "--select", "event_time"],
            {"batch": 1, "event_mode": "commit_time_ordering"},
            capture=True,
            expect_pass=False,
        )
        text = " ".join(output.split())
        assert "config 'merge_mode'" in text
        assert "merge_mode: event_time_ordering -> commit_time_ordering" in text
        assert "--full-refresh" in text
        assert table(spark, schema, "event_time") == before, "nothing written"

    def test_table_type_is_fixed_once_the_table_exists(self, project, spark):
        schema = project.test_schema
        before = table(spark, schema, "event_time")
        other = OTHER_TYPE[self.table_type]
        # The project-level config reads var('table_type'), so table_type stays in --vars.
        args = ["run", "--select", "event_time", "--vars"]
        _, output = run_with_env(
            [*args, json.dumps({"table_type": other})],
            {"batch": 1},
            capture=True,
            expect_pass=False,
        )
        text = " ".join(output.split())
        assert "dbt_merge upsert in model event_time, config 'table_type'" in text
        assert f"table_type: {self.table_type} -> {other}" in text
        assert "--full-refresh" in text
        assert table(spark, schema, "event_time") == before, "nothing written"
        self.check_write_modes(spark, schema, "event_time")

        # a table built before table_type was a setting: its stored JSON has none
        stored = json.loads(properties(spark, schema, "event_time")["dbt_merge.upsert"])
        del stored["table_type"]
        spark.sql(
            f"alter table {schema}.event_time set tblproperties"
            f" ('dbt_merge.upsert' = '{json.dumps(stored)}')"
        )
        run_with_env([*args, json.dumps({"table_type": "copy_on_write"})], {"batch": 1})
        _, output = run_with_env(
            [*args, json.dumps({"table_type": "merge_on_read"})],
            {"batch": 1},
            capture=True,
            expect_pass=False,
        )
        assert "table_type: copy_on_write -> merge_on_read" in " ".join(output.split()), (
            "a table without a stored table_type is copy_on_write"
        )


class TestUpsertSemanticsMergeOnRead(TestUpsertSemantics):
    table_type = "merge_on_read"


BAD_MODEL = """
{% set settings = {
    'materialized': 'incremental', 'incremental_strategy': 'upsert', 'file_format': 'iceberg'
} %}
{% do settings.update(fromjson(env_var('DBT_MERGE_TEST_UPSERT_CONFIG', '{}'))) %}
{{ config(**settings) }}
select * from {{ ref(env_var('DBT_MERGE_TEST_UPSERT_INPUT', 'batch')) }}
"""
NULL_KEYS = "select * from values (1, 1, true), (null, 2, false) as t(id, ts, is_deleted)"
TEXT_DELETES = "select * from values (1, 1, 'yes') as t(id, ts, is_deleted)"
KEEP_LARGER = """
{% macro keep_larger(column, source, target) -%}
    greatest({{ source }}.{{ column }}, {{ target }}.{{ column }})
{%- endmacro %}
"""


class TestUpsertConfigErrors(InstallsDbtMerge):
    """Bad config fails before anything is written, naming the model, key and value."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "batch.sql": BATCH_SQL,
            "bad.sql": BAD_MODEL,
            "null_keys.sql": NULL_KEYS,
            "text_deletes.sql": TEXT_DELETES,
            "custom.sql": upsert_model(
                precombine_key="ts", merge_mode="custom", custom_merger="keep_larger"
            ),
        }

    @pytest.fixture(scope="class")
    def macros(self):
        return {"keep_larger.sql": KEEP_LARGER}

    @pytest.fixture(scope="class")
    def ready(self, project):
        run_dbt(["deps"])
        run_dbt(["run", "--select", "batch", "null_keys", "text_deletes"])
        return project

    @pytest.mark.parametrize(
        "settings, expected",
        [
            (
                {"precombine_key": "ts"},
                "config 'unique_key': the upsert strategy needs a unique_key",
            ),
            ({"unique_key": "id"}, "config 'precombine_key': merge_mode event_time_ordering"),
            (
                {"unique_key": "id", "precombine_key": "ts", "merge_mode": "latest"},
                "config 'merge_mode': invalid merge mode provided: latest",
            ),
            (
                {"unique_key": "id", "precombine_key": "ts", "payload": "MyPayload"},
                "config 'payload': invalid payload provided: MyPayload",
            ),
            (
                {
                    "unique_key": "id",
                    "precombine_key": "ts",
                    "payload": "PartialUpdateAvroPayload",
                    "merge_mode": "commit_time_ordering",
                },
                "config 'merge_mode': is set to commit_time_ordering but payload "
                "PartialUpdateAvroPayload means merge_mode = event_time_ordering",
            ),
            (
                {"unique_key": "id", "precombine_key": "ts", "merge_mode": "custom"},
                "config 'custom_merger': merge_mode custom needs custom_merger",
            ),
            (
                {
                    "unique_key": "id",
                    "precombine_key": "ts",
                    "merge_mode": "custom",
                    "custom_merger": "no_such_macro",
                },
                "config 'custom_merger': no macro named no_such_macro",
            ),
            (
                {"unique_key": "order_id", "precombine_key": "ts"},
                "config 'unique_key': column order_id is not in the model",
            ),
            (
                {"unique_key": "id", "precombine_key": "ts", "file_format": "parquet"},
                "config 'file_format': is parquet",
            ),
            (
                {"unique_key": "id", "precombine_key": "ts", "table_type": "mor"},
                "config 'table_type': invalid table type provided: mor. Expected one of: "
                "copy_on_write, merge_on_read",
            ),
            (
                {
                    "unique_key": "id",
                    "precombine_key": "ts",
                    "table_type": "merge_on_read",
                    "file_format": "hudi",
                },
                "config 'table_type': merge_on_read needs row-level deletes: file_format "
                "iceberg (position deletes) or delta (deletion vectors), not hudi",
            ),
            (
                {
                    "unique_key": "id",
                    "precombine_key": "ts",
                    "inline_compaction": {"delete_files": 2},
                },
                "config 'inline_compaction': is set but table_type is copy_on_write",
            ),
            (
                {
                    "unique_key": "id",
                    "precombine_key": "ts",
                    "table_type": "merge_on_read",
                    "inline_compaction": {"delete_files": 0, "files": 2},
                },
                "config 'inline_compaction': Cannot use options [files], they are not "
                "supported by inline_compaction",
            ),
            (
                {
                    "unique_key": "id",
                    "precombine_key": "ts",
                    "table_type": "merge_on_read",
                    "inline_compaction": {"deleted_ratio": 1.5},
                },
                "config 'inline_compaction': 'deleted_ratio' is set to 1.5 but must be > 0 "
                "and <= 1",
            ),
            (
                {
                    "unique_key": "id",
                    "precombine_key": "ts",
                    "partial_update": True,
                    "overwrite_non_defaults": True,
                },
                "both partial_update and overwrite_non_defaults are true",
            ),
            (
                {
                    "unique_key": "id",
                    "precombine_key": "ts",
                    "table_type": "merge_on_read",
                    "tblproperties": {"write.merge.mode": "copy-on-write"},
                },
                "config 'tblproperties': sets 'write.merge.mode' = 'copy-on-write', but "
                "table_type merge_on_read writes 'merge-on-read' there",
            ),
            (
                {
                    "unique_key": "id",
                    "precombine_key": "ts",
                    "tblproperties": {"write.delete.mode": "merge-on-read"},
                },
                "config 'tblproperties': sets 'write.delete.mode' = 'merge-on-read', but "
                "table_type copy_on_write writes 'copy-on-write' there",
            ),
            (
                {
                    "unique_key": "id",
                    "precombine_key": "ts",
                    "table_type": "merge_on_read",
                    "tblproperties": {"format-version": "1"},
                },
                "config 'tblproperties': sets 'format-version' = '1', but table_type "
                "merge_on_read writes position deletes",
            ),
            (
                {"unique_key": "id", "precombine_keys": "ts"},
                "config 'precombine_keys': Cannot use options [precombine_keys], they are not "
                "supported by the upsert strategy. Did you mean precombine_key?",
            ),
            (
                {"unique_key": "id", "precombine_key": "ts", "deleteColumn": "is_deleted"},
                "config 'deleteColumn': Cannot use options [deleteColumn], they are not "
                "supported by the upsert strategy. Did you mean delete_column?",
            ),
            (
                {
                    "unique_key": "id",
                    "precombine_key": "ts",
                    "merge_mode": "custom",
                    "custom_merger": "keep_larger",
                    "partial_update": True,
                },
                "config 'partial_update': is true, but merge_mode custom renders every column "
                "with custom_merger",
            ),
            (
                {
                    "unique_key": "id",
                    "precombine_key": "ts",
                    "merge_mode": "custom",
                    "custom_merger": "keep_larger",
                    "overwrite_non_defaults": True,
                },
                "config 'overwrite_non_defaults': is true, but merge_mode custom renders every "
                "column with custom_merger",
            ),
        ],
    )
    def test_config_errors(self, ready, spark, settings, expected):
        self.fails(spark, ready.test_schema, {"upsert_config": settings}, expected)

    def test_batch_errors(self, ready, spark):
        keys = {"unique_key": "id", "precombine_key": "ts", "delete_column": "is_deleted"}
        self.fails(
            spark,
            ready.test_schema,
            {"upsert_config": keys, "upsert_input": "null_keys"},
            "config 'unique_key': 1 row(s) of the batch have a null id",
        )
        self.fails(
            spark,
            ready.test_schema,
            {"upsert_config": keys, "upsert_input": "text_deletes"},
            "config 'delete_column': column is_deleted has type string, expected boolean",
        )

    def fails(self, spark, schema, variables, expected):
        _, output = run_with_env(
            ["run", "--select", "bad"], variables, capture=True, expect_pass=False
        )
        text = " ".join(output.split())
        assert "dbt_merge upsert in model bad" in text
        assert expected in text, text[-1500:]
        listed = [r.tableName for r in spark.sql(f"show tables in {schema}").collect()]
        assert "bad" not in listed, "nothing was written"

    def test_custom_merger_renders_each_column(self, ready, spark):
        schema = ready.test_schema
        run_with_env(["run", "--select", "batch", "custom"], {"batch": 1})
        run_with_env(["run", "--select", "batch", "custom"], {"batch": 2})
        got = table(spark, schema, "custom")
        assert got[0] == (1, 2, "name_2", "price_2"), "greatest of each column"
        assert got[2] == (3, 2, "name_1", "price_1"), "greatest ignores nulls"


SCHEMA_CHANGE = """
{{{{ config(
    materialized='incremental', incremental_strategy='upsert', file_format='iceberg',
    unique_key='id', precombine_key='ts', on_schema_change='{mode}'
) }}}}
select 1 as id, {{{{ env_var('DBT_MERGE_TEST_TS', '1') | int }}}} as ts, 'a' as name
{{% if fromjson(env_var('DBT_MERGE_TEST_WITH_NOTE', 'false')) %}}, 'hello' as note{{% endif %}}
"""


class TestUpsertSchemaChanges(TableType, InstallsDbtMerge):
    """on_schema_change behaves as with dbt-spark's merge strategy."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "appends.sql": SCHEMA_CHANGE.format(mode="append_new_columns"),
            "ignores.sql": SCHEMA_CHANGE.format(mode="ignore"),
        }

    def test_new_batch_column(self, project, spark):
        schema = project.test_schema
        run_dbt(["deps"])
        run_dbt(["run"])
        run_with_env(["run"], {"ts": 2, "with_note": True})
        appended = spark.sql(f"select id, ts, name, note from {schema}.appends").collect()
        assert [tuple(r) for r in appended] == [(1, 2, "a", "hello")]
        ignored = spark.table(f"{schema}.ignores")
        assert ignored.columns == ["id", "ts", "name"], "the new column is left out"
        assert [tuple(r) for r in ignored.collect()] == [(1, 2, "a")]


class TestUpsertSchemaChangesMergeOnRead(TestUpsertSchemaChanges):
    table_type = "merge_on_read"


def events(spark, schema, name):
    rows = spark.sql(
        f"select event_type, record_key, old_row, new_row, table_version, invocation_id"
        f" from {schema}.{name}__provenance"
    ).collect()
    return rows


# the batch and an upsert model with provenance events (also test_concurrent_writers.py)
AUDITED_MODELS = {
    "batch.sql": BATCH_SQL,
    "audited.sql": upsert_model(precombine_key="ts", delete_column="is_deleted", provenance=True),
}


class TestUpsertProvenance(TableType, InstallsDbtMerge):
    """provenance=true: CREATE / UPDATE / DELETE per key a run changed (SPEC §5)."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            **AUDITED_MODELS,
            "composite.sql": upsert_model(
                unique_key=["id", "ts"], precombine_key="ts", provenance=True
            ),
            # provenance turned on by an environment variable, after the table exists
            "late.sql": upsert_model(
                precombine_key="ts",
                delete_column="is_deleted",
                provenance="env_var('DBT_MERGE_TEST_LATE_PROVENANCE', 'no') == 'yes'",
            ),
        }

    def run_batch(self, number, *select):
        return run_with_env(["run", *(["--select", *select] if select else [])], {"batch": number})

    def kinds(self, spark, schema, name="audited"):
        return sorted((r.event_type, r.record_key) for r in events(spark, schema, name))

    def test_events_follow_what_each_run_changed(self, project, spark):
        schema = project.test_schema
        run_dbt(["deps"])
        first = self.run_batch(1)
        assert self.kinds(spark, schema) == [
            ("CREATE", "1"),
            ("CREATE", "2"),
            ("CREATE", "3"),
            ("CREATE", "4"),
        ], "the first run creates every stored key; the batch's delete of 7 stores nothing"
        created = {r.record_key: r for r in events(spark, schema, "audited")}
        assert created["2"].old_row is None
        assert json.loads(created["2"].new_row) == {
            "id": 2,
            "ts": 7,
            "name": "y",
            "is_deleted": False,
        }, "the precombined winner, nulls left out of the JSON"
        assert {r.invocation_id for r in events(spark, schema, "audited")} == {
            first[0].node.config.get("invocation_id") or created["1"].invocation_id
        }

        self.run_batch(2)
        assert self.kinds(spark, schema)[4:] == [("CREATE", "5")], (
            "older versions and an older delete change nothing and record nothing"
        )
        self.run_batch(3)
        deleted = [r for r in events(spark, schema, "audited") if r.event_type == "DELETE"]
        assert [(r.record_key, r.new_row) for r in deleted] == [("4", None)]
        assert json.loads(deleted[0].old_row)["name"] == "s"
        versions = {r.table_version for r in events(spark, schema, "audited")}
        assert len(versions) == 3, "each run's events carry the table version it produced"
        assert len({r.invocation_id for r in events(spark, schema, "audited")}) == 3

        composite = self.kinds(spark, schema, "composite")
        assert ("CREATE", '{"id":2,"ts":7}') in composite, "a composite key is a JSON object"

    def test_a_change_without_events_is_recorded_by_the_next_run(self, project, spark):
        schema = project.test_schema
        known = set(events(spark, schema, "audited"))
        # a write outside dbt (or a run that died after its MERGE, before its events)
        spark.sql(f"update {schema}.audited set name = 'outside' where id = 1")
        self.run_batch(3, "audited")
        new = [r for r in events(spark, schema, "audited") if r not in known]
        assert [(r.event_type, r.record_key) for r in new] == [("UPDATE", "1")]
        assert json.loads(new[0].old_row)["name"] == "name_2"
        assert json.loads(new[0].new_row)["name"] == "outside"

    def test_events_written_without_their_version_are_not_recorded_twice(self, project, spark):
        schema = project.test_schema
        self.run_batch(2, "audited")  # changes nothing
        spark.sql(f"update {schema}.audited set name = 'again' where id = 1")
        self.run_batch(3, "audited")
        count = len(events(spark, schema, "audited"))
        # a run that died after writing its events but before recording their version
        spark.sql(
            f"alter table {schema}.audited__provenance"
            " unset tblproperties ('dbt_merge.provenance_version')"
        )
        self.run_batch(3, "audited")
        assert len(events(spark, schema, "audited")) == count
        # that run changed nothing, so it recorded no version: a change outside dbt, which
        # the next run records, sets it again
        spark.sql(f"update {schema}.audited set name = 'after' where id = 1")
        self.run_batch(3, "audited")
        assert "dbt_merge.provenance_version" in properties(spark, schema, "audited__provenance")

    def test_changes_that_may_have_no_events_mark_a_gap(self, project, spark):
        """dbt_merge.provenance_gap_at: an entity merge does not read the events across it."""
        schema = project.test_schema
        assert not spark.catalog.tableExists(f"{schema}.late__provenance")
        built = current_snapshot(spark, schema, "late")
        # batch 1 again (its view too: --select late alone reads the view as the last run
        # left it, batch 3, which changes nothing now): it stores key 4 again
        run_with_env(["run", "--select", "batch", "late"], {"batch": 1, "late_provenance": "yes"})
        run_with_env(["run", "--select", "batch"], {"batch": 3})  # the view as it was
        late = properties(spark, schema, "late__provenance")
        assert late["dbt_merge.provenance_gap_at"] == built, (
            "provenance turned on for a table with rows: its changes so far have no events"
        )
        assert late["dbt_merge.provenance_version"] == current_snapshot(spark, schema, "late")
        assert late["dbt_merge.provenance_version"] != built, "batch 1 changed the table"

        audited = properties(spark, schema, "audited__provenance")
        assert "dbt_merge.provenance_gap_at" not in audited, (
            "every change so far has events: a first build's CREATE events are complete"
        )
        # a write outside the upsert, then its recorded version expired before a catch-up
        spark.sql(f"update {schema}.audited set name = 'expired' where id = 1")
        outside = current_snapshot(spark, schema, "audited")
        spark.sql(
            f"call spark_catalog.system.expire_snapshots(table => '{schema}.audited',"
            " older_than => timestamp '2999-01-01 00:00:00', retain_last => 1)"
        )
        known = set(events(spark, schema, "audited"))
        _, log = run_with_env(["run", "--select", "audited"], {"batch": 3}, capture=True)
        assert f"version {audited['dbt_merge.provenance_version']} of" in log
        assert "has expired" in log
        audited = properties(spark, schema, "audited__provenance")
        assert audited["dbt_merge.provenance_gap_at"] == outside, (
            "the outside write's changes have no events: the gap is at the version the run found"
        )
        assert not any(r.record_key == "1" for r in set(events(spark, schema, "audited")) - known)


class TestUpsertProvenanceMergeOnRead(TestUpsertProvenance):
    table_type = "merge_on_read"


# dbt-databricks 1.11's incremental flow, step by step, on the local adapter: a plain
# CREATE TABLE AS on the first run, then a staged batch and the SQL of the strategy
# macro that adapter.get_incremental_strategy_macro finds (get_incremental_upsert_sql).
DATABRICKS_FLOW = """
{% materialization incremental, adapter='spark_session', supported_languages=['sql'] %}
  {%- set target_relation = this.incorporate(type='table') -%}
  {%- set existing_relation = load_relation(this) -%}
  {%- set on_schema_change = incremental_validate_on_schema_change(
        config.get('on_schema_change'), default='ignore') -%}
  {{ run_hooks(pre_hooks) }}
  {%- if existing_relation is none or should_full_refresh() -%}
    {%- if existing_relation is not none -%}
      {% do adapter.drop_relation(existing_relation) %}
    {%- endif -%}
    {%- call statement('main') -%}
      {{ create_table_as(False, target_relation, compiled_code) }}
    {%- endcall -%}
  {%- else -%}
    {%- set temp_relation = make_temp_relation(target_relation)
        .include(database=false, schema=false) -%}
    {%- call statement('create_temp_relation') -%}
      {{ create_table_as(True, temp_relation, compiled_code) }}
    {%- endcall -%}
    {%- do process_schema_changes(on_schema_change, temp_relation, existing_relation) -%}
    {%- set strategy_sql_macro_func = adapter.get_incremental_strategy_macro(
        context, config.get('incremental_strategy')) -%}
    {%- set build_sql = strategy_sql_macro_func({
        'target_relation': target_relation, 'temp_relation': temp_relation,
        'unique_key': config.get('unique_key'), 'dest_columns': none,
        'incremental_predicates': config.get('incremental_predicates')}) -%}
    {%- call statement('main') -%}{{ build_sql }}{%- endcall -%}
  {%- endif -%}
  {{ run_hooks(post_hooks) }}
  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
"""
ROOT_STRATEGY = """
{% macro get_incremental_upsert_sql(arg_dict) %}
    {{ return(dbt_merge.get_incremental_upsert_sql(arg_dict)) }}
{% endmacro %}
"""


def strategy_model(body="select * from {{ ref('batch') }}", **config):
    head = upsert_model(**config).split("\n")[0]
    return f"{head}\n{{% call dbt_merge.precombined() %}}\n{body}\n{{% endcall %}}\n"


class TestUpsertAsCustomStrategy(TableType, InstallsDbtMerge):
    """The Databricks path: get_incremental_upsert_sql under dbt-databricks's flow."""

    @pytest.fixture(scope="class")
    def models(self):
        settings = {"precombine_key": "ts", "delete_column": "is_deleted"}
        return {
            "batch.sql": BATCH_SQL,
            "event_time.sql": strategy_model(
                **settings, merge_mode="env_var('DBT_MERGE_TEST_EVENT_MODE', 'event_time_ordering')"
            ),
            "partial.sql": strategy_model(**settings, partial_update=True),
            "commit_time.sql": strategy_model(**settings, merge_mode="commit_time_ordering"),
            "audited.sql": strategy_model(**settings, provenance=True),
        }

    @pytest.fixture(scope="class")
    def macros(self):
        return {"databricks_flow.sql": DATABRICKS_FLOW, "upsert_strategy.sql": ROOT_STRATEGY}

    def test_same_tables_as_the_materialization(self, project, spark):
        schema = project.test_schema
        run_dbt(["deps"])
        select = ["--select", "batch", "event_time", "partial", "commit_time"]
        run_with_env(["run", *select], {"batch": 1})
        stored = spark.sql(f"show tblproperties {schema}.event_time").collect()
        assert "dbt_merge.upsert" not in {r.key for r in stored}, "a plain CREATE TABLE AS"
        assert table(spark, schema, "event_time") == [
            (1, 2, "name_2", "price_2"),
            (2, 7, "y", None),
            (3, 2, "name_1", None),
            (4, 5, "s", None),
        ], "the first run precombined by dbt_merge.precombined(), the delete left out"
        for batch in (2, 3):
            run_with_env(["run", *select], {"batch": batch})
        assert table(spark, schema, "event_time") == [
            (1, 2, "name_2", "price_2"),
            (2, 7, "y", None),
            (3, 2, "name_1", None),
            (5, 1, "new", None),
        ]
        assert table(spark, schema, "partial") == [
            (1, 2, "name_2", "price_2"),
            (2, 7, "y", None),
            (3, 2, "name_1", "price_1"),
            (5, 1, "new", None),
        ]
        assert table(spark, schema, "commit_time") == [
            (1, 1, "name_1", "price_1"),
            (2, 7, "y", None),
            (3, 1, None, "price_1"),
            (5, 1, "new", None),
        ]
        stored = spark.sql(f"show tblproperties {schema}.event_time").collect()
        assert "dbt_merge.upsert" in {r.key for r in stored}, "the first merge stores the mode"
        self.check_write_modes(spark, schema, "event_time")

        before = table(spark, schema, "event_time")
        changed = {"batch": 2, "event_mode": "commit_time_ordering"}
        _, output = run_with_env(
            ["run", "--select", "event_time"], changed, capture=True, expect_pass=False
        )
        assert "merge_mode: event_time_ordering -> commit_time_ordering" in " ".join(output.split())
        assert table(spark, schema, "event_time") == before, "the mode lock holds here too"

    def test_provenance_needs_the_materialization(self, project, spark):
        """Refused by name on an incremental run, which writes nothing. (On the first
        run, precombined() refuses it on adapters other than spark_session; here, on
        spark_session, it leaves provenance to the adapter's own materialization, so that
        one model runs on several adapters: test_thrift.py shows the first run's refusal
        on dbt-spark.)"""
        schema = project.test_schema
        refused = "dbt_merge upsert in model audited, config 'provenance'"
        run_with_env(["run", "--select", "batch"], {"batch": 1})
        spark.sql(f"create table {schema}.audited using iceberg as select * from {schema}.batch")
        before = table(spark, schema, "audited")
        _, output = run_with_env(
            ["run", "--select", "audited"], {"batch": 2}, capture=True, expect_pass=False
        )
        assert refused in " ".join(output.split())
        assert table(spark, schema, "audited") == before, "the refused run wrote"


class TestUpsertAsCustomStrategyMergeOnRead(TestUpsertAsCustomStrategy):
    table_type = "merge_on_read"


TIE_BATCH = """
{{ config(materialized='view') }}
{% set rows = {
    'ties': ["(1, 'a', 5, 'arrived second', 'p1', 2)", "(1, 'a', 5, 'zz first', 'p2', 1)",
             "(2, 'a', 1, 'x', 'p', 1)"],
    'ties_reversed': ["(2, 'a', 1, 'x', 'p', 1)", "(1, 'a', 5, 'zz first', 'p2', 1)",
                      "(1, 'a', 5, 'arrived second', 'p1', 2)"],
    'composite': ["(1, 'a', 1, 'one', 'p', 1)", "(1, 'b', 1, 'two', 'p', 1)"],
    'composite_update': ["(1, 'b', 2, 'two again', null, 1)"],
} %}
select
    cast(id as int) as id, cast(region as string) as region, cast(ts as int) as ts,
    cast(name as string) as name, cast(price as string) as price, cast(arrived as int) as arrived
from values {{ rows[env_var('DBT_MERGE_TEST_ROWS', 'ties')] | join(', ') }}
    as t(id, region, ts, name, price, arrived)
"""


def tie_model(**config) -> str:
    return upsert_model(**config).replace("ref('batch')", "ref('tie_batch')")


class TestUpsertTiesAndKeys(TableType, InstallsDbtMerge):
    """Ties inside a batch with and without arrival_column; composite keys; partial
    update with a newer incoming version."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "tie_batch.sql": TIE_BATCH,
            "by_arrival.sql": tie_model(precombine_key="ts", arrival_column="arrived"),
            "by_content.sql": tie_model(precombine_key="ts"),
            "by_region.sql": tie_model(unique_key=["id", "region"], precombine_key="ts"),
            "partial_newer.sql": tie_model(
                unique_key=["id", "region"], precombine_key="ts", partial_update=True
            ),
        }

    def names(self, spark, schema, model):
        sql = f"select id, region, name, price from {schema}.{model} order by id, region"
        return [tuple(r) for r in spark.sql(sql).collect()]

    def run_rows(self, rows, *models, full_refresh=False):
        args = ["run", "--select", "tie_batch", *models]
        run_with_env(args + (["--full-refresh"] if full_refresh else []), {"rows": rows})

    def test_ties(self, project, spark):
        schema = project.test_schema
        run_dbt(["deps"])
        for rows in ("ties", "ties_reversed"):
            self.run_rows(rows, "by_arrival", "by_content", full_refresh=True)
            assert self.names(spark, schema, "by_arrival")[0] == (1, "a", "arrived second", "p1"), (
                "equal precombine_key: the later arrival wins, though its JSON is smaller"
            )
            # without arrival_column, the greater row JSON wins: "zz first" > "arrived second"
            assert self.names(spark, schema, "by_content")[0] == (1, "a", "zz first", "p2"), rows

    def test_composite_keys_and_a_newer_partial_version(self, project, spark):
        schema = project.test_schema
        self.run_rows("composite", "by_region", "partial_newer")
        self.run_rows("composite_update", "by_region", "partial_newer")
        assert self.names(spark, schema, "by_region") == [
            (1, "a", "one", "p"),
            (1, "b", "two again", None),
        ], "only the (1, b) key changes"
        assert self.names(spark, schema, "partial_newer") == [
            (1, "a", "one", "p"),
            (1, "b", "two again", "p"),
        ], "the newer incoming version is the base; its null price takes the stored one"


class TestUpsertTiesAndKeysMergeOnRead(TestUpsertTiesAndKeys):
    table_type = "merge_on_read"


# -- merge_on_read compaction ------------------------------------------------------------


def pending_deletes(spark, schema, name) -> int:
    """Deleted rows of live data files: what compaction folds back."""
    return spark.sql(
        f"select count(*) from {schema}.{name}.position_deletes as deletes"
        f" join {schema}.{name}.data_files as data on deletes.file_path = data.file_path"
    ).first()[0]


def compaction_events(spark, schema, name):
    return spark.sql(
        f"select * from {schema}.auto_merge_provenance where plan_model = '{name}'"
    ).collect()


def recorded_version(spark, schema, name) -> str:
    return properties(spark, schema, f"{name}__provenance")["dbt_merge.provenance_version"]


def current_snapshot(spark, schema, name) -> str:
    return str(
        spark.sql(
            f"select snapshot_id from {schema}.{name}.history where is_current_ancestor"
            " order by made_current_at desc limit 1"
        ).first()[0]
    )


def rewrite_snapshot(spark, schema, name) -> str:
    """The newest snapshot that replaced data files (a rewrite_data_files)."""
    return str(
        spark.sql(
            f"select snapshot_id from {schema}.{name}.snapshots where operation = 'replace'"
            " and cast(summary['deleted-data-files'] as int) > 0 order by committed_at desc"
        ).first()[0]
    )


# a test project's override (dispatch) of the compaction statement: with
# DBT_MERGE_TEST_KILL_BEFORE_COMPACTION=true the run fails after its MERGE and provenance commits
KILL_BEFORE_COMPACTION = """
{% macro default__get_upsert_compaction_sql(relation, thresholds) %}
    {%- if fromjson(env_var('DBT_MERGE_TEST_KILL_BEFORE_COMPACTION', 'false')) -%}
    select raise_error('killed after the MERGE, before compaction')
    {%- else -%}
    {{ dbt_merge.default__get_upsert_compaction_sql(relation, thresholds) }}
    {%- endif -%}
{% endmacro %}
"""
COMMIT_TIME = {"precombine_key": "ts", "delete_column": "is_deleted"}
COMMIT_TIME["merge_mode"] = "commit_time_ordering"
AFTER_BATCH_2 = [
    (1, 1, "name_1", "price_1"),
    (2, 7, "y", None),
    (3, 1, None, "price_1"),
    (5, 1, "new", None),
]
# batch 1 again on top (commit time: every incoming version wins; 4 comes back)
AFTER_BATCH_1_AGAIN = [
    (1, 2, "name_2", "price_2"),
    (2, 7, "y", None),
    (3, 2, "name_1", None),
    (4, 5, "s", None),
    (5, 1, "new", None),
]


# the scheduled compaction, followed by its --args
COMPACTION = ["run-operation", "dbt_merge.execute_upsert_compaction", "--args"]


class TestUpsertCompaction(InstallsDbtMerge):
    """merge_on_read compaction, inline (thresholds) and scheduled (run-operation): the
    contents never change, and each compaction is a JOIN event."""

    @pytest.fixture(scope="class")
    def models(self):
        mor = {**COMMIT_TIME, "table_type": "merge_on_read"}
        return {
            "batch.sql": BATCH_SQL,
            "reference.sql": upsert_model(**COMMIT_TIME),
            "compacted.sql": upsert_model(
                **mor, inline_compaction={"delete_files": 1}, provenance=True
            ),
            "thresholded.sql": upsert_model(**mor, inline_compaction={"delete_files": 3}),
            "scheduled.sql": upsert_model(**mor, provenance=True),
            # an empty merge-on-read table that test_compaction_keeps_the_files_apart fills
            "two_files.sql": (
                "{{ config(materialized='table', file_format='iceberg', tblproperties={"
                "'format-version': '2', 'write.delete.mode': 'merge-on-read'}) }}\n"
                "select cast(id as int) as id, cast(name as string) as name"
                " from values (0, 'n0') as t(id, name) where false"
            ),
            # the same, partitioned: test_compaction_folds_the_small_files_of_its_partition
            "parted.sql": (
                "{{ config(materialized='table', file_format='iceberg', partition_by=['p'],"
                " tblproperties={'format-version': '2', 'write.delete.mode': 'merge-on-read'}) }}\n"
                "select cast(id as int) as id, cast(name as string) as name, cast(p as int) as p"
                " from values (0, 'n0', 0) as t(id, name, p) where false"
            ),
        }

    @pytest.fixture(scope="class")
    def macros(self):
        return {"kill_before_compaction.sql": KILL_BEFORE_COMPACTION}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {
            "dispatch": [{"macro_namespace": "dbt_merge", "search_order": ["test", "dbt_merge"]}]
        }

    def run_batch(self, number, *select, **variables):
        return run_with_env(
            ["run", *(["--select", "batch", *select] if select else [])],
            {"batch": number, **variables},
            capture=True,
            expect_pass=not variables.get("kill_before_compaction"),
        )

    def test_inline_compaction_past_the_thresholds(self, project, spark):
        schema = project.test_schema
        run_dbt(["deps"])
        self.run_batch(1)
        self.run_batch(2)
        for name in ("reference", "compacted", "thresholded", "scheduled"):
            assert table(spark, schema, name) == AFTER_BATCH_2, name
        assert pending_deletes(spark, schema, "compacted") == 0, "compacted at the end of the run"
        assert pending_deletes(spark, schema, "thresholded") > 0, "one delete file is below 3"
        assert pending_deletes(spark, schema, "scheduled") > 0, "no inline compaction"
        (event,) = compaction_events(spark, schema, "compacted")
        assert event.event_type == "JOIN" and event.parent_ids and event.child_ids
        # the event is at the snapshot that replaced the files (rewrite_data_files);
        # a rewrite of delete files left dangling may follow it
        assert str(event.snapshot_id) == rewrite_snapshot(spark, schema, "compacted")
        assert not set(event.child_ids) & set(event.parent_ids)
        assert compaction_events(spark, schema, "thresholded") == []
        assert recorded_version(spark, schema, "compacted") == current_snapshot(
            spark, schema, "compacted"
        ), "the model's provenance moves past the compaction, which changed no row"
        assert sorted((r.event_type, r.record_key) for r in events(spark, schema, "compacted")) == [
            ("CREATE", "1"),
            ("CREATE", "2"),
            ("CREATE", "3"),
            ("CREATE", "4"),
            ("CREATE", "5"),
            ("DELETE", "4"),
            ("UPDATE", "1"),
            ("UPDATE", "3"),
        ]

    def test_a_run_killed_before_compaction_leaves_a_correct_table(self, project, spark):
        schema = project.test_schema
        known = len(events(spark, schema, "compacted"))
        _, output = self.run_batch(1, "compacted", kill_before_compaction=True)
        assert "killed after the MERGE, before compaction" in output
        assert table(spark, schema, "compacted") == AFTER_BATCH_1_AGAIN, "the MERGE's commit"
        assert pending_deletes(spark, schema, "compacted") > 0, "not compacted"
        assert len(events(spark, schema, "compacted")) > known, "its events were recorded"
        assert len(compaction_events(spark, schema, "compacted")) == 1

        _, output = self.run_batch(1)
        for name in ("reference", "compacted", "thresholded", "scheduled"):
            assert table(spark, schema, name) == AFTER_BATCH_1_AGAIN, name
        assert pending_deletes(spark, schema, "compacted") == 0, "the next run compacts"
        assert len(compaction_events(spark, schema, "compacted")) == 2
        assert "without provenance" not in output, "no change went unrecorded"

    def test_scheduled_compaction(self, project, spark):
        schema = project.test_schema
        before = table(spark, schema, "scheduled")
        pending = pending_deletes(spark, schema, "scheduled")
        snapshot = current_snapshot(spark, schema, "scheduled")
        _, output = run_dbt_and_capture([*COMPACTION, json.dumps({"model": "scheduled"})])
        assert "upsert compaction dry run of" in output and "nothing was changed" in output
        assert current_snapshot(spark, schema, "scheduled") == snapshot, "a dry run by default"
        assert pending_deletes(spark, schema, "scheduled") == pending

        run_dbt([*COMPACTION, json.dumps({"model": "scheduled", "execute": True})])
        assert table(spark, schema, "scheduled") == before, "the same rows"
        count = spark.sql(f"select count(*) from {schema}.scheduled").first()[0]
        assert count == len(before)
        assert pending_deletes(spark, schema, "scheduled") == 0
        assert delete_files(spark, schema, "scheduled") == 0, "no delete file is left"
        (event,) = compaction_events(spark, schema, "scheduled")
        assert str(event.snapshot_id) == rewrite_snapshot(spark, schema, "scheduled")
        assert recorded_version(spark, schema, "scheduled") == current_snapshot(
            spark, schema, "scheduled"
        )

        known = set(events(spark, schema, "scheduled"))
        _, output = self.run_batch(3, "scheduled")
        new = [r for r in events(spark, schema, "scheduled") if r not in known]
        assert [(r.event_type, r.record_key) for r in new] == [("DELETE", "4")]
        assert "without provenance" not in output

    def test_a_compaction_that_died_before_its_event_is_recorded_by_the_next(self, project, spark):
        """A scheduled compaction that dies between its rewrite's commit and its JOIN
        event (failure point upsert.before_compaction_event): the rewrite is stored
        (same rows, no pending delete), its event is not. The next compaction finds the
        rewrite in the table's history, records the event a compaction that did not die
        records (test_scheduled_compaction) and moves the model's provenance past it;
        one more records nothing."""
        schema = project.test_schema
        name = "scheduled"
        assert pending_deletes(spark, schema, name) > 0, "batch 3 deleted a row"
        rows, files = table(spark, schema, name), data_files(spark, schema, name)
        known = compaction_events(spark, schema, name)
        execute = [*COMPACTION, json.dumps({"model": name, "execute": True})]
        os.environ["DBT_MERGE_FAIL_AT"] = "upsert.before_compaction_event"
        try:
            _, output = run_dbt_and_capture(execute, expect_pass=False)
        finally:
            del os.environ["DBT_MERGE_FAIL_AT"]
        assert "injected failure at upsert.before_compaction_event" in output
        after = data_files(spark, schema, name)
        assert pending_deletes(spark, schema, name) == 0 and after != files, "the rewrite"
        assert table(spark, schema, name) == rows
        assert compaction_events(spark, schema, name) == known, "no event yet"

        _, output = run_dbt_and_capture(execute)
        assert "it is recorded now" in output and "no data file has deleted rows" in output
        (event,) = [e for e in compaction_events(spark, schema, name) if e not in known]
        assert event.event_type == "JOIN" and event.merge_index is None
        assert set(event.parent_ids) == files - after and set(event.child_ids) == after - files
        assert event.rewritten_bytes > 0
        assert str(event.snapshot_id) == rewrite_snapshot(spark, schema, name)
        assert recorded_version(spark, schema, name) == current_snapshot(spark, schema, name)
        _, output = run_dbt_and_capture(execute)
        assert "it is recorded now" not in output
        assert len(compaction_events(spark, schema, name)) == len(known) + 1, "recorded once"

    def test_compaction_keeps_the_files_apart(self, project, spark):
        """Two files with deletes become two files, not one (Hudi compacts each file
        group into its own base file): a scan still has a task per file."""
        schema = project.test_schema
        name = "two_files"
        for first in (100_000, 200_000):
            # files of ~0.5 MB: far above the 5 KB that Iceberg adds to each read split
            spark.sql(
                f"insert into {schema}.{name} select /*+ REPARTITION(1) */"
                f" cast(id as int), md5(cast(id as string)) from range({first}, {first + 20_000})"
            )
        spark.sql(f"delete from {schema}.{name} where id in (100000, 200000)")
        files_before = data_files(spark, schema, name)
        assert len(files_before) == 2 and pending_deletes(spark, schema, name) == 2
        before = spark.sql(f"select * from {schema}.{name} order by id").collect()
        run_dbt([*COMPACTION, json.dumps({"model": name, "execute": True})])
        assert spark.sql(f"select * from {schema}.{name} order by id").collect() == before
        assert pending_deletes(spark, schema, name) == 0
        after = data_files(spark, schema, name)
        assert not after & files_before and len(after) == 2, (
            f"two new files, one per file compacted: {sorted(after)}"
        )

    def test_compaction_folds_the_small_files_of_its_partition(self, project, spark):
        """A small file (a batch's new rows) beside the files with deletes is folded into
        the new files, so the table ends with as many files as were compacted; the small
        files of a partition without pending deletes are never touched, and where the
        size rule alone would rewrite them, nothing is folded anywhere."""
        schema = project.test_schema
        name = "parted"

        def insert(first: int, rows: int, part: int) -> None:
            spark.sql(
                f"insert into {schema}.{name} select /*+ REPARTITION(1) */ cast(id as int),"
                f" md5(cast(id as string)), {part} from range({first}, {first + rows})"
            )

        def files(part: int) -> set[str]:
            return {
                r[0]
                for r in spark.sql(
                    f"select file_path from {schema}.{name}.data_files where partition.p = {part}"
                ).collect()
            }

        def compact() -> str:
            before = spark.sql(f"select * from {schema}.{name} order by id").collect()
            _, output = run_dbt_and_capture([*COMPACTION, json.dumps({"model": name})])
            run_dbt([*COMPACTION, json.dumps({"model": name, "execute": True})])
            assert spark.sql(f"select * from {schema}.{name} order by id").collect() == before
            assert pending_deletes(spark, schema, name) == 0
            return output

        # partition 0: two files of ~0.5 MB with a delete each, and a small one;
        # partition 1: two small files, together far below the target size
        for first in (100_000, 200_000):
            insert(first, 20_000, 0)
        insert(300_000, 1_000, 0)
        insert(400_000, 1_000, 1)
        insert(500_000, 1_000, 1)
        spark.sql(f"delete from {schema}.{name} where id in (100000, 200000)")
        zero, one = files(0), files(1)
        assert len(zero) == 3 and len(one) == 2
        assert "(1 of them small files of the same partitions, folded in)" in compact()
        compacted = files(0)
        assert len(compacted) == 2 and not compacted & zero, (
            f"three files became two, the small one folded in: {sorted(compacted)}"
        )
        assert files(1) == one, "no pending delete in partition 1: untouched"

        # partition 1 gains small files that together pass the target size: the size
        # rule would rewrite them, so nothing is folded, not even partition 0's small file
        for first in (600_000, 610_000, 620_000, 630_000):
            insert(first, 8_000, 1)
        insert(700_000, 1_000, 0)
        small = files(0) - compacted
        spark.sql(f"delete from {schema}.{name} where id = 100001")
        (pending,) = [
            r[0]
            for r in spark.sql(
                f"select distinct file_path from {schema}.{name}.position_deletes"
            ).collect()
        ]
        one = files(1)
        assert "(0 of them small files" in compact()
        after = files(0)
        assert pending not in after and small <= after and len(after) == 3, sorted(after)
        assert files(1) == one, "partition 1 untouched"


# -- conventions users bring from Hudi (issue #35) ---------------------------------------

# (id, ts, name, _hoodie_is_deleted, is_deleted) by env_var('DBT_MERGE_TEST_HUDI_BATCH')
HUDI_BATCH = """
{{ config(materialized='view') }}
{% set rows = {
    1: ["(1, 1, 'a', false, false)", "(2, 1, 'b', false, false)", "(3, 1, 'c', true, false)"],
    2: ["(1, 2, 'a2', true, false)", "(2, 2, 'b2', false, true)"],
} %}
select
    cast(id as int) as id, cast(ts as int) as ts, cast(name as string) as name,
    cast(hoodie as boolean) as _hoodie_is_deleted, cast(deleted as boolean) as is_deleted
from values {{ rows[env_var('DBT_MERGE_TEST_HUDI_BATCH', '1') | int] | join(', ') }}
    as t(id, ts, name, hoodie, deleted)
"""
HUDI_UPSERT = """
{{{{ config(materialized='incremental', incremental_strategy='upsert', file_format='iceberg',
            unique_key='id', precombine_key='ts'{config}) }}}}
select {columns} from {{{{ ref('hudi_batch') }}}}
"""


def rows_of(spark, schema, name, columns="id, ts, name"):
    return [
        tuple(r) for r in spark.sql(f"select {columns} from {schema}.{name} order by id").collect()
    ]


class TestHudiDeleteMarker(InstallsDbtMerge):
    """A batch column _hoodie_is_deleted is the delete column when none is configured, as
    Hudi's payloads honour it without configuration; a configured one wins."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "hudi_batch.sql": HUDI_BATCH,
            "hudi_marked.sql": HUDI_UPSERT.format(
                config="", columns="id, ts, name, _hoodie_is_deleted"
            ),
            "configured.sql": HUDI_UPSERT.format(
                config=", delete_column='is_deleted'", columns="*"
            ),
            # the marker comes later, to a table built without a delete column
            "marked_later.sql": HUDI_UPSERT.format(
                config="",
                columns="id, ts, name"
                "{% if fromjson(env_var('DBT_MERGE_TEST_WITH_MARKER', 'false')) %}"
                ", _hoodie_is_deleted{% endif %}",
            ),
            "marked_as_text.sql": HUDI_UPSERT.format(
                config="",
                columns="id, ts, name, cast(_hoodie_is_deleted as string) as _hoodie_is_deleted",
            ),
        }

    def run_batch(self, number, *models, expect_pass=True):
        select = ["--select", "hudi_batch", *models] if models else []
        return run_with_env(
            ["run", *select], {"hudi_batch": number}, capture=True, expect_pass=expect_pass
        )

    def test_hudi_marker_deletes_without_configuration(self, project, spark):
        schema = project.test_schema
        run_dbt(["deps"])
        _, output = self.run_batch(1, "hudi_marked", "configured")
        text = " ".join(output.split())
        assert (
            "dbt_merge upsert in model hudi_marked: delete_column is not set and the batch has "
            "Hudi's _hoodie_is_deleted column: it is the delete column (a row where it is true "
            "deletes its key). Set delete_column to use another column"
        ) in text, "the run's log says so"
        assert "in model configured: delete_column is not set" not in text
        assert rows_of(spark, schema, "hudi_marked") == [(1, 1, "a"), (2, 1, "b")], (
            "the first run leaves out key 3, marked deleted"
        )
        stored = json.loads(properties(spark, schema, "hudi_marked")["dbt_merge.upsert"])
        assert stored["delete_column"] == "_hoodie_is_deleted", "locked like a configured one"
        columns = "id, ts, name, _hoodie_is_deleted"
        assert rows_of(spark, schema, "configured", columns) == [
            (1, 1, "a", False),
            (2, 1, "b", False),
            (3, 1, "c", True),
        ], "a configured delete_column wins: _hoodie_is_deleted is an ordinary column"

        self.run_batch(2, "hudi_marked", "configured")
        assert rows_of(spark, schema, "hudi_marked") == [(2, 2, "b2")], (
            "key 1 deleted by the marker; key 2's is_deleted is not a column of this model"
        )
        assert rows_of(spark, schema, "configured", columns) == [
            (1, 2, "a2", True),
            (3, 1, "c", True),
        ], "is_deleted deleted key 2; the marker on key 1 deleted nothing"

    def test_a_marker_new_to_a_stored_table_fails_the_settings_lock(self, project, spark):
        schema = project.test_schema
        self.run_batch(1, "marked_later")
        before = rows_of(spark, schema, "marked_later")
        _, output = run_with_env(
            ["run", "--select", "marked_later"],
            {"hudi_batch": 2, "with_marker": True},
            capture=True,
            expect_pass=False,
        )
        text = " ".join(output.split())
        assert "dbt_merge upsert in model marked_later, config 'delete_column'" in text
        assert "delete_column: None -> _hoodie_is_deleted" in text and "--full-refresh" in text
        assert rows_of(spark, schema, "marked_later") == before, "nothing written"

    def test_a_marker_that_is_not_boolean_fails_before_writing(self, project, spark):
        schema = project.test_schema
        _, output = self.run_batch(1, "marked_as_text", expect_pass=False)
        text = " ".join(output.split())
        assert (
            "dbt_merge upsert in model marked_as_text, config 'delete_column': column "
            "_hoodie_is_deleted (Hudi's delete marker, the delete column because delete_column "
            "is not set) has type string, expected boolean"
        ) in text, text[-1500:]
        listed = [r.tableName for r in spark.sql(f"show tables in {schema}").collect()]
        assert "marked_as_text" not in listed, "nothing was written"


# (id, ts, name, arrived, is_deleted) by env_var('DBT_MERGE_TEST_DELETE_BATCH'); null ts on
# a delete: a delete without an ordering value, as a delete from Hudi's DELETE statement
DELETE_BATCH = """
{{ config(materialized='view') }}
{% set rows = {
    1: ["(1, 5, 'a', 1, false)", "(2, 5, 'b', 1, false)", "(3, 5, 'c', 1, false)",
        "(4, 5, 'd', 1, false)"],
    2: [
        "(1, null, null, 1, true)",
        "(2, 9, 'b9', 1, false)", "(2, null, null, 2, true)",
        "(3, null, null, 1, true)", "(3, 7, 'c7', 2, false)", "(3, 6, 'c6', 3, false)",
        "(4, null, null, 1, true)", "(4, 3, 'd3', 2, false)",
        "(5, null, null, 1, true)",
        "(6, 1, 'f', 1, false)",
    ],
    3: ["(6, null, 'f2', 1, false)"],
} %}
select
    cast(id as int) as id, cast(ts as int) as ts, cast(name as string) as name,
    cast(arrived as int) as arrived, cast(is_deleted as boolean) as is_deleted
from values {{ rows[env_var('DBT_MERGE_TEST_DELETE_BATCH', '1') | int] | join(', ') }}
    as t(id, ts, name, arrived, is_deleted)
"""


def delete_model(**config) -> str:
    settings = {"precombine_key": "ts", "delete_column": "is_deleted", **config}
    return upsert_model(**settings).replace("ref('batch')", "ref('delete_batch')")


class TestUnorderedDeletes(TableType, InstallsDbtMerge):
    """A delete without an ordering value, under event-time ordering, deletes its key
    whatever the stored ordering value; in a batch with ordered rows of the same key it
    is ordered by arrival, the later wins (Hudi's commit-time-ordering delete)."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "delete_batch.sql": DELETE_BATCH,
            "by_arrival.sql": delete_model(arrival_column="arrived"),
            "partial_by_arrival.sql": delete_model(arrival_column="arrived", partial_update=True),
            "no_arrival.sql": delete_model(provenance=True),
        }

    def run_batch(self, number, expect_pass=True):
        return run_with_env(
            ["run"], {"delete_batch": number}, capture=True, expect_pass=expect_pass
        )

    def test_unordered_deletes(self, project, spark):
        schema = project.test_schema
        run_dbt(["deps"])
        self.run_batch(1)
        self.run_batch(2)
        by_arrival = [
            # 1: an unordered delete deletes a key stored with ts 5
            # 2: an upsert that arrived before the delete: the delete wins
            (3, 7, "c7"),  # the upserts after the delete: the greatest ts wins
            (4, 5, "d"),  # after the delete, ts 3: then older than the stored ts 5
            # 5: an unordered delete of a key never stored: nothing
            (6, 1, "f"),
        ]
        assert rows_of(spark, schema, "by_arrival") == by_arrival
        assert rows_of(spark, schema, "partial_by_arrival") == by_arrival
        assert rows_of(spark, schema, "no_arrival") == [(6, 1, "f")], (
            "without arrival_column nothing is known to come after a delete: it wins"
        )
        self.check_write_modes(spark, schema, "no_arrival")

        recorded = sorted(
            (r.event_type, r.record_key, r.new_row is None)
            for r in events(spark, schema, "no_arrival")
        )
        assert recorded == [
            *[("CREATE", str(k), False) for k in (1, 2, 3, 4, 6)],
            *[("DELETE", str(k), True) for k in (1, 2, 3, 4)],
        ], "each unordered delete is a DELETE event; key 5 was never stored: nothing"
        deleted = {
            r.record_key: json.loads(r.old_row)
            for r in events(spark, schema, "no_arrival")
            if r.event_type == "DELETE"
        }
        assert deleted["1"] == {"id": 1, "ts": 5, "name": "a", "arrived": 1, "is_deleted": False}

        before = {name: rows_of(spark, schema, name) for name in ("by_arrival", "no_arrival")}
        self.run_batch(2)
        after = {name: rows_of(spark, schema, name) for name in ("by_arrival", "no_arrival")}
        assert after == before, "re-running the batch is idempotent"

    def test_an_upsert_without_an_ordering_value_still_fails(self, project, spark):
        schema = project.test_schema
        before = rows_of(spark, schema, "by_arrival")
        known = len(events(spark, schema, "no_arrival"))
        _, output = self.run_batch(3, expect_pass=False)
        text = " ".join(output.split())
        for name in ("by_arrival", "no_arrival"):
            assert (
                f"dbt_merge upsert in model {name}, config 'precombine_key': 1 row(s) of the "
                "batch have a null ts and are not deletes without an ordering value; an upsert "
                "without an ordering value cannot be ordered (a delete, is_deleted true, may "
                "have no ordering value at all"
            ) in text, text[-2000:]
        assert rows_of(spark, schema, "by_arrival") == before, "nothing written"
        assert len(events(spark, schema, "no_arrival")) == known


class TestUnorderedDeletesMergeOnRead(TestUnorderedDeletes):
    table_type = "merge_on_read"
