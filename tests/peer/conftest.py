"""dbt's own adapter tests read the artifacts dbt writes (run_results.json, manifest.json):
here dbt writes them, as it does for users (tests/conftest.py turns them off elsewhere)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module", autouse=True)
def dbt_writes_json():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DBT_WRITE_JSON", "true")
        yield
