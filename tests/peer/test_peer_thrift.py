"""dbt-tests-adapter's upsert cases (an incremental model with a unique key: dbt-spark's
`merge` strategy) on a real Spark Thrift Server through dbt-spark, in a project that
installs dbt_merge and routes the strategy through the package's file of
docs/upserts.md, as a user on dbt-spark does: the routing hands every strategy but
dbt_merge's own to dbt-spark, and dbt's own adapter tests say so.

dbt runs in this process as a Thrift client (`type: spark, method: thrift`); the server
is the run's (`thrift_server` in tests/conftest.py). Models and seeds are Iceberg tables,
as in test_peer_suite.py.
"""

from __future__ import annotations

import pytest
from dbt.tests.util import run_dbt

from tests.conftest import ROOT
from tests.functional.entity_merge_fixtures import PACKAGES
from tests.peer import test_peer_suite as peer  # its classes, not collected here by name

ROUTING = (ROOT / "macros" / "upsert" / "dbt_merge_on_dbt_spark.sql").read_text()


class OnThrift:
    """A dbt-tests-adapter class's project on the run's Thrift server, with dbt_merge
    installed and its routing file in the project's macros."""

    @pytest.fixture(scope="class")
    def dbt_profile_target(self, thrift_server):
        return {
            "type": "spark",
            "method": "thrift",
            "host": "127.0.0.1",
            "port": int(thrift_server["DBT_MERGE_THRIFT_PORT"]),
            "schema": "dbt_merge_test",
            "threads": 2,
            "connect_retries": 3,
            "connect_timeout": 10,
        }

    @pytest.fixture(scope="class")
    def packages(self):
        return PACKAGES

    @pytest.fixture(scope="class")
    def macros(self):
        return {"dbt_merge_on_dbt_spark.sql": ROUTING}

    @pytest.fixture(scope="class", autouse=True)
    def installed(self, project):
        run_dbt(["deps"])


class TestIncrementalUniqueKeyOnThrift(OnThrift, peer.TestIncrementalUniqueKey):
    """The same seeds (dates typed) and Iceberg settings as on spark_session."""


class TestMergeExcludeColumnsOnThrift(OnThrift, peer.TestMergeExcludeColumns):
    pass
