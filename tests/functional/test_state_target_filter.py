"""The key list of a state MERGE's condition (``_entity_state_target_filter``): Spark
writes it in one row, and each literal reads back as its key, whatever the key holds."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.conftest import ROOT
from tests.unit.test_entity_merge_macros import macros

MACROS = (
    ROOT / "macros" / "entity_merge" / "state" / "get_incremental_entity_state_sql.sql",
    ROOT / "macros" / "core" / "_sql_string.sql",
)
# node names as the edges write them (<offset>|<id>), with what a literal must escape
KEYS = ["0|plain", "1|o'brien", "2|back\\slash", "3|both\\'", "4|ünïcode", "5|a,b", "6|'", "7|\\"]


@pytest.fixture
def state_macros(spark):
    queries: list[str] = []

    def run_query(sql: str) -> SimpleNamespace:
        queries.append(sql)
        return SimpleNamespace(rows=[tuple(row) for row in spark.sql(sql).collect()])

    limits: dict[str, int] = {}
    namespace = macros(
        *MACROS,
        run_query=run_query,
        adapter=SimpleNamespace(quote=lambda name: f"`{name}`"),
        config=SimpleNamespace(get=lambda name, default=None: limits.get(name, default)),
        var=lambda name, default=None: default,
    )
    return namespace, queries, limits


def batch(spark, name: str, keys: list) -> str:
    spark.createDataFrame([(key,) for key in keys], "node string").createOrReplaceTempView(name)
    return name


def test_the_listed_keys_read_back_as_the_batch_keys(spark, state_macros):
    dbt_merge, queries, _ = state_macros
    condition = dbt_merge._entity_state_target_filter(batch(spark, "keys", KEYS), ["node"], None)
    assert len(queries) == 1, "one query, one row"
    prefix = "\n    and target.`node` in ("
    assert condition.startswith(prefix) and condition.endswith(")"), condition
    listed = condition[len(prefix) : -1]
    # the literals _sql_string writes (no key here holds ", ")
    assert sorted(listed.split(", ")) == sorted(dbt_merge._sql_string(key) for key in KEYS)
    read = spark.sql(f"select explode(array({listed}))").collect()
    assert sorted(row[0] for row in read) == sorted(KEYS)


def test_no_condition_for_too_many_keys_a_null_key_or_none(spark, state_macros):
    dbt_merge, _, limits = state_macros
    limits["state_filter_limit"] = len(KEYS) - 1
    assert dbt_merge._entity_state_target_filter(batch(spark, "many", KEYS), ["node"], None) == ""
    limits["state_filter_limit"] = len(KEYS)
    assert dbt_merge._entity_state_target_filter("many", ["node"], None) != ""
    with_null = batch(spark, "with_null", [*KEYS[:2], None])
    assert dbt_merge._entity_state_target_filter(with_null, ["node"], None) == ""
    assert dbt_merge._entity_state_target_filter(batch(spark, "none", []), ["node"], None) == ""
    # not the state tables' own key: nothing is asked
    assert dbt_merge._entity_state_target_filter("many", ["id"], None) == ""
    assert dbt_merge._entity_state_target_filter("many", ["node"], "node") == ""
