"""dbt's own adapter tests read the artifacts dbt writes (run_results.json, manifest.json):
here dbt writes them, as it does for users (tests/conftest.py turns them off elsewhere).

In a run on Delta tables (tests/peer/test_peer_delta.py), each test's tables are
checked to be Delta tables before its schema is dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import TABLE_FORMAT


@pytest.fixture(scope="module", autouse=True)
def dbt_writes_json():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DBT_WRITE_JSON", "true")
        yield


@pytest.fixture(autouse=True)
def tables_of_the_run_format(request):
    """In a run whose table format is not the default: after each test of a dbt
    project, every table its models built (views and seeds aside: some classes leave
    their seeds' format to the platform) has the run's format, and there is one at
    least."""
    if TABLE_FORMAT == "iceberg" or "project" not in request.fixturenames:
        yield
        return
    project, spark = request.getfixturevalue("project"), request.getfixturevalue("spark")
    if "clean_up" in request.fixturenames:
        # a class's own fixture that drops the schema after each test: set up first,
        # so that it is torn down after this check
        request.getfixturevalue("clean_up")
    yield
    seeds = {path.stem.lower() for path in Path(project.project_root, "seeds").glob("*.csv")}
    providers = {}
    for table in spark.sql(f"show tables in {project.test_schema}").collect():
        if table.isTemporary or table.tableName.lower() in seeds:
            continue
        described = spark.sql(f"describe table extended {project.test_schema}.{table.tableName}")
        info = {row.col_name: row.data_type for row in described.collect()}
        if info.get("Type") != "VIEW":
            providers[table.tableName] = (info.get("Provider") or "").lower()
    assert providers and set(providers.values()) == {TABLE_FORMAT}, providers
