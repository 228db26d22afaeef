"""The upsert SQL rendered for file_format delta parses in sqlglot's Databricks dialect.

Delta tables cannot be written here (no Delta jar, no workspace), so this is the check
that the statements dbt-databricks would run are Databricks SQL: every merge mode and
flag, composite keys, incremental_predicates, merge_update_columns, a custom merger and
the provenance insert. The same macros run for real on Iceberg in test_upsert.py.
"""

from __future__ import annotations

import pytest
import sqlglot
from dbt.tests.util import run_dbt
from sqlglot import exp

from tests.functional.entity_merge_fixtures import InstallsDbtMerge

RENDER = """
{{{{ config(materialized='view', incremental_strategy='upsert', file_format='delta', {config}) }}}}
{{%- if execute -%}}
{{%- set columns = ['id', 'region', 'ts', 'name', 'price', 'is_deleted', 'ingested_at'] -%}}
{{%- set cfg = dbt_merge.upsert_config(columns) -%}}
{{%- set target = api.Relation.create(schema='sales', identifier='orders') -%}}
{{%- set batch = api.Relation.create(schema='sales', identifier='orders__dbt_tmp') -%}}
{{%- set events = dbt_merge.upsert_provenance(target) -%}}
{{{{ dbt_merge.get_upsert_merge_sql(
    target,
    dbt_merge.get_upsert_precombine_sql('select * from ' ~ batch, cfg, columns),
    cfg,
    columns,
    ["DBT_INTERNAL_DEST.ts > 0"]
) }}}};
{{{{ dbt_merge.get_upsert_provenance_sql(target, events, cfg, '41', '42', batch) }}}};
{{{{ dbt_merge.get_upsert_provenance_sql(target, events, cfg, none, '1') }}}}
{{%- endif %}}
"""
KEEP_LARGER = """
{% macro keep_larger(column, source, target) -%}
    greatest({{ source }}.{{ column }}, {{ target }}.{{ column }})
{%- endmacro %}
"""
CONFIGS = {
    "event_time": "unique_key='id', precombine_key='ts', delete_column='is_deleted'",
    "commit_time": "unique_key='id', merge_mode='commit_time_ordering', delete_column='is_deleted'",
    "arrival": "unique_key='id', precombine_key=['ts', 'name'], arrival_column='ingested_at'",
    "partial": "unique_key=['id', 'region'], precombine_key='ts', partial_update=true,"
    " delete_column='is_deleted'",
    "non_defaults": "unique_key='id', precombine_key='ts',"
    " payload='OverwriteNonDefaultsWithLatestAvroPayload', merge_exclude_columns=['price']",
    "custom": "unique_key='id', precombine_key='ts', merge_mode='custom',"
    " custom_merger='keep_larger', merge_update_columns=['name', 'price']",
}


class TestUpsertSqlForDelta(InstallsDbtMerge):
    @pytest.fixture(scope="class")
    def models(self):
        return {f"{name}.sql": RENDER.format(config=cfg) for name, cfg in CONFIGS.items()}

    @pytest.fixture(scope="class")
    def macros(self):
        return {"keep_larger.sql": KEEP_LARGER}

    @pytest.fixture(scope="class")
    def compiled(self, project):
        run_dbt(["deps"])
        results = run_dbt(["compile"])
        return {r.node.name: r.node.compiled_code for r in results}

    @pytest.mark.parametrize("name", sorted(CONFIGS))
    def test_parses_as_databricks_sql(self, compiled, name):
        statements = [s for s in compiled[name].split(";") if s.strip()]
        parsed = [
            sqlglot.parse_one(s, read="databricks", error_level=sqlglot.ErrorLevel.RAISE)
            for s in statements
        ]
        merge, provenance, first_provenance = parsed
        assert isinstance(merge, exp.Merge)
        assert merge.this.sql() == "sales.orders AS DBT_INTERNAL_DEST"
        whens = [w.sql(dialect="databricks") for w in merge.find_all(exp.When)]
        assert whens[-1].startswith("WHEN NOT MATCHED") and whens[-1].endswith("INSERT *")
        on = merge.args["on"].sql(dialect="databricks")
        assert "DBT_INTERNAL_DEST.ts > 0" in on, "incremental_predicates are kept"
        source = merge.args["using"]
        assert source.find(exp.Window) or source.find(exp.Group), "precombined in one pass"
        assert not list(source.find_all(exp.Join)), "no self-join in the precombine"
        for insert in (provenance, first_provenance):
            assert isinstance(insert, exp.Insert)
            assert insert.this.sql() == "sales.orders__provenance"
        assert "VERSION AS OF 41" in provenance.sql(dialect="databricks").upper()

    def test_each_setting_shapes_the_merge(self, compiled):
        text = {name: " ".join(sql.split()) for name, sql in compiled.items()}
        assert "then delete" in text["event_time"] and ">=" in text["event_time"]
        assert (
            "when matched and not coalesce(DBT_INTERNAL_SOURCE.`is_deleted`, false)"
            in (text["commit_time"])
        )
        assert "'arrival', batch.`ingested_at`" in text["arrival"]
        assert "group by `id`, `region`" in text["partial"], "a composite key"
        assert "`price` =" not in text["non_defaults"].split("merge into")[1].split(";")[0]
        assert "greatest(DBT_INTERNAL_SOURCE.name, DBT_INTERNAL_DEST.name)" in text["custom"]
        assert "`ts` =" not in text["custom"].split(";")[0], "merge_update_columns"


class TestDeltaTblpropertiesAgreeWithTheTableType(InstallsDbtMerge):
    """Deletion vectors switched off by the model's own tblproperties contradict
    merge_on_read: an error at compile time, naming the model, the setting and value."""

    @pytest.fixture(scope="class")
    def models(self):
        config = (
            "unique_key='id', precombine_key='ts', table_type='merge_on_read',"
            " tblproperties={'delta.enableDeletionVectors': 'false'}"
        )
        return {"orders.sql": RENDER.format(config=config)}

    def test_contradiction_fails_at_compile_time(self, project):
        run_dbt(["deps"])
        with pytest.raises(Exception) as failure:
            run_dbt(["compile"])
        text = " ".join(str(failure.value).split())
        assert "dbt_merge upsert in model orders" in text, text[-1500:]
        assert (
            "config 'tblproperties': sets 'delta.enableDeletionVectors' = 'false', but "
            "table_type merge_on_read writes 'true' there"
        ) in text, text[-1500:]
