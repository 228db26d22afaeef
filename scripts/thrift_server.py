"""A Spark Thrift Server on this machine for dbt-spark's `thrift` method (`--target thrift`).

    python scripts/thrift_server.py up       start it unless it runs, wait until it answers a query
    python scripts/thrift_server.py down     stop it (its process group), wait until it is gone
    python scripts/thrift_server.py status   exit 0 when it runs and answers, 1 otherwise

The server is HiveThriftServer2 from the venv's own PySpark (its jars ship the class:
nothing is downloaded), `local[2]`, on 127.0.0.1, with Iceberg as `spark_catalog`
(Iceberg's SparkSessionCatalog over the server's Hive metastore, an embedded Derby in the
state folder): Iceberg tables, and the views and non-Iceberg tables the session catalog
keeps. Settings, all by environment:

    DBT_MERGE_THRIFT_PORT      port of the server                  (10000, the profile's default)
    DBT_MERGE_THRIFT_HOST      address it binds to                 (127.0.0.1)
    DBT_MERGE_THRIFT_DIR       state folder: pid file, log, warehouse, metastore  (.thrift)
    DBT_MERGE_THRIFT_MEMORY    the server's driver memory          (2g)
    DBT_MERGE_THRIFT_TIMEOUT   seconds `up` waits for an answer    (300)
    DBT_MERGE_THRIFT_CONF      more Spark settings, `key=value` separated by spaces

Why the catalog settings (docs/deployment.md says it for users):

* `type=hive`, not `hadoop`: a SparkSessionCatalog of type hadoop refuses to replace a
  view ("Replacing a view is not supported by catalog: spark_catalog"), and every dbt
  view model replaces one.
* `iceberg.engine.hive.lock-enabled=false`: with Hive's locks on, each Iceberg commit
  waits about three minutes for a lock the embedded Derby metastore never grants in
  time. Without them, Iceberg commits by swapping the metadata pointer in the metastore
  with `alter_table`, which a Hive 2.3 metastore (Spark 3.5's) does not make
  conditional: two writers committing to the same table at the same moment can both
  succeed and one commit is lost. One server with one dbt run at a time is safe;
  concurrent writers need a metastore with locks (or Hive 4's conditional commits).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER_CLASS = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
MARKER = "-Ddbt_merge.thrift="  # names the state folder in the server's command line


def settings() -> dict:
    env = os.environ
    folder = Path(env.get("DBT_MERGE_THRIFT_DIR", ROOT / ".thrift")).absolute()
    return {
        "port": int(env.get("DBT_MERGE_THRIFT_PORT", "10000")),
        "host": env.get("DBT_MERGE_THRIFT_HOST", "127.0.0.1"),
        "dir": folder,
        "memory": env.get("DBT_MERGE_THRIFT_MEMORY", "2g"),
        "timeout": float(env.get("DBT_MERGE_THRIFT_TIMEOUT", "300")),
        "conf": shlex.split(env.get("DBT_MERGE_THRIFT_CONF", "")),
    }


def say(message: str) -> None:
    print(f"thrift: {message}", flush=True)


def fail(message: str) -> None:
    print(f"thrift: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def spark_conf(s: dict) -> dict[str, str]:
    from dbt.adapters.spark_session.session import ICEBERG_EXTENSIONS

    folder = s["dir"]
    return {
        "spark.master": "local[2]",
        "spark.ui.enabled": "false",
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(folder / "warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={folder / 'metastore_db'};create=true"
        ),
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        "spark.sql.catalog.spark_catalog": "org.apache.iceberg.spark.SparkSessionCatalog",
        "spark.sql.catalog.spark_catalog.type": "hive",
        "spark.hadoop.iceberg.engine.hive.lock-enabled": "false",
        # a small machine's server: few shuffle partitions, adaptive execution coalesces
        "spark.sql.shuffle.partitions": "4",
        "spark.driver.extraJavaOptions": (
            f"{MARKER}{folder} -Dderby.system.home={folder} "
            f"-Dderby.stream.error.file={folder / 'derby.log'}"
        ),
    }


def command(s: dict) -> list[str]:
    import pyspark

    from dbt.adapters.spark_session.session import iceberg_runtime_jar

    jar = iceberg_runtime_jar()
    conf = spark_conf(s)
    for pair in s["conf"]:
        key, _, value = pair.partition("=")
        if not value:
            fail(f"DBT_MERGE_THRIFT_CONF: {pair!r} is not key=value")
        conf[key] = value
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    args = [str(spark_submit), "--class", SERVER_CLASS, "--name", "dbt_merge_thrift"]
    args += ["--driver-memory", s["memory"], "--jars", jar, "--driver-class-path", jar]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    args += ["--hiveconf", f"hive.server2.thrift.port={s['port']}"]
    args += ["--hiveconf", f"hive.server2.thrift.bind.host={s['host']}"]
    return [*args, "spark-internal"]


def recorded_pid(s: dict, marked: bool = True) -> int | None:
    """The pid in the pid file if that process runs: with marked, only once it is this
    folder's server JVM; else also while it starts, as spark-submit's shell (Spark in
    its command line) or in the instant of an exec, when its command line reads empty."""
    try:
        pid = int((s["dir"] / "server.pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError, IndexError):
        return None
    if state == "Z":
        return None
    if marked:
        return pid if f"{MARKER}{s['dir']}" in cmdline and SERVER_CLASS in cmdline else None
    return pid if "spark" in cmdline or not cmdline.strip() else None


def port_open(s: dict) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((s["host"], s["port"])) == 0


def answers(s: dict) -> str | None:
    """None when `select 1` comes back over Thrift, else why not."""
    from pyhive import hive

    try:
        connection = hive.connect(host=s["host"], port=s["port"], username="dbt")
        try:
            cursor = connection.cursor()
            cursor.execute("select 1")
            return None if cursor.fetchall() == [(1,)] else "select 1 gave another answer"
        finally:
            connection.close()
    except Exception as exc:  # noqa: BLE001 - any failure means: not ready yet
        return f"{type(exc).__name__}: {exc}"


def log_tail(s: dict, lines: int = 30) -> str:
    log = s["dir"] / "server.log"
    text = log.read_text(errors="replace").splitlines()[-lines:] if log.is_file() else []
    return f"--- last lines of {log} ---\n" + "\n".join(text)


def up() -> None:
    s = settings()
    subprocess.run([str(ROOT / "scripts" / "check_java.sh")], check=True)
    running = recorded_pid(s, marked=False)  # this folder's server, up or starting
    if running and answers(s) is None:
        say(f"already up on {s['host']}:{s['port']} (pid {running})")
        return
    if running is None and port_open(s):
        fail(
            f"port {s['port']} on {s['host']} is in use by a process that is not this "
            "server (set DBT_MERGE_THRIFT_PORT to a free port)."
        )
    process = None
    if running is None:
        s["dir"].mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SPARK_LOCAL_IP": s["host"], "PYSPARK_PYTHON": sys.executable}
        with open(s["dir"] / "server.log", "w") as log:
            process = subprocess.Popen(
                command(s),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=s["dir"],
                env=env,
                start_new_session=True,  # down stops its whole process group
            )
        (s["dir"] / "server.pid").write_text(str(process.pid))
        say(f"started the server (pid {process.pid}, log {s['dir'] / 'server.log'})")
    deadline = time.monotonic() + s["timeout"]
    delay, reported = 0.5, time.monotonic()
    while True:
        exited = process.poll() is not None if process else recorded_pid(s, False) is None
        if exited:
            print(log_tail(s), file=sys.stderr)
            down()
            fail("the server exited while starting (its log above).")
        why = answers(s) if port_open(s) else f"port {s['port']} not listening yet"
        if why is None:
            break
        if time.monotonic() > deadline:
            print(log_tail(s), file=sys.stderr)
            down()
            fail(f"no answer after {s['timeout']:.0f} s ({why}); stopped what was started.")
        if time.monotonic() - reported > 10:
            say(f"waiting for an answer on {s['host']}:{s['port']}: {why}")
            reported = time.monotonic()
        time.sleep(delay)
        delay = min(delay * 2, 5)
    say(f"up: thrift://{s['host']}:{s['port']}, warehouse {s['dir'] / 'warehouse'}")
    if s["port"] != 10000:
        say(f"for dbt: export DBT_MERGE_THRIFT_PORT={s['port']}")


def down() -> None:
    s = settings()
    pidfile = s["dir"] / "server.pid"
    pid = recorded_pid(s, marked=False)
    if pid is None:
        pidfile.unlink(missing_ok=True)
        say("not running")
        return
    os.killpg(pid, signal.SIGTERM)
    for kill, seconds in ((None, 30), (signal.SIGKILL, 10)):
        if kill:
            say(f"the server (pid {pid}) did not stop within 30 s: killing it")
            os.killpg(pid, kill)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                pidfile.unlink(missing_ok=True)
                say(f"stopped the server (pid {pid})")
                return
            time.sleep(0.2)
    fail(f"the server (pid {pid}) is still running")


def status() -> int:
    s = settings()
    pid = recorded_pid(s)
    if pid is None:
        say("not running")
        return 1
    why = answers(s)
    say(f"running (pid {pid}) on {s['host']}:{s['port']}: " + (why or "answers"))
    return 0 if why is None else 1


if __name__ == "__main__":
    action = sys.argv[1] if len(sys.argv) == 2 else ""
    if action == "up":
        up()
    elif action == "down":
        down()
    elif action == "status":
        sys.exit(status())
    else:
        print(f"usage: {sys.argv[0]} up|down|status (settings: see its docstring)", file=sys.stderr)
        sys.exit(2)
