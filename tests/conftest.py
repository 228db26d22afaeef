"""Shared fixtures: one SparkSession and one Iceberg warehouse for the whole run.

dbt runs in this process (dbt-tests-adapter's ``run_dbt``, ``dbtRunner``), so every
dbt invocation and every direct Spark check uses the same session, started once.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

from dbt.adapters.spark_session import jars
from dbt.adapters.spark_session import session as sessions

pytest_plugins = [
    "dbt.tests.fixtures.project",
    "tests.scheduling",  # how workers share the suite
    "tests.dbt_calls",  # what dbt commands and their parses cost
]

ROOT = Path(__file__).resolve().parents[1]
RUN_DIR = Path(tempfile.mkdtemp(prefix="dbt_merge_tests_"))
WAREHOUSE = RUN_DIR / "warehouse"
LOG_DIR = RUN_DIR / "logs"
SPARK_SETTINGS = {
    "spark.master": "local[2]",
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "2",
    "spark.driver.memory": "2g",
    "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false",
    # The session's JVM compiles with C1 alone, in a code cache large enough for it.
    # Spark generates classes for every query, and with C2 the compiler threads were
    # about half of the JVM's CPU: test_entity_merge.py's JVM took 214-258 CPU-s with
    # the defaults and 125-149 with these (the same wall time alone; with two workers
    # sharing two cores, CPU is what counts). C1 alone with its default 48 MB cache
    # fills it and stops compiling now and then: 229 CPU-s.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=512m",
    # Delta Lake's jars beside Iceberg's (which the adapter adds): the run's session reads
    # the tables of the Delta demo build by path (tests/project/test_delta_demo.py)
    "spark.jars": ",".join(jars.jar_paths(jars.DELTA)),
}
# The suite's queries run interpreted, not compiled: Spark generates and compiles Java
# classes for every query (whole-stage code generation, then each expression), which pays
# on large data and is pure cost on a test's few rows. Results are the same either way
# (Spark's own suites run both). test_entity_merge.py alone, two runs each: 180 and 177
# CPU-s of the machine with code generation, 133 and 143 without (138 and 137 s of wall
# time against 106 and 115). Every dbt process a test starts gets them too (process_env).
INTERPRETED = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
SPARK_SETTINGS.update(INTERPRETED)

# The table format of the run's session and of the test projects' profile: iceberg, or
# delta for a run of the peer suite's upsert cases on Delta tables
# (tests/peer/test_peer_delta.py starts it; `process_env` does not pass it on)
TABLE_FORMAT_ENV = "DBT_MERGE_SUITE_TABLE_FORMAT"
TABLE_FORMAT = os.environ.get(TABLE_FORMAT_ENV, "iceberg")
if TABLE_FORMAT not in sessions.TABLE_FORMATS:
    raise ValueError(f"{TABLE_FORMAT_ENV} is {TABLE_FORMAT!r}: expected iceberg or delta")

os.environ.setdefault("DBT_SEND_ANONYMOUS_USAGE_STATS", "false")
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["DBT_MERGE_WAREHOUSE"] = str(WAREHOUSE)
# the demo is off (dbt_project.yml): every test project that installs dbt_merge must see
# the package as users get it; the demo's own tests turn it on for their dbt calls
os.environ.pop("DBT_MERGE_DEMO", None)
# dbt in this process writes no manifest.json and run_results.json (the manifest twice
# per command: 8% of the Python samples of test_entity_merge.py); the tests that read an
# artifact (or run `dbt retry`, which reads run_results.json) ask for them with
# --write-json, and the dbt processes tests start (process_env) write them as users' do
os.environ["DBT_WRITE_JSON"] = "false"


# the dbt executable of this venv, for the tests that run dbt as a process of its own
DBT = str(Path(sys.executable).with_name("dbt"))


def process_env(**extra: str) -> dict[str, str]:
    """The environment of a dbt process a test starts: this one's, without pytest's, the
    test run's DBT_MERGE_ settings and DBT_WRITE_JSON, with a driver heap of 4g unless
    its profile says otherwise (DBT_MERGE_DRIVER_MEMORY) and the suite's interpreted
    queries (INTERPRETED), plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST", "DBT_MERGE_")) and k != "DBT_WRITE_JSON"
    }
    # the driver's heap as before the default followed the machine: two workers and the
    # builds beside them share one machine's memory
    env.update(
        DBT_SEND_ANONYMOUS_USAGE_STATS="false",
        SPARK_LOCAL_IP="127.0.0.1",
        DBT_MERGE_DRIVER_MEMORY="4g",
        # PySpark adds these to the settings of the session it starts (INTERPRETED)
        PYSPARK_SUBMIT_ARGS=" ".join(
            [*(f"--conf {key}={value}" for key, value in INTERPRETED.items()), "pyspark-shell"]
        ),
        **extra,
    )
    return env


def run_json_script(script: Path, spec: Path, cwd: Path, timeout: float):
    """``python script spec`` in cwd, with process_env(): the finished process, and the
    JSON objects its stdout printed (the lines that start with ``{``)."""
    import subprocess

    done = subprocess.run(
        [sys.executable, str(script), str(spec)],
        cwd=cwd,
        env=process_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done, [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@contextlib.contextmanager
def dbt_env(env: dict):
    """Sets DBT_MERGE_TEST_<NAME> to each value of env for the duration of the block.

    Strings are set as they are and other values as JSON text, which the test models read
    back with env_var(...), `| int` or fromjson(...). A changed environment variable only
    makes dbt re-parse the files that read it, whereas a changed --vars re-parses the whole
    project with the package's macros. The previous environment is always restored, so no
    dbt call sees a variable set for another one.
    """
    names = {
        f"DBT_MERGE_TEST_{key.upper()}": value if isinstance(value, str) else json.dumps(value)
        for key, value in env.items()
    }
    saved = {name: os.environ.get(name) for name in names}
    try:
        os.environ.update(names)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def session_settings() -> sessions.SessionSettings:
    return sessions.SessionSettings(
        warehouse=WAREHOUSE,
        log_dir=LOG_DIR,
        server_side_parameters=dict(SPARK_SETTINGS),
        table_format=TABLE_FORMAT,
    )


@pytest.fixture(scope="session")
def spark():
    """The run's SparkSession (the same one dbt uses)."""
    return sessions.get_session(session_settings())


@pytest.fixture(scope="class")
def dbt_profile_target():
    return {
        "type": "spark_session",
        "method": "session",
        "schema": "dbt_merge_test",
        "threads": 2,
        "warehouse": str(WAREHOUSE),
        "log_dir": str(LOG_DIR),
        "server_side_parameters": dict(SPARK_SETTINGS),
        "table_format": TABLE_FORMAT,
    }


def free_ports(count: int, avoid: set[int] | frozenset[int] = frozenset()) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 now, none of ``avoid`` (each held
    until all are found, so that they differ)."""
    import socket

    held: list[socket.socket] = []
    try:
        while len(held) < count:
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            if sock.getsockname()[1] in avoid:
                sock.close()
                continue
            held.append(sock)
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


THRIFT_SERVER = [sys.executable, str(ROOT / "scripts" / "thrift_server.py")]


@pytest.fixture(scope="session")
def thrift_server(tmp_path_factory):
    """A Spark Thrift Server (scripts/thrift_server.py) on a free port with its state in
    a temporary folder, for the tests on dbt-spark's thrift method (test_thrift.py,
    tests/peer/test_peer_thrift.py: one unit of the schedule, so one server). Yields
    the environment of a dbt process that reaches it (the thrift target reads the
    port from DBT_MERGE_THRIFT_PORT); stopped at the end, and then nothing of it runs."""
    import subprocess

    (port,) = free_ports(1)
    folder = tmp_path_factory.mktemp("thrift")
    env = process_env(DBT_MERGE_THRIFT_PORT=str(port), DBT_MERGE_THRIFT_DIR=str(folder))
    pids = []
    try:
        up = subprocess.run(
            [*THRIFT_SERVER, "up"], env=env, capture_output=True, text=True, timeout=600
        )
        assert up.returncode == 0, up.stdout + up.stderr
        pids.append(int((folder / "server.pid").read_text()))
        yield env
    finally:  # also after a failed start
        down = subprocess.run([*THRIFT_SERVER, "down"], env=env, capture_output=True, text=True)
    assert down.returncode == 0, down.stdout + down.stderr
    (pid,) = pids
    assert not (folder / "server.pid").exists(), "the pid file is left"
    assert not Path(f"/proc/{pid}").exists(), "the server's JVM still runs"
    status = subprocess.run([*THRIFT_SERVER, "status"], env=env, capture_output=True, text=True)
    assert status.returncode == 1 and "not running" in status.stdout


@pytest.fixture(scope="session")
def demo_build(request, spark):
    """The demo's `dbt build --full-refresh` in this process (tests/demo.py), once per
    run: the demo tests (tests/project/test_demo_project.py) go on from it and the
    cluster test (tests/cluster), the Delta test (tests/project/test_delta_demo.py) and
    the Thrift test (tests/functional/test_thrift.py) compare their builds with it.
    Returns each node's status and, when the run has one of those, every stored table
    as the build left it (the demo tests change them), else None."""
    from tests import demo

    result = demo.dbt("build", "--full-refresh")
    statuses = {r.node.name: r.status for r in result.result}
    compared = any(
        any(item.get_closest_marker(name) for name in ("cluster", "delta", "thrift"))
        for item in request.session.items
    )
    return statuses, demo.read_tables(spark, WAREHOUSE) if compared else None
