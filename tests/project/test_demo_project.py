"""The repository's own dbt project: `dbt build` twice (full, then incremental) and docs."""

from __future__ import annotations

import json

import pytest
from dbt.cli.main import dbtRunner

from tests.conftest import ROOT, RUN_DIR

TARGET = RUN_DIR / "demo_target"
SCHEMA = "dbt_merge"


def dbt(*args: str):
    """Run dbt in this process on the repository's project; fail with its messages."""
    result = dbtRunner().invoke(
        [
            *args,
            "--project-dir",
            str(ROOT),
            "--profiles-dir",
            str(ROOT),
            "--target-path",
            str(TARGET),
            "--log-path",
            str(RUN_DIR / "demo_logs"),
        ]
    )
    failures = (
        [
            f"{r.node.name}: {r.status}: {r.message}"
            for r in (result.result or [])
            if getattr(r, "status", None) not in ("success", "pass")
        ]
        if args[0] in ("build", "run")
        else []
    )
    assert result.success, f"dbt {' '.join(args)} failed: {result.exception} {failures}"
    return result


def rows(spark, sql: str) -> list[tuple]:
    return [tuple(r) for r in spark.sql(sql).collect()]


@pytest.fixture(scope="module")
def first_build(spark):
    result = dbt("build", "--full-refresh")
    return {r.node.name: r.status for r in result.result}


def test_first_build_runs_every_node(first_build):
    assert first_build["demo_events"] == "success"
    assert first_build["stg_demo_events"] == "success"
    assert first_build["demo_event_log"] == "success"
    assert first_build["demo_customer_activity"] == "success"
    tests = [name for name in first_build if name.startswith(("unique_", "not_null_", "accepted"))]
    assert len(tests) == 11 and all(first_build[t] == "pass" for t in tests)


def test_python_model_output(spark, first_build):
    got = rows(
        spark,
        f"select customer_id, customer_name, count_events, count_orders, cast(net_amount as string)"
        f" from {SCHEMA}.demo_customer_activity where customer_id in ('c02', 'c06') order by 1",
    )
    assert got == [
        ("c02", "Seán O'Brien", 4, 2, "23.75"),
        ("c06", 'Zoë "Zed" Okafor', 3, 1, "0.00"),
    ]


def test_second_build_takes_the_incremental_path(spark, first_build):
    # Mark a customer with no new events; a full rebuild would restore 2, the
    # incremental branch (only customers with newer events) leaves it alone.
    spark.sql(
        f"update {SCHEMA}.demo_customer_activity set count_events = 999 where customer_id = 'c07'"
    )
    spark.sql(f"update {SCHEMA}.demo_event_log set amount = -1 where event_id = 'e001'")
    result = dbt("build")
    assert {r.node.name: r.status for r in result.result}["demo_customer_activity"] == "success"
    assert rows(
        spark, f"select count_events from {SCHEMA}.demo_customer_activity where customer_id = 'c07'"
    ) == [(999,)], "the Python model's dbt.is_incremental branch ran"
    assert rows(spark, f"select amount from {SCHEMA}.demo_event_log where event_id = 'e001'") == [
        (-1,)
    ], "the SQL model merged nothing new into old rows"
    assert rows(spark, f"select count(*) from {SCHEMA}.demo_customer_activity") == [(7,)]
    assert rows(spark, f"select count(*) from {SCHEMA}.demo_event_log") == [(20,)]


def test_docs_generate_describes_every_node(first_build):
    dbt("docs", "generate")
    catalog = json.loads((TARGET / "catalog.json").read_text())
    manifest = json.loads((TARGET / "manifest.json").read_text())
    for name in ("demo_customer_activity", "demo_event_log", "stg_demo_events"):
        node = catalog["nodes"][f"model.dbt_merge.{name}"]
        assert node["columns"], f"{name} has columns in the catalog"
        assert manifest["nodes"][f"model.dbt_merge.{name}"]["description"]
    assert "seed.dbt_merge.demo_events" in catalog["nodes"]
    assert catalog["nodes"]["model.dbt_merge.stg_demo_events"]["metadata"]["type"] == "view"


def test_every_node_and_column_is_described(first_build):
    manifest = json.loads((TARGET / "manifest.json").read_text())
    undocumented = []
    for uid, node in manifest["nodes"].items():
        if node["resource_type"] not in ("model", "seed") or node["package_name"] != "dbt_merge":
            continue
        if not node["description"].strip():
            undocumented.append(uid)
        undocumented += [
            f"{uid}.{c}" for c, col in node["columns"].items() if not col["description"].strip()
        ]
    assert undocumented == []
