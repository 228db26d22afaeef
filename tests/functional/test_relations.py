"""Relations in the session catalog: Iceberg tables, Hive views, seeds, schemas."""

from __future__ import annotations

from pathlib import Path

import pytest
from dbt.tests.util import run_dbt
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.spark_session import session as sessions
from tests.conftest import LOG_DIR, WAREHOUSE

seed_csv = "\n".join(
    [
        "id,name,note",
        "1,Seán O'Brien,plain",
        "2,'69.135.206.194',quoted both ends",
        "3,Back\\slash,",
        '4,"Comma, Inc","say ""hi"""',
        "",
    ]
)

table_sql = "{{ config(materialized='table') }} select id, name from {{ ref('people') }}"
view_sql = "{{ config(materialized='view') }} select id, upper(name) as name from {{ ref('t') }}"


class TestSeedsAndCatalog:
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": {"+file_format": "iceberg"}, "seeds": {"+file_format": "iceberg"}}

    @pytest.fixture(scope="class")
    def seeds(self):
        return {"people.csv": seed_csv}

    @pytest.fixture(scope="class")
    def models(self):
        return {"t.sql": table_sql, "v.sql": view_sql}

    @pytest.fixture(scope="class")
    def built(self, project):
        run_dbt(["seed"])
        run_dbt(["run"])
        return project

    def test_seed_values_round_trip(self, built):
        rows = built.run_sql(
            f"select id, name, note from {built.test_schema}.people order by id", fetch="all"
        )
        assert [tuple(r) for r in rows] == [
            (1, "Seán O'Brien", "plain"),
            (2, "'69.135.206.194'", "quoted both ends"),
            (3, "Back\\slash", None),
            (4, "Comma, Inc", 'say "hi"'),
        ], "quotes, backslashes and commas survive; an empty cell is null, not 'None'"

    def test_iceberg_tables_and_views_are_listed(self, built):
        adapter = built.adapter
        with adapter.connection_named("_test"):
            schema = adapter.Relation.create(schema=built.test_schema)
            listed = {
                r.identifier: (r.type, r.is_iceberg)
                for r in adapter.list_relations_without_caching(schema)
            }
        assert listed["people"] == ("table", True)
        assert listed["t"] == ("table", True)
        assert listed["v"] == ("view", False)

    def test_view_reads_the_iceberg_table(self, built):
        rows = built.run_sql(f"select name from {built.test_schema}.v where id = 1", fetch="all")
        assert rows[0][0] == "SEÁN O'BRIEN"

    def test_materialization_switches_across_catalogs(self, built):
        # view -> table: the Hive view must really be dropped first
        (Path(built.project_root) / "models" / "v.sql").write_text(
            view_sql.replace("materialized='view'", "materialized='table'")
        )
        run_dbt(["run", "-s", "v"])
        rows = built.run_sql(f"select count(*) from {built.test_schema}.v", fetch="one")
        assert rows[0] == 4
        with built.adapter.connection_named("_test"):
            assert "v" in built.adapter.iceberg_table_names(built.test_schema)
        # and back: the Iceberg table is dropped, a view takes its name
        (Path(built.project_root) / "models" / "v.sql").write_text(view_sql)
        run_dbt(["run", "-s", "v"])
        with built.adapter.connection_named("_test"):
            assert "v" not in built.adapter.iceberg_table_names(built.test_schema)
        rows = built.run_sql(f"select count(*) from {built.test_schema}.v", fetch="one")
        assert rows[0] == 4

    def test_drop_schema_removes_iceberg_tables(self, built):
        adapter = built.adapter
        schema = adapter.Relation.create(schema=built.test_schema + "_drop")
        with adapter.connection_named("_test"):
            adapter.create_schema(schema)
            adapter.execute(f"create table {schema.schema}.gone using iceberg as select 1 as id")
            assert adapter.iceberg_table_names(schema.schema) == ["gone"]
            adapter.drop_schema(schema)
            assert adapter.iceberg_table_names(schema.schema) == []
        assert not (WAREHOUSE / schema.schema / "gone").exists()


def test_a_second_warehouse_in_one_process_is_refused(spark, tmp_path):
    other = sessions.SessionSettings(warehouse=tmp_path / "other", log_dir=LOG_DIR)
    with pytest.raises(DbtRuntimeError) as err:
        sessions.get_session(other)
    assert f"already running in this process with warehouse '{WAREHOUSE}'" in str(err.value)
    assert f"this profile asks for '{tmp_path / 'other'}'" in str(err.value)


def test_a_query_runs_in_execute(spark):
    """dbt's "SQL status: ... in N seconds" times execute: a query's work, and its
    failure, belong to it, not to a later fetch."""
    cursor = sessions.SessionCursor(spark)
    with pytest.raises(DbtRuntimeError, match="no row may pass"):
        cursor.execute("select assert_true(id < 0, 'no row may pass') from range(3)")
    cursor.execute("select id * 2 as doubled from range(3)")
    assert [row.doubled for row in cursor.fetchall()] == [0, 2, 4]
    assert [column[0] for column in cursor.description] == ["doubled"]


def test_the_session_starts_from_the_class_archive(spark):
    """`make test` builds the class archive first (`make class-archive`), and the run's
    JVM mapped it: the JVM accepted it (one it refuses is not in its memory map)."""
    from dbt.adapters.spark_session import class_archive

    java = sessions.java_executable()
    archive = class_archive.archive_path(java)
    assert archive.is_file(), f"no class archive at {archive}: `make class-archive` builds it"
    assert f"-XX:SharedArchiveFile={archive}" in spark.conf.get("spark.driver.extraJavaOptions")
    jvm = spark.sparkContext._gateway.proc.pid
    assert str(archive) in Path(f"/proc/{jvm}/maps").read_text()
