"""Unit tests of the spark_session adapter's pure helpers (no Spark)."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.spark_session import jars
from dbt.adapters.spark_session import session as sessions
from dbt.adapters.spark_session.connections import SparkSessionCredentials

LITERALS = [
    # (value, literal, why)
    (None, "null", "a missing seed value is SQL null, not the string 'None'"),
    ("O'Brien", "'O\\'Brien'", "a single quote is backslash-escaped"),
    ("'69.135.206.194'", "'\\'69.135.206.194\\''", "quotes at both ends survive"),
    ("back\\slash", "'back\\\\slash'", "a backslash is doubled so Spark keeps it"),
    ("\\u0041", "'\\\\u0041'", "a unicode escape sequence stays literal text"),
    ("50% off", "'50% off'", "percent signs need no escaping"),
    (True, "true", "booleans are SQL booleans"),
    (7, "7", "integers are bare"),
    (Decimal("1.10"), "1.10", "decimals keep their digits"),
    (2.5, "2.5", "floats are bare"),
    (float("nan"), "'nan'", "NaN is quoted so cast() can read it"),
    (dt.date(2026, 1, 2), "'2026-01-02'", "dates are ISO strings"),
    (dt.datetime(2026, 1, 2, 3, 4, 5, 6000), "'2026-01-02 03:04:05.006000'", "timestamps"),
]


@pytest.mark.parametrize("value, literal, why", LITERALS, ids=[c[2] for c in LITERALS])
def test_sql_literal(value, literal, why):
    assert sessions.sql_literal(value) == literal, why


def test_bind_substitutes_in_order():
    sql = "insert into t values (cast(%s as string), cast(%s as bigint))"
    assert sessions.bind(sql, ["O'Brien", None]) == (
        "insert into t values (cast('O\\'Brien' as string), cast(null as bigint))"
    )


def test_bind_does_not_reinterpret_placeholders_inside_values():
    assert sessions.bind("select %s, %s", ["%s", "x"]) == "select '%s', 'x'"


def test_bind_rejects_a_count_mismatch():
    with pytest.raises(DbtRuntimeError, match="statement has 2 placeholders but 1 values"):
        sessions.bind("select %s, %s", [1])


VIEW_DDL = [
    ("create view s.v as select 1", True),
    ("CREATE OR REPLACE VIEW s.v AS select 1", True),
    ('/* {"app": "dbt"} */\n  create or replace view s.v as select 1', True),
    ("-- comment\ndrop view if exists s.v", True),
    ("alter view s.v rename to s.w", True),
    ("create or replace temporary view v as select 1", False),
    ("create temporary view v as select 1", False),
    ("create table s.t as select 'create view' as x", False),
    ("select * from view_counts", False),
    ("drop table if exists s.t", False),
]


@pytest.mark.parametrize("sql, expected", VIEW_DDL)
def test_persistent_view_ddl_is_recognised(sql, expected):
    assert sessions.is_persistent_view_ddl(sql) is expected


def _settings(tmp_path: Path, **params: str) -> sessions.SessionSettings:
    return sessions.SessionSettings(
        warehouse=tmp_path / "wh", log_dir=tmp_path / "logs", server_side_parameters=params
    )


def test_defaults_give_iceberg_on_spark_catalog(tmp_path):
    conf = sessions.resolve_conf(_settings(tmp_path))
    assert conf["spark.sql.catalog.spark_catalog"] == sessions.SESSION_CATALOG
    assert conf["spark.sql.catalog.spark_catalog.type"] == "hadoop"
    assert conf[sessions.WAREHOUSE_KEY] == str(tmp_path / "wh")
    assert conf["spark.sql.extensions"] == sessions.ICEBERG_EXTENSIONS
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.jars"].endswith(jars.ICEBERG.file_name)
    assert Path(conf["spark.jars"]).is_file(), "make install fetched it from Maven Central"
    assert "log4j2.configurationFile" in conf["spark.driver.extraJavaOptions"]


def test_table_format_delta_puts_delta_on_spark_catalog_and_keeps_iceberg(tmp_path):
    settings = sessions.SessionSettings(
        warehouse=tmp_path / "wh", log_dir=tmp_path / "logs", table_format="delta"
    )
    conf = sessions.resolve_conf(settings)
    assert conf["spark.sql.catalog.spark_catalog"] == sessions.DELTA_CATALOG
    assert conf["spark.sql.extensions"].split(",") == [
        sessions.DELTA_EXTENSIONS,
        sessions.ICEBERG_EXTENSIONS,
    ]
    assert conf["spark.sql.catalog.iceberg"] == sessions.ICEBERG_CATALOG
    assert conf["spark.sql.catalog.iceberg.warehouse"] == str(tmp_path / "wh" / "iceberg")
    assert "spark.sql.catalog.spark_catalog.type" not in conf
    names = sorted(Path(j).name for j in conf["spark.jars"].split(","))
    assert names == sorted(j.file_name for j in jars.ALL)
    assert all(Path(j).is_file() for j in conf["spark.jars"].split(","))


def test_a_delta_package_of_the_users_own_replaces_both_delta_jars(tmp_path):
    settings = sessions.SessionSettings(
        warehouse=tmp_path / "wh",
        log_dir=tmp_path / "logs",
        table_format="delta",
        server_side_parameters={"spark.jars.packages": "io.delta:delta-spark_2.12:3.2.0"},
    )
    conf = sessions.resolve_conf(settings)
    assert [Path(j).name for j in conf["spark.jars"].split(",")] == [jars.ICEBERG.file_name]


def test_profile_settings_win_over_defaults(tmp_path):
    conf = sessions.resolve_conf(
        _settings(tmp_path, **{"spark.master": "spark://h:7077", "spark.ui.enabled": "true"})
    )
    assert conf["spark.master"] == "spark://h:7077"
    assert conf["spark.ui.enabled"] == "true"


@pytest.mark.parametrize(
    "physical_gib, memory",
    [(24, "12g"), (8, "4g"), (3, "2g"), (1, "2g"), (25.9, "12g"), (256, "32g")],
)
def test_the_default_driver_memory_is_half_the_machine(physical_gib, memory, monkeypatch):
    monkeypatch.delenv("DBT_MERGE_DRIVER_MEMORY", raising=False)
    assert sessions.default_driver_memory(int(physical_gib * (1 << 30))) == memory


def test_the_environment_sets_the_default_driver_memory(monkeypatch):
    monkeypatch.setenv("DBT_MERGE_DRIVER_MEMORY", "3g")
    assert sessions.default_driver_memory(24 << 30) == "3g"


def test_the_driver_memory_default_follows_the_machine_and_a_profile_wins(tmp_path):
    assert sessions.resolve_conf(_settings(tmp_path))["spark.driver.memory"] == (
        sessions.default_driver_memory()
    )
    conf = sessions.resolve_conf(_settings(tmp_path, **{"spark.driver.memory": "3g"}))
    assert conf["spark.driver.memory"] == "3g"


def test_user_iceberg_jar_or_package_is_not_doubled(tmp_path):
    mine = "/opt/jars/iceberg-spark-runtime-3.5_2.12-1.9.0.jar"
    conf = sessions.resolve_conf(_settings(tmp_path, **{"spark.jars": mine}))
    assert conf["spark.jars"] == mine
    pkg = "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.0"
    conf = sessions.resolve_conf(_settings(tmp_path, **{"spark.jars.packages": pkg}))
    assert conf["spark.jars"] == ""


def test_user_java_options_keep_quiet_logging(tmp_path):
    conf = sessions.resolve_conf(
        _settings(tmp_path, **{"spark.driver.extraJavaOptions": "-Dfoo=bar"})
    )
    assert conf["spark.driver.extraJavaOptions"].endswith(" -Dfoo=bar")
    assert "log4j2.configurationFile" in conf["spark.driver.extraJavaOptions"]


def test_missing_java_says_what_to_install(monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(DbtRuntimeError) as err:
        sessions.java_executable()
    assert "Java was not found (JAVA_HOME is not set and `java` is not on PATH)" in str(err.value)
    assert "openjdk-17-jre-headless" in str(err.value)


def test_broken_java_home_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(DbtRuntimeError, match=f"JAVA_HOME is set to '{tmp_path}'"):
        sessions.java_executable()


def test_warehouse_that_is_a_file_is_refused(tmp_path):
    file = tmp_path / "wh"
    file.write_text("not a folder")
    with pytest.raises(DbtRuntimeError, match=f"warehouse '{file}' exists but is not a folder"):
        sessions.prepare_warehouse(file)


def test_warehouse_under_a_file_is_refused(tmp_path):
    (tmp_path / "plain").write_text("x")
    bad = tmp_path / "plain" / "wh"
    with pytest.raises(DbtRuntimeError, match=f"warehouse '{bad}' cannot be used: Not a directory"):
        sessions.prepare_warehouse(bad)


def test_warehouse_is_created(tmp_path):
    made = sessions.prepare_warehouse(tmp_path / "a" / "b")
    assert made.is_dir()
    assert not any(made.iterdir()), "the write probe is removed"


def test_only_the_session_method_is_accepted():
    with pytest.raises(
        DbtRuntimeError, match="supports only `method: session`, not `method: thrift`"
    ):
        SparkSessionCredentials(method="thrift", schema="s")


def test_an_unknown_table_format_is_refused_by_name():
    with pytest.raises(
        DbtRuntimeError, match="`table_format` is 'hudi'; it must be iceberg or delta"
    ):
        SparkSessionCredentials(schema="s", table_format="hudi")


def test_relative_paths_resolve_against_the_project(tmp_path):
    creds = SparkSessionCredentials(schema="s", warehouse="wh", log_dir="/abs/logs")
    settings = creds.session_settings(str(tmp_path))
    assert settings.warehouse == tmp_path / "wh"
    assert settings.log_dir == Path("/abs/logs")


def test_statement_label_names_the_dbt_node_and_the_statement_start():
    sql = (
        '/* {"app": "dbt", "node_id": "model.proj.people_edges"} */\ncreate table t\n   as select 1'
    )
    assert sessions.statement_label(sql) == "model.proj.people_edges: create table t as select 1"
    assert sessions.statement_label("select  2 " + "x" * 200) == ("select 2 " + "x" * 200)[:120]


def test_short_error_drops_java_frames():
    text = "boom: bad thing\n\tat org.foo.Bar(Bar.java:1)\n\tat org.foo.Baz(Baz.java:2)"
    assert sessions.short_error(RuntimeError(text)) == "boom: bad thing"


HOLDER = """
import sys, time
from pathlib import Path
from dbt.adapters.spark_session import session
session.hold_warehouse(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _holder(warehouse, seconds):
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(warehouse), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def _release(warehouse):
    sessions._held.pop(warehouse).close()


def test_a_held_warehouse_fails_at_once_naming_the_holder(tmp_path):
    holder = _holder(tmp_path, 60)
    try:
        with pytest.raises(DbtRuntimeError) as error:
            sessions.hold_warehouse(tmp_path, wait=0)
        text = str(error.value)
        assert f"the warehouse '{tmp_path}' is in use by another process (pid {holder.pid}" in text
        assert "this run stops at once, before anything is written" in text
        assert tmp_path not in sessions._held, "nothing is held after the failure"
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_holder_leaves_no_lock_behind(tmp_path):
    holder = _holder(tmp_path, 60)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    sessions.hold_warehouse(tmp_path, wait=0)
    try:
        assert "pid " + str(os.getpid()) in (tmp_path / sessions.WAREHOUSE_LOCK).read_text()
    finally:
        _release(tmp_path)


def test_warehouse_wait_waits_for_the_holder_to_finish(tmp_path):
    holder = _holder(tmp_path, 1)
    started = time.monotonic()
    sessions.hold_warehouse(tmp_path, wait=60)
    try:
        assert time.monotonic() - started < 30, "taken once the holder ended"
        assert holder.wait(timeout=30) == 0
    finally:
        _release(tmp_path)


def test_warehouse_wait_gives_up_after_its_limit(tmp_path):
    holder = _holder(tmp_path, 60)
    try:
        with pytest.raises(DbtRuntimeError, match=r"this run stops after waiting 1 s"):
            sessions.hold_warehouse(tmp_path, wait=1)
    finally:
        holder.kill()
        holder.wait()
