"""dbt_merge installed into another dbt project with `packages: - local: ...`."""

from __future__ import annotations

import textwrap

from dbt.cli.main import dbtRunner

from tests.conftest import LOG_DIR, ROOT, WAREHOUSE


def test_another_project_installs_the_package_without_its_demo(spark, tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "dbt_project.yml").write_text(
        textwrap.dedent(
            """
            name: shop
            version: "1.0"
            config-version: 2
            profile: shop
            models:
              shop:
                +file_format: iceberg
            flags:
              send_anonymous_usage_stats: false
            """
        )
    )
    (tmp_path / "packages.yml").write_text(f"packages:\n  - local: {ROOT}\n")
    (tmp_path / "profiles.yml").write_text(
        textwrap.dedent(
            f"""
            shop:
              target: dev
              outputs:
                dev:
                  type: spark_session
                  method: session
                  schema: shop
                  warehouse: {WAREHOUSE}
                  log_dir: {LOG_DIR}
            """
        )
    )
    (tmp_path / "models" / "orders.sql").write_text("select 1 as order_id")
    common = ["--project-dir", str(tmp_path), "--profiles-dir", str(tmp_path)]

    deps = dbtRunner().invoke(["deps", *common])
    assert deps.success, deps.exception
    assert (tmp_path / "dbt_packages" / "dbt_merge" / "dbt_project.yml").exists()

    build = dbtRunner().invoke(["build", *common])
    assert build.success, build.exception
    built = sorted(r.node.unique_id for r in build.result)
    assert built == ["model.shop.orders"], "the package's demo stays off in other projects"
    assert [tuple(r) for r in spark.sql("select order_id from shop.orders").collect()] == [(1,)]
