"""dbt_merge installed into another dbt project with `packages: - local: ...`."""

from __future__ import annotations

import json
import os

import pytest
from dbt.cli.main import dbtRunner

from tests.conftest import LOG_DIR, ROOT, WAREHOUSE
from tests.project.installing import write_installing_project


def write_project(tmp_path, model: str = "orders", profile: str = "shop") -> list[str]:
    """An installing project `shop` with one model; the dbt arguments to run it."""
    write_installing_project(tmp_path, "shop", WAREHOUSE, profile, log_dir=str(LOG_DIR))
    (tmp_path / "models" / f"{model}.sql").write_text("select 1 as order_id")
    return ["--project-dir", str(tmp_path), "--profiles-dir", str(tmp_path)]


# a profile named like the package's own one (`dbt_merge`) changes nothing: the demo's
# switch is the environment variable DBT_MERGE_DEMO, which the test run leaves unset
@pytest.mark.parametrize("profile", ["shop", "dbt_merge"])
def test_another_project_installs_the_package_without_its_demo(spark, tmp_path, profile):
    assert "DBT_MERGE_DEMO" not in os.environ
    common = write_project(tmp_path, profile=profile)
    deps = dbtRunner().invoke(["deps", *common])
    assert deps.success, deps.exception
    assert (tmp_path / "dbt_packages" / "dbt_merge" / "dbt_project.yml").exists()

    build = dbtRunner().invoke(["build", *common])
    assert build.success, build.exception
    built = sorted(r.node.unique_id for r in build.result)
    assert built == ["model.shop.orders"], "the package's demo stays off in other projects"
    assert [tuple(r) for r in spark.sql("select order_id from shop.orders").collect()] == [(1,)]


def test_the_installing_project_turns_the_demo_on_with_the_environment(tmp_path, monkeypatch):
    """A package's dbt_project.yml is rendered without any vars, so the switch is the
    environment variable DBT_MERGE_DEMO: its folders of models, seeds and data tests
    exist only where it is 1."""
    common = write_project(tmp_path, model="shop_orders")  # the demo has `orders`
    assert dbtRunner().invoke(["deps", *common]).success
    monkeypatch.setenv("DBT_MERGE_DEMO", "1")
    listed = dbtRunner().invoke(["ls", "--output", "json", *common])
    assert listed.success, listed.exception
    nodes = [json.loads(line) for line in listed.result]
    demo = {(n["resource_type"], n["name"]) for n in nodes if n["package_name"] == "dbt_merge"}
    demo_models = sorted(
        path.stem
        for folder in ("models", "python_models")
        for path in (ROOT / folder).rglob("*")
        if path.suffix in (".sql", ".py")
    )
    assert sorted(name for kind, name in demo if kind == "model") == demo_models
    assert ("seed", "sesam_a") in demo and ("model", "customers") in demo
    assert any(kind == "test" for kind, _ in demo), "the demo's data tests come along"
