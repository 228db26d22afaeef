"""dbt's own adapter tests read the artifacts dbt writes (run_results.json, manifest.json):
here dbt writes them, as it does for users (tests/conftest.py turns them off elsewhere)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module", autouse=True)
def dbt_writes_json():
    before = os.environ.get("DBT_WRITE_JSON")
    os.environ["DBT_WRITE_JSON"] = "true"
    yield
    if before is None:
        os.environ.pop("DBT_WRITE_JSON", None)
    else:
        os.environ["DBT_WRITE_JSON"] = before
