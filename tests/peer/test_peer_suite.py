"""dbt-tests-adapter's base classes run against the spark_session adapter.

As in dbt-spark's own functional suite, models are configured with a table format
that supports MERGE (there `delta`, here `iceberg`, the local default). The upsert
cases run on `delta` too, in a run of their own (tests/peer/test_peer_delta.py): the
table format is the run's (tests/conftest.py, TABLE_FORMAT).
"""

from __future__ import annotations

import re

import pytest
from dbt.tests.adapter.basic.test_base import BaseSimpleMaterializations
from dbt.tests.adapter.basic.test_empty import BaseEmpty
from dbt.tests.adapter.basic.test_ephemeral import BaseEphemeral
from dbt.tests.adapter.basic.test_generic_tests import BaseGenericTests
from dbt.tests.adapter.basic.test_incremental import BaseIncremental
from dbt.tests.adapter.basic.test_singular_tests import BaseSingularTests
from dbt.tests.adapter.basic.test_validate_connection import BaseValidateConnection
from dbt.tests.adapter.incremental import test_incremental_unique_id as unique_id
from dbt.tests.adapter.incremental.test_incremental_merge_exclude_columns import (
    BaseMergeExcludeColumns,
)
from dbt.tests.adapter.incremental.test_incremental_unique_id import BaseIncrementalUniqueKey
from dbt.tests.adapter.python_model.test_python_model import (
    BasePythonIncrementalTests,
    BasePythonMetaGetTests,
    BasePythonModelTests,
)

from tests.conftest import TABLE_FORMAT

# the run's table format (iceberg, or delta in test_peer_delta.py's run)
FORMAT = {"+file_format": TABLE_FORMAT}
FORMAT_MERGE = {"+file_format": TABLE_FORMAT, "+incremental_strategy": "merge"}


def _typed_dates(sql: str) -> str:
    """'2022-02-01' -> date'2022-02-01' (Spark does not cast string to date on insert)."""
    return re.sub(r"'(\d{4}-\d{2}-\d{2})'", r"date'\1'", sql)


class TestPythonModel(BasePythonModelTests):
    """Seeds with quoted values ('69.135.206.194') and a Python table model."""

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": FORMAT, "seeds": FORMAT}


class TestPythonIncremental(BasePythonIncrementalTests):
    """dbt.is_incremental takes effect: 5 rows, still 5, then 7."""

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": FORMAT_MERGE}


class TestPythonMetaGet(BasePythonMetaGetTests):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": FORMAT}


class TestIncrementalUniqueKey(BaseIncrementalUniqueKey):
    """The suite's add_new_rows.sql inserts the string '2022-02-01' into a date column.
    Spark's default ANSI store assignment refuses that implicit cast for every table
    format (dbt-spark skips this class on plain Spark), so the literals are typed:
    date'2022-02-01'. Rows and assertions are unchanged."""

    @pytest.fixture(scope="class")
    def seeds(self):
        return {
            "duplicate_insert.sql": _typed_dates(unique_id.seeds__duplicate_insert_sql),
            "seed.csv": unique_id.seeds__seed_csv,
            "add_new_rows.sql": _typed_dates(unique_id.seeds__add_new_rows_sql),
        }

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": FORMAT_MERGE, "seeds": FORMAT}


class TestMergeExcludeColumns(BaseMergeExcludeColumns):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": FORMAT_MERGE}


class TestSimpleMaterializations(BaseSimpleMaterializations):
    """Views, tables and a view-to-table swap on the default (non-Iceberg) format."""


class TestSimpleMaterializationsIceberg(BaseSimpleMaterializations):
    """The same with Iceberg tables: table<->view swaps cross the two catalogs."""

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"name": "base", "models": FORMAT, "seeds": FORMAT}


class TestSingularTests(BaseSingularTests):
    pass


class TestEmpty(BaseEmpty):
    pass


class TestEphemeral(BaseEphemeral):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"name": "ephemeral", "models": FORMAT, "seeds": FORMAT}


class TestIncremental(BaseIncremental):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"name": "incremental", "models": FORMAT, "seeds": FORMAT}


class TestGenericTests(BaseGenericTests):
    pass


class TestValidateConnection(BaseValidateConnection):
    pass
