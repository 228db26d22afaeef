"""dbt as a user runs it: a separate process, its own JVM, its console output."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.conftest import DBT, ROOT, WAREHOUSE
from tests.conftest import process_env as _env

JAVA_FRAME = re.compile(r"^\s+at [\w.$]+\(", re.M)
LOG4J_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|ERROR|INFO) ", re.M)


def _project(path: Path) -> list[str]:
    (path / "models").mkdir(parents=True)
    (path / "dbt_project.yml").write_text(
        "name: cli\nversion: '1.0'\nconfig-version: 2\nprofile: cli\n"
        "models:\n  cli:\n    +file_format: iceberg\n"
        "flags:\n  send_anonymous_usage_stats: false\n"
    )
    (path / "profiles.yml").write_text(
        textwrap.dedent(
            """
            cli:
              target: dev
              outputs:
                dev:
                  type: spark_session
                  method: session
                  schema: cli
                  server_side_parameters:
                    spark.master: "local[1]"
                    spark.driver.memory: "1g"
            """
        )
    )
    (path / "models" / "ok.py").write_text(
        "def model(dbt, session):\n    return session.range(3)\n"
    )
    (path / "models" / "broken.sql").write_text("select * from cli.no_such_table")
    return ["--project-dir", str(path), "--profiles-dir", str(path)]


def test_console_output_has_no_java_noise(tmp_path):
    args = _project(tmp_path / "p")
    proc = subprocess.run(
        [DBT, "run", *args], capture_output=True, text=True, env=_env(), timeout=600
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert re.search(r"\d of 2 OK created python table model cli\.ok", output), output
    assert "[TABLE_OR_VIEW_NOT_FOUND]" in output and "no_such_table" in output
    assert not JAVA_FRAME.search(output), "no Java stack frames on the console"
    assert not LOG4J_LINE.search(output), "no Spark/Hive log lines on the console"
    assert "Setting default log level" not in output
    spark_log = tmp_path / "p" / "logs" / "spark.log"
    assert spark_log.is_file(), "Spark's own log goes to logs/spark.log in the project"
    assert (tmp_path / "p" / "warehouse" / "metastore_db").is_dir()


def test_missing_java_is_explained(tmp_path):
    args = _project(tmp_path / "p")
    env = _env(PATH=str(Path(sys.executable).parent))
    env.pop("JAVA_HOME", None)
    proc = subprocess.run([DBT, "run", *args], capture_output=True, text=True, env=env, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "Java was not found (JAVA_HOME is not set and `java` is not on PATH)" in output
    assert "openjdk-17-jre-headless" in output


def test_check_java_script_explains_what_to_install():
    proc = subprocess.run(
        ["/bin/bash", str(ROOT / "scripts" / "check_java.sh")],
        capture_output=True,
        text=True,
        env={"PATH": "/nonexistent"},
    )
    assert proc.returncode == 1
    assert "Java was not found" in proc.stderr
    assert "sudo apt-get install -y openjdk-17-jre-headless" in proc.stderr


def test_a_second_process_on_the_same_warehouse_fails_at_once(spark, tmp_path):
    """The test run's own session holds WAREHOUSE: a dbt process pointed at it stops
    before anything is written, naming the process that holds it."""
    args = _project(tmp_path / "p")
    profiles = tmp_path / "p" / "profiles.yml"
    text = profiles.read_text()
    profiles.write_text(text.replace("schema: cli", f"schema: cli\n      warehouse: {WAREHOUSE}"))
    started = time.monotonic()
    proc = subprocess.run(
        [DBT, "run", *args], capture_output=True, text=True, env=_env(), timeout=300
    )
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0, output
    assert f"the warehouse '{WAREHOUSE}' is in use by another process (pid {os.getpid()}" in (
        output
    ), output[-2000:]
    assert "this run stops at once, before anything is written" in output
    assert "set `warehouse_wait` (seconds) in the profile" in output
    assert time.monotonic() - started < 120, "no hang: it does not wait by default"
    assert "cli" not in [r.namespace for r in spark.sql("show schemas").collect()]
