"""Shared pieces of the functional tests that use dbt_merge as an installed package."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT

PACKAGES = {"packages": [{"local": str(ROOT)}]}
# a share no run reaches: the state is never rebuilt (the edges' rebuild_share; the
# components' through REBUILD_SHARE_ENV)
NEVER = 1000000


class InstallsDbtMerge:
    """A dbt-tests-adapter project class whose project installs dbt_merge (`local:`)."""

    @pytest.fixture(scope="class")
    def packages(self):
        return PACKAGES


def merge_models(name: str, materialized: str = "table") -> dict[str, str]:
    """The edges, components and merged models of the merge `name`."""
    if materialized == "incremental":
        config = (
            "{{ config(materialized='incremental', incremental_strategy='merge',"
            " unique_key='_id') }}"
        )
    else:
        config = "{{ config(materialized='table') }}"
    return {
        f"{name}_edges.sql": f"{{{{ dbt_merge.equality_edges('{name}') }}}}",
        f"{name}_components.py": (
            "from dbt_merge.entity_merge import entity_components\n\n\n"
            "def model(dbt, session):\n"
            "    dbt.config(materialized='table')\n"
            f"    return entity_components(dbt.ref('{name}_edges'))\n"
        ),
        f"{name}.sql": (
            f"{config}\n{{{{ dbt_merge.merge_entities('{name}', ref('{name}_components')) }}}}"
        ),
    }


def merge_vars(**merges: dict) -> dict:
    """`vars:` holding the given entity merges."""
    return {"vars": {"dbt_merge": {"entity_merges": merges}}}


def expire_all_but_current(spark, table: str) -> None:
    """Expire every snapshot of the Iceberg table but its current one."""
    spark.sql(
        f"call spark_catalog.system.expire_snapshots(table => '{table}',"
        " older_than => timestamp '2999-01-01 00:00:00', retain_last => 1)"
    )
    kept = spark.sql(f"select count(*) from {table}.snapshots").first()[0]
    assert kept == 1, f"{table} keeps {kept} snapshots"


class Recorder:
    """dbt event callback: the SQL dbt runs and the text of every message."""

    def __init__(self):
        self.queries: list[str] = []
        self.messages: list[str] = []

    def __call__(self, event):
        if event.info.name == "SQLQuery":
            self.queries.append(event.data.sql)
        self.messages.append(event.info.msg)
