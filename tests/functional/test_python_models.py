"""Python models in the session: failures stay with their model, messages are clear."""

from __future__ import annotations

import pytest
from dbt.tests.util import run_dbt

good_py = """
def model(dbt, session):
    dbt.config(materialized="table")
    return session.createDataFrame([(1, "a"), (2, "b")], ["id", "label"])
"""

raises_py = """
def helper(rows):
    if not rows:
        raise ValueError("no customers found in " + "crm")
    return rows


def model(dbt, session):
    dbt.config(materialized="table")
    return helper([])
"""

returns_count_py = """
def model(dbt, session):
    dbt.config(materialized="table")
    return session.range(3).count()
"""

returns_pandas_py = """
import pandas as pd


def model(dbt, session):
    dbt.config(materialized="table")
    return pd.DataFrame({"id": [1, 2, 3]})
"""

bad_column_py = """
def model(dbt, session):
    dbt.config(materialized="table")
    return dbt.ref("good").select("no_such_column")
"""

downstream_sql = "select * from {{ ref('raises') }}"

partitioned_py = """
def model(dbt, session):
    dbt.config(
        materialized="table", partition_by=["day"], tblproperties={"dbt_merge.example": "demo"}
    )
    return session.createDataFrame([(1, "2026-01-01"), (2, "2026-01-02")], ["id", "day"])
"""


def _by_name(results):
    return {r.node.name: r for r in results}


class TestPythonModelFailures:
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": {"+file_format": "iceberg"}}

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "good.py": good_py,
            "raises.py": raises_py,
            "returns_count.py": returns_count_py,
            "bad_column.py": bad_column_py,
            "downstream.sql": downstream_sql,
            "partitioned.py": partitioned_py,
        }

    @pytest.fixture(scope="class")
    def results(self, project):
        return _by_name(run_dbt(["run"], expect_pass=False))

    def test_good_models_still_build(self, project, results):
        assert results["good"].status == "success"
        assert results["partitioned"].status == "success"
        rows = project.run_sql(f"select count(*) from {project.test_schema}.good", fetch="one")
        assert rows[0] == 2

    def test_exception_names_the_model_and_shows_the_model_traceback(self, results):
        result = results["raises"]
        assert result.status == "error"
        message = result.message
        assert "Python model raises failed: ValueError: no customers found in crm" in message
        assert "in model" in message and "in helper" in message, "the model's own frames"
        assert 'raise ValueError("no customers found in " + "crm")' in message
        assert "python_submissions.py" not in message, "the adapter's own frame is dropped"

    def test_dependent_model_is_skipped_not_crashed(self, results):
        assert results["downstream"].status == "skipped"

    def test_non_dataframe_result_is_named(self, results):
        result = results["returns_count"]
        assert result.status == "error"
        assert "model returns_count returned a builtins.int" in result.message
        assert "must return a pyspark.sql.DataFrame or a pandas.DataFrame" in result.message

    def test_spark_error_has_no_java_stack(self, results):
        result = results["bad_column"]
        assert result.status == "error"
        assert "Python model bad_column failed: AnalysisException" in result.message
        assert "no_such_column" in result.message
        assert "\tat org.apache" not in result.message
        assert "JVM stacktrace" not in result.message

    def test_partition_by_and_tblproperties_reach_the_iceberg_table(self, project, results):
        rows = project.run_sql(f"show tblproperties {project.test_schema}.partitioned", fetch="all")
        assert ("dbt_merge.example", "demo") in [tuple(r) for r in rows]
        spec = project.run_sql(
            f"select partition from {project.test_schema}.partitioned.partitions order by 1",
            fetch="all",
        )
        assert [r[0]["day"] for r in spec] == ["2026-01-01", "2026-01-02"]


class TestPandasResult:
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": {"+file_format": "iceberg"}}

    @pytest.fixture(scope="class")
    def models(self):
        return {"from_pandas.py": returns_pandas_py}

    def test_pandas_dataframe_is_written(self, project):
        run_dbt(["run"])
        rows = project.run_sql(
            f"select sum(id) from {project.test_schema}.from_pandas", fetch="one"
        )
        assert rows[0] == 6
