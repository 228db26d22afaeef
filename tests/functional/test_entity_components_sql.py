"""The entity merge's closure in SQL alone: `materialized='entity_components'` (SPEC §0
'dbt-spark over Thrift', §1 'Declaring a merge'), for targets without Python models.

Over the same edges its table equals the Python model's full build (columns, types and
rows), and so do the merged models built from each: Sesam's example with its deleted
records, list-valued, null and empty keys, overlapping equality sets, numbers as ids, an
edges model of a user's own (no batches, null ends, a value node), and a chain of
10,000 nodes in one path. The round bound fails with a named error, and a run that
dies in a round leaves the model's table as it was; the next run builds it.
"""

from __future__ import annotations

import os
import re

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.conftest import dbt_env
from tests.functional import test_entity_merge as entity_merge
from tests.functional.entity_merge_fixtures import InstallsDbtMerge, merge_models
from tests.functional.test_entity_merge import (
    SESAM_A,
    SESAM_B,
    SESAM_C,
    SESAM_MERGE,
    STRATEGY_MODELS,
    rows,
    sesam_config,
)

# the merges whose components are built both ways
MERGES = {
    "sesam": SESAM_MERGE,  # with deleted records
    # list-valued, null and empty keys; overlapping equality sets; numbers as ids (not
    # imported by name: pytest would collect the test class here too)
    **{
        name: entity_merge.TestMergeSemantics.merges[name]
        for name in ("arrays", "collapse", "own_ids")
    },
}
CHAIN_NODES = 10_000
# a model's config from the environment (dbt_env): a changed variable re-parses the
# files that read it only
CONFIG = "**fromjson(env_var('DBT_MERGE_TEST_CLOSURE_CONFIG', '{}'))"
SQL_COMPONENTS = (
    "{{{{ config(materialized='entity_components', {config}) }}}}\n"
    "{{% if env_var('DBT_MERGE_TEST_CLOSURE_NO_SRC', '') %}}\n"
    "select dst, _batch from {{{{ ref('{edges}') }}}}\n"
    "{{% else %}}\n"
    "select * from {{{{ ref('{edges}') }}}}\n"
    "{{% endif %}}\n"
)
PYTHON_COMPONENTS = (
    "from dbt_merge.entity_merge import entity_components\n\n\n"
    "def model(dbt, session):\n"
    "    dbt.config(materialized='table')\n"
    "    return entity_components(dbt.ref('{edges}'))\n"
)
EDGES = {
    # one path of CHAIN_NODES nodes
    "chain_edges.sql": (
        "select concat('0|n', cast(id as string)) as src,"
        " concat('0|n', cast(id + 1 as string)) as dst, cast(1 as bigint) as _batch"
        f" from range({CHAIN_NODES - 1})"
    ),
    # a user's own edges: no batches, an end that is null, a value node
    "own_edges.sql": """
        select * from values
            ('0|a', '0|b'), ('0|b', '=v'), ('1|c', '=v'), ('1|d', null), (null, '1|e'),
            ('1|f', '1|f'), ('1|g', '1|h')
            as t(src, dst)
    """,
}
# the pairs of tables that must be equal: SQL-built, Python-built
PAIRS = [
    *[(f"{name}_components_sql", f"{name}_components") for name in MERGES],
    *[(f"{name}_sql", name) for name in MERGES],
    ("chain_components_sql", "chain_components"),
    ("own_components_sql", "own_components"),
    ("sesam_names_components_sql", "sesam_components"),
]
SCHEMA = """
version: 2
models:
  - name: sesam_sql
    data_tests:
      - dbt_merge.identity_is_deterministic:
          arguments:
            merge: sesam
            components: "{{ ref('sesam_components_sql') }}"
      - dbt_merge.deleted_entities_not_merged:
          arguments:
            merge: sesam
            components: "{{ ref('sesam_components_sql') }}"
"""


def scratch_tables(spark, schema: str) -> list[str]:
    return [
        row.tableName
        for row in spark.sql(f"show tables in {schema}").collect()
        if "__dbt_merge_closure_" in row.tableName
    ]


class TestSqlClosure(InstallsDbtMerge):
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"sesam_a.csv": SESAM_A, "sesam_b.csv": SESAM_B, "sesam_c.csv": SESAM_C}

    @pytest.fixture(scope="class")
    def models(self):
        models = {
            name: sql for name, sql in STRATEGY_MODELS.items() if not name.startswith("strat")
        }
        models.update(EDGES)
        models["schema.yml"] = SCHEMA
        for name in MERGES:
            models.update(merge_models(name))
            models[f"{name}_components_sql.sql"] = SQL_COMPONENTS.format(
                config=CONFIG if name == "sesam" else "", edges=f"{name}_edges"
            )
            models[f"{name}_sql.sql"] = (
                "{{ config(materialized='table') }}\n"
                f"{{{{ dbt_merge.merge_entities('{name}', ref('{name}_components_sql')) }}}}"
            )
        models["sesam_names_components_sql.sql"] = SQL_COMPONENTS.format(
            config="node_ids='names'", edges="sesam_edges"
        )
        for name in ("chain", "own"):
            models[f"{name}_components.py"] = PYTHON_COMPONENTS.format(edges=f"{name}_edges")
            models[f"{name}_components_sql.sql"] = SQL_COMPONENTS.format(
                config=CONFIG if name == "chain" else "", edges=f"{name}_edges"
            )
        return models

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return sesam_config(**MERGES)

    @pytest.fixture(scope="class")
    def built(self, project):
        run_dbt(["deps"])
        run_dbt(["seed"])
        _, output = run_dbt_and_capture(["run"])
        return project.test_schema, output

    @staticmethod
    def assert_equal_tables(spark, schema: str, built: str, reference: str) -> None:
        """Same columns, same types, same rows (as multisets)."""
        types = [
            [(c.name, c.dataType.simpleString()) for c in spark.table(f"{schema}.{t}").schema]
            for t in (built, reference)
        ]
        assert types[0] == types[1], (built, types)
        left, right = f"select * from {schema}.{built}", f"select * from {schema}.{reference}"
        differ = spark.sql(
            f"select (select count(*) from (({left}) except all ({right}))),"
            f" (select count(*) from (({right}) except all ({left}))),"
            f" (select count(*) from {schema}.{reference})"
        ).first()
        assert differ[:2] == (0, 0), (built, reference, differ)
        assert differ[2] > 0, f"{reference} is empty: nothing was compared"

    def test_tables_equal_the_python_models(self, built, spark):
        schema, output = built
        for sql_built, python_built in PAIRS:
            self.assert_equal_tables(spark, schema, sql_built, python_built)
        chain = rows(
            spark,
            f"select count(*), count(distinct component), min(component)"
            f" from {schema}.chain_components_sql",
        )
        assert chain == [(CHAIN_NODES, 1, "0|n0")]
        # the chain took several rounds, logarithmic in its length; every model dropped
        # its scratch tables
        chain_rounds = [
            int(n)
            for n in re.findall(r"chain_components_sql: closure round (\d+), \d+ edges", output)
        ]
        print(f"the chain of {CHAIN_NODES} nodes: {max(chain_rounds)} rounds")
        assert 3 <= max(chain_rounds) <= 30, chain_rounds
        assert scratch_tables(spark, schema) == []

    def test_the_merge_tests_pass_on_sql_components(self, built):
        results = run_dbt(["test", "-s", "sesam_sql"])
        assert sorted(str(r.status) for r in results) == ["pass", "pass"]

    def test_the_round_bound_fails_by_name_and_writes_nothing(self, built, spark):
        schema, _ = built
        before = rows(spark, f"select * from {schema}.chain_components_sql order by node")
        with dbt_env({"closure_config": {"max_rounds": 2}}):
            _, output = run_dbt_and_capture(
                ["run", "-s", "chain_components_sql"], expect_pass=False
            )
        text = " ".join(output.split())
        assert (
            "dbt_merge: entity_components model chain_components_sql, config 'max_rounds': the"
            " closure did not converge in 2 rounds (max_rounds 2);"
        ) in text, text[-2000:]
        largest = re.search(r"the largest component so far has (\d+) nodes", text)
        assert largest and 2 < int(largest.group(1)) < CHAIN_NODES, text[-2000:]
        assert rows(spark, f"select * from {schema}.chain_components_sql order by node") == before
        assert scratch_tables(spark, schema) == []

    def test_a_run_that_dies_in_a_round_leaves_the_table(self, built, spark):
        schema, _ = built
        before = rows(spark, f"select * from {schema}.sesam_components_sql order by node")
        os.environ["DBT_MERGE_FAIL_AT"] = "entity_components.round"
        try:
            _, output = run_dbt_and_capture(
                ["run", "-s", "sesam_components_sql"], expect_pass=False
            )
        finally:
            del os.environ["DBT_MERGE_FAIL_AT"]
        assert "injected failure at entity_components.round" in output
        assert rows(spark, f"select * from {schema}.sesam_components_sql order by node") == before
        assert scratch_tables(spark, schema), "the dead run's scratch tables are left"
        # the next run drops them first, and builds what a run that never died builds
        run_dbt(["run", "-s", "sesam_components_sql"])
        assert scratch_tables(spark, schema) == []
        self.assert_equal_tables(spark, schema, "sesam_components_sql", "sesam_components")

    @pytest.mark.parametrize(
        "env, expected",
        [
            (
                {"closure_config": {"incremental_strategy": "entity_state"}},
                ", config 'incremental_strategy': 'entity_state' follows the change in a Python"
                " model",
            ),
            (
                {"closure_config": {"max_rounds": 0}},
                ", config 'max_rounds': is set to 0 but must be an integer >= 1",
            ),
            (
                {"closure_config": {"node_ids": "sorted"}},
                ", config 'node_ids': Invalid value provided: sorted."
                " Expected one of: hashed, names",
            ),
            (
                {"closure_no_src": "1"},
                ": the model selects the edges of a merge (columns src and dst, as"
                " dbt_merge.equality_edges writes them) but has no column src; its columns:"
                " dst, _batch",
            ),
        ],
        ids=["entity_state", "max_rounds", "node_ids", "no_src"],
    )
    def test_bad_settings_fail_before_anything_is_written(self, built, spark, env, expected):
        schema, _ = built
        before = rows(spark, f"select * from {schema}.sesam_components_sql order by node")
        with dbt_env(env):
            _, output = run_dbt_and_capture(
                ["run", "-s", "sesam_components_sql"], expect_pass=False
            )
        text = " ".join(output.split())
        assert f"dbt_merge: entity_components model sesam_components_sql{expected}" in text, text[
            -2000:
        ]
        assert rows(spark, f"select * from {schema}.sesam_components_sql order by node") == before
