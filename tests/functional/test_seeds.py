"""Seeds on the spark_session adapter: one DataFrame write, with dbt-spark's types and
values (its INSERT path, `seed_load: insert`, is the reference), checks before anything is
written, and the old table kept when a seed fails."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest
from dbt.tests.util import run_dbt

# every type dbt infers, and the cells that trip SQL literals up
mixed_csv = "\n".join(
    [
        "id,amount,ratio,big,sci,flag,born_on,seen_at,seen_iso,name,postcode,qty_text,price,"
        "when_text,empty_col,nullword,Mixed Case",
        "1,10,0.5,9007199254740993,1e3,true,2020-01-31,2020-01-31 10:11:12,"
        "2020-01-31T10:11:12+02:00,Seán O'Brien,0123,7,12.345,2021-05-05 01:02:03,,null,a",
        "2,-3,2.25,-42,2.5E-2,false,1999-12-31,1999-12-31 23:59:59,1999-12-31T23:59:59,"
        '"Comma, Inc",9000,-8,0.005,2021-05-05,,x,b',
        '3,0,-1.125,0,,,,,,"say ""hi""",,,,,,,',
        "4,,0.1,1,7,true,2000-02-29,2000-02-29 00:00:00,2000-02-29T00:00:00.5,"
        '"back\\slash and %s and ünïcode ✓ 東京",00001,12,99999999.99,,,null,',
        "5,7,3,7,1.5,false,1970-01-01,1970-01-01 00:00:01,1970-01-01T00:00:01Z,"
        '"two\nlines",42,0,-0.5,1970-01-01 00:00:00,,y,c',
        "",
    ]
)
column_types = {
    "postcode": "string",
    "qty_text": "int",
    "price": "decimal(10,2)",
    "when_text": "timestamp",
}


def table(spark, project, name: str):
    return spark.table(f"{project.test_schema}.{name}")


def rows(project, name: str, columns: str = "*", order: str = "id") -> list[tuple]:
    found = project.run_sql(
        f"select {columns} from {project.test_schema}.{name} order by {order}", fetch="all"
    )
    return [tuple(r) for r in found]


def same_table(spark, project, left: str, right: str) -> None:
    a, b = table(spark, project, left), table(spark, project, right)
    assert a.dtypes == b.dtypes, "same column names and types"
    assert a.count() == b.count()
    assert a.exceptAll(b).isEmpty() and b.exceptAll(a).isEmpty(), "same rows"


def failure(results) -> str:
    messages = [r.message for r in results.results if r.status == "error"]
    assert messages, "the seed failed"
    return messages[0]


class TestSeedValuesAsDbtSpark:
    """The DataFrame write gives what dbt-spark's INSERT batches give, row for row and type
    for type, for every type dbt infers, `column_types`, `quote_columns` and awkward text."""

    file_format = "iceberg"

    @pytest.fixture(scope="class")
    def seeds(self):
        return {
            "by_insert.csv": mixed_csv,
            "by_frame.csv": mixed_csv,
            "plain_insert.csv": "id,label\n1,a\n2,\n",
            "plain_frame.csv": "id,label\n1,a\n2,\n",
            "empty_insert.csv": "id,label\n",
            "empty_frame.csv": "id,label\n",
        }

    @pytest.fixture(scope="class")
    def project_config_update(self):
        typed = {"+column_types": column_types}
        return {
            "seeds": {
                "+file_format": self.file_format,
                "test": {
                    "by_insert": {**typed, "+seed_load": "insert"},
                    "by_frame": typed,
                    "plain_insert": {"+quote_columns": False, "+seed_load": "insert"},
                    "plain_frame": {"+quote_columns": False},
                    "empty_insert": {"+seed_load": "insert"},
                },
            }
        }

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "schema.yml": (
                "version: 2\nseeds:\n  - name: by_frame\n    columns:\n      - name: id\n"
                "        data_tests: [unique, not_null]\n"
            )
        }

    @pytest.fixture(scope="class")
    def seeded(self, project):
        results = run_dbt(["seed"])
        assert len(results) == 6
        return project

    def test_the_same_rows_and_types_as_the_insert_path(self, seeded, spark):
        for insert, frame in [
            ("by_insert", "by_frame"),
            ("plain_insert", "plain_frame"),
            ("empty_insert", "empty_frame"),
        ]:
            same_table(spark, seeded, insert, frame)

    def test_values(self, seeded, spark):
        types = dict(table(spark, seeded, "by_frame").dtypes)
        assert types == {
            "id": "bigint",
            "amount": "bigint",
            "ratio": "double",
            "big": "bigint",
            "sci": "double",
            "flag": "boolean",
            "born_on": "date",
            "seen_at": "timestamp",
            "seen_iso": "timestamp",
            "name": "string",
            "postcode": "string",
            "qty_text": "int",
            "price": "decimal(10,2)",
            "when_text": "timestamp",
            "empty_col": "bigint",
            "nullword": "string",
            "Mixed Case": "string",
        }
        by_id = {r[0]: r for r in rows(seeded, "by_frame")}
        first, second, third, fourth, fifth = (by_id[i] for i in range(1, 6))
        assert first[1:4] == (10, 0.5, 9007199254740993), "a long beyond 2**53 stays exact"
        assert first[4] == 1000.0
        assert first[5:9] == (
            True,
            dt.date(2020, 1, 31),
            dt.datetime(2020, 1, 31, 10, 11, 12),
            dt.datetime(2020, 1, 31, 10, 11, 12),  # dbt-spark drops the offset
        )
        assert first[9:14] == (
            "Seán O'Brien",
            "0123",
            7,
            Decimal("12.35"),
            dt.datetime(2021, 5, 5, 1, 2, 3),
        )
        assert first[14:] == (None, None, "a")
        assert second[9] == "Comma, Inc" and second[13] == dt.datetime(2021, 5, 5)
        assert third[1:] == (0, -1.125, 0) + (None,) * 5 + ('say "hi"',) + (None,) * 7
        assert fourth[9] == "back\\slash and %s and ünïcode ✓ 東京"
        assert fourth[10] == "00001" and fourth[12] == Decimal("99999999.99")
        assert fifth[9] == "two\nlines" and fifth[12] == Decimal("-0.50")
        assert rows(seeded, "plain_frame") == [(1, "a"), (2, None)]
        assert rows(seeded, "empty_frame") == []

    def test_show_and_test_read_the_seed(self, seeded):
        shown = run_dbt(["show", "--select", "by_frame", "--limit", "10"]).results[0].agate_table
        assert sorted(int(r["id"]) for r in shown.rows) == [1, 2, 3, 4, 5]
        assert {r["postcode"] for r in shown.rows} == {"0123", "9000", None, "00001", "42"}
        tested = run_dbt(["test", "--select", "by_frame"])
        assert [r.status for r in tested.results] == ["pass", "pass"]


class TestSeedValuesAsDbtSparkParquet(TestSeedValuesAsDbtSpark):
    file_format = "parquet"


people_csv = "id,name,qty\n1,Ann,3\n2,Bob,4\n"


class TestSeedReplacesItsTable:
    """A seed run replaces the table's contents, whatever changed in the CSV; a seed that
    fails its checks fails before anything is written and the old rows stay readable."""

    file_format = "iceberg"

    @pytest.fixture(scope="class")
    def seeds(self):
        return {"people.csv": people_csv}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {
            "seeds": {
                "+file_format": self.file_format,
                "test": {"people": {"+column_types": {"qty": "int"}}},
            }
        }

    def write(self, project, text: str) -> None:
        (Path(project.project_root) / "seeds" / "people.csv").write_text(text)

    def snapshots(self, project) -> int:
        return project.run_sql(
            f"select count(*) from {project.test_schema}.people.snapshots", fetch="one"
        )[0]

    def test_reseed_change_columns_and_full_refresh(self, project):
        run_dbt(["seed"])
        assert rows(project, "people") == [(1, "Ann", 3), (2, "Bob", 4)]
        self.write(project, "id,name,qty,city\n1,Ann,5,Oslo\n3,Cy,6,\n")
        run_dbt(["seed"])
        assert rows(project, "people") == [(1, "Ann", 5, "Oslo"), (3, "Cy", 6, None)]
        if self.file_format == "iceberg":
            assert self.snapshots(project) == 2, "replaced in one commit, not dropped"
        self.write(project, "id,name\n9,Di\n")
        run_dbt(["seed", "--full-refresh"])
        assert rows(project, "people") == [(9, "Di")]
        if self.file_format == "iceberg":
            assert self.snapshots(project) == 1, "--full-refresh drops the table first"

    def fails_keeping_the_table(self, project, csv: str, *flags: str) -> str:
        """The message of a seed of ``csv`` that fails; the people seeded before stay."""
        self.write(project, csv)
        message = failure(run_dbt(["seed", *flags], expect_pass=False))
        assert rows(project, "people") == [(1, "Ann", 3), (2, "Bob", 4)]
        return message

    def test_a_value_that_does_not_fit_its_type_fails_and_keeps_the_table(self, project):
        self.write(project, people_csv)
        run_dbt(["seed", "--full-refresh"])
        message = self.fails_keeping_the_table(project, "id,name,qty\n1,Ann,3\n2,Bob,four\n")
        assert "seed people (seeds/people.csv)" in message
        assert "'four'" in message and "`qty`" in message and "row 2" in message
        assert "int" in message and "nothing was written" in message
        # too large for an int is no int either (Spark would store null), full refresh or not
        big = "id,name,qty\n1,Ann,3000000000\n"
        message = self.fails_keeping_the_table(project, big, "--full-refresh")
        assert "'3000000000'" in message and "row 1" in message

    def test_headers_that_differ_only_in_case_fail_and_keep_the_table(self, project):
        self.write(project, people_csv)
        run_dbt(["seed", "--full-refresh"])
        message = self.fails_keeping_the_table(project, "id,name,Name,qty\n1,a,b,3\n")
        assert "'name' and 'Name' are one column to Spark" in message
        assert "Nothing was written" in message

    def test_a_seed_that_dies_before_its_write_then_runs_again(self, project, monkeypatch):
        """Killed between the checks and the write (DBT_MERGE_FAIL_AT): an Iceberg table
        keeps its old rows (it is replaced in one commit); any other was dropped first, as
        dbt-spark drops it. The next run stores what a seed that never failed stores."""
        self.write(project, people_csv)
        run_dbt(["seed", "--full-refresh"])
        changed = "id,name,qty\n1,Ann,7\n5,Eve,8\n"
        self.write(project, changed)
        monkeypatch.setenv("DBT_MERGE_FAIL_AT", "seeds.before_write")
        message = failure(run_dbt(["seed"], expect_pass=False))
        assert "injected failure at seeds.before_write" in message
        monkeypatch.delenv("DBT_MERGE_FAIL_AT")
        if self.file_format == "iceberg":
            assert rows(project, "people") == [(1, "Ann", 3), (2, "Bob", 4)]
        else:
            listed = f"show tables in {project.test_schema} like 'people'"
            assert project.run_sql(listed, fetch="all") == [], "dropped first, as dbt-spark does"
        run_dbt(["seed"])
        assert rows(project, "people") == [(1, "Ann", 7), (5, "Eve", 8)]
        run_dbt(["seed", "--full-refresh"])  # a seed that never failed
        assert rows(project, "people") == [(1, "Ann", 7), (5, "Eve", 8)]


class TestSeedReplacesItsTableParquet(TestSeedReplacesItsTable):
    file_format = "parquet"


class TestSeedLoadSetting:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"people.csv": people_csv}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"seeds": {"+file_format": "iceberg", "+seed_load": "bulk"}}

    def test_an_unknown_seed_load_is_named(self, project):
        message = failure(run_dbt(["seed"], expect_pass=False))
        assert "seed people (seeds/people.csv): seed_load must be 'dataframe'" in message
        assert 'not "bulk"' in message
