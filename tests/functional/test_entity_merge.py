"""Entity merge end to end: dbt seeds → edges → components (Python) → golden records."""

from __future__ import annotations

import json

import pytest
from dbt.tests.util import run_dbt

from tests.functional.entity_merge_fixtures import PACKAGES, merge_models, merge_vars

SESAM_A = "_id,f1\na1,1\na2,2\n"
SESAM_B = "_id,f1,f2\nb1,1,x\nb2,3,\n"
SESAM_C = "_id,_deleted,f3\nc1,false,X\nc2,true,Y\nc3,true,X\n"
SESAM_MERGE = {
    "datasets": ["sesam_a a", "sesam_b b", "sesam_c c"],
    "equality": [["eq", "a.f1", "b.f1"], ["eq", "b.f2", ["lower", "c.f3"]]],
    "identity": "composite",
    "strategy": "default",
}


def rows(spark, sql):
    return [tuple(r) for r in spark.sql(sql).collect()]


class TestSesamExample:
    """SPEC §1 'The Sesam example': the exact golden output."""

    @pytest.fixture(scope="class")
    def packages(self):
        return PACKAGES

    @pytest.fixture(scope="class")
    def seeds(self):
        return {"sesam_a.csv": SESAM_A, "sesam_b.csv": SESAM_B, "sesam_c.csv": SESAM_C}

    @pytest.fixture(scope="class")
    def models(self):
        return merge_models("sesam")

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {
            **merge_vars(sesam=SESAM_MERGE),
            "seeds": {
                "+file_format": "iceberg",
                # Iceberg cannot read a data column named _deleted (a reserved metadata
                # column), so the dataset that uses Sesam's default name is parquet
                "test": {
                    "sesam_c": {"+file_format": "parquet", "+column_types": {"_deleted": "boolean"}}
                },
            },
            "models": {"+file_format": "iceberg"},
        }

    def test_golden_records(self, project, spark):
        run_dbt(["deps"])
        run_dbt(["seed"])
        results = run_dbt(["run"])
        assert len(results) == 3
        got = rows(
            spark,
            f"select `_id`, `$ids`, `$deleted`, `_updated`, `$replaced`, entity "
            f"from {project.test_schema}.sesam order by `_updated`",
        )
        assert got == [
            (
                "0|a1|1|b1|2|c1",
                ["a1", "b1", "c1"],
                False,
                0,
                False,
                '{"f1":[1,1],"f2":"x","f3":"X"}',
            ),
            ("0|a2", ["a2"], False, 1, False, '{"f1":2}'),
            ("1|b2", ["b2"], False, 2, False, '{"f1":3}'),
            ("2|c2", ["c2"], True, 3, False, '{"f3":"Y"}'),
            ("2|c3", ["c3"], True, 4, False, '{"f3":"X"}'),
        ]
        typed = rows(
            spark, f"select f1, f2, f3 from {project.test_schema}.sesam order by `_updated`"
        )
        assert typed[0] == ([1, 1], ["x"], ["X"]), "property columns hold the strategy's values"
        assert typed[1] == ([2], None, None), "a property no member has is null"
        for _id, entity in rows(spark, f"select `_id`, entity from {project.test_schema}.sesam"):
            json.loads(entity)
