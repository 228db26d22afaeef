"""The in-process SparkSession behind the ``spark_session`` adapter.

One SparkSession serves a whole dbt process: every SQL statement dbt sends and
every Python model runs in it. Static Spark settings (jars, catalog, metastore)
cannot change once the JVM is up, so the first connection fixes them and every
later one must ask for the same warehouse.

Two sessions share one SparkContext and one metastore:

* the main session has Iceberg's SQL extensions (``CALL``, ``ALTER TABLE ...
  WRITE ORDERED BY``) and runs everything except persistent-view DDL;
* a twin without the extensions runs ``CREATE/ALTER/DROP VIEW``. Iceberg's
  ``RewriteViewCommands`` sends view DDL on ``SparkSessionCatalog`` to the
  Iceberg catalog, and a ``hadoop`` catalog has no views, so with the
  extensions every view fails ("Creating a view is not supported by catalog:
  spark_catalog") and ``DROP VIEW`` silently drops nothing. Views made by the
  twin live in the Hive metastore and the main session reads them as usual.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.spark_session import class_archive, jars
from dbt_merge.core.sql import string_literal

logger = logging.getLogger(__name__)

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
SESSION_CATALOG = "org.apache.iceberg.spark.SparkSessionCatalog"
ICEBERG_CATALOG = "org.apache.iceberg.spark.SparkCatalog"
DELTA_EXTENSIONS = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
TABLE_FORMATS = ("iceberg", "delta")
# with table_format delta, Iceberg stays available as this catalog (`iceberg.<schema>.<table>`)
DELTA_ICEBERG_CATALOG = "iceberg"
WAREHOUSE_KEY = "spark.sql.catalog.spark_catalog.warehouse"
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
# In local mode the driver is all of Spark (its tasks run in the driver's JVM), so its
# default heap follows the machine: this share of the physical memory, in whole GiB,
# within these bounds. The other half stays for the Python process (the closure's driver
# method holds its Arrow and scipy arrays there), Python workers and the OS.
DRIVER_MEMORY_SHARE = 0.5
DRIVER_MEMORY_MIN_GIB = 2
DRIVER_MEMORY_MAX_GIB = 32
# the environment variable that sets the default instead (a profile's setting still wins)
DRIVER_MEMORY_ENV = "DBT_MERGE_DRIVER_MEMORY"
WAREHOUSE_WAIT_DEFAULT = 0  # seconds; by default a second process fails at once
WAREHOUSE_LOCK = ".dbt_merge_session.lock"


@dataclass(frozen=True)
class SessionSettings:
    """What a profile asks of the in-process SparkSession.

    Args:
        warehouse: folder that holds the Iceberg tables and the Derby metastore.
        log_dir: folder for ``spark.log`` (Spark's own log, kept out of dbt's output).
        server_side_parameters: Spark settings from the profile; they win over
            every default below.
        warehouse_wait: seconds to wait for another process that holds the
            warehouse before failing (see ``hold_warehouse``).
        table_format: what ``spark_catalog`` is: ``iceberg`` (Iceberg's
            ``SparkSessionCatalog``) or ``delta`` (Delta Lake's ``DeltaCatalog``,
            with Iceberg in the catalog ``iceberg``).
    """

    warehouse: Path
    log_dir: Path
    server_side_parameters: dict[str, str] = field(default_factory=dict)
    warehouse_wait: int = WAREHOUSE_WAIT_DEFAULT
    table_format: str = "iceberg"


def iceberg_runtime_jar() -> str:
    """Path of Iceberg's Spark runtime jar (fetched from Maven Central once: ``jars``)."""
    return jars.jar_paths([jars.ICEBERG])[0]


def default_conf(settings: SessionSettings) -> dict[str, str]:
    """The Spark settings applied when the profile does not set them."""
    warehouse = str(settings.warehouse)
    log_file = settings.log_dir / "spark.log"
    java_options = (
        f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()} "
        f"-Ddbt_merge.spark_log={log_file} "
        f"-Dderby.stream.error.file={settings.log_dir / 'derby.log'}"
    )
    return {
        "spark.master": "local[*]",
        "spark.app.name": "dbt_merge",
        "spark.driver.memory": default_driver_memory(),
        "spark.driver.extraJavaOptions": java_options,
        **catalog_conf(settings),
        "spark.sql.warehouse.dir": warehouse,
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={settings.warehouse / 'metastore_db'};create=true"
        ),
        "spark.sql.shuffle.partitions": _local_partitions(),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }


def catalog_conf(settings: SessionSettings) -> dict[str, str]:
    """The extensions and catalogs of ``settings.table_format``.

    ``iceberg``: Iceberg's ``SparkSessionCatalog`` of type ``hadoop`` is ``spark_catalog``
    (Iceberg tables in the warehouse folder, views and other tables in the metastore).
    ``delta``: Delta Lake's ``DeltaCatalog`` is ``spark_catalog`` (Delta tables managed
    in the metastore, under the warehouse folder), both SQL extensions are on, and
    Iceberg stays reachable as the catalog ``iceberg`` (type ``hadoop``, in
    ``<warehouse>/iceberg``).
    """
    warehouse = str(settings.warehouse)
    if settings.table_format == "delta":
        iceberg = f"spark.sql.catalog.{DELTA_ICEBERG_CATALOG}"
        return {
            "spark.sql.extensions": f"{DELTA_EXTENSIONS},{ICEBERG_EXTENSIONS}",
            "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
            # Delta rebuilds a table's state from its log in 50 partitions by default, a
            # cluster's number: on one machine, as many as it has cores (as shuffles)
            "spark.databricks.delta.snapshotPartitions": _local_partitions(),
            WAREHOUSE_KEY: warehouse,
            iceberg: ICEBERG_CATALOG,
            f"{iceberg}.type": "hadoop",
            f"{iceberg}.warehouse": str(settings.warehouse / "iceberg"),
        }
    return {
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        "spark.sql.catalog.spark_catalog": SESSION_CATALOG,
        "spark.sql.catalog.spark_catalog.type": "hadoop",
        WAREHOUSE_KEY: warehouse,
    }


def default_driver_memory(physical: int | None = None) -> str:
    """``spark.driver.memory`` when the profile does not set it: the environment's
    ``DBT_MERGE_DRIVER_MEMORY`` if set (e.g. on a machine several processes share),
    else ``DRIVER_MEMORY_SHARE`` of the machine's physical memory (``physical`` bytes,
    else what the OS reports) in whole GiB, at least ``DRIVER_MEMORY_MIN_GIB`` and at
    most ``DRIVER_MEMORY_MAX_GIB`` (e.g. ``12g`` on 24 GiB); ``4g`` when the OS does not
    say."""
    if os.environ.get(DRIVER_MEMORY_ENV):
        return os.environ[DRIVER_MEMORY_ENV]
    if physical is None:
        try:
            physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return "4g"
    gib = int(physical * DRIVER_MEMORY_SHARE) // (1 << 30)
    return f"{min(DRIVER_MEMORY_MAX_GIB, max(DRIVER_MEMORY_MIN_GIB, gib))}g"


def _local_partitions() -> str:
    return str(max(2, os.cpu_count() or 2))


def resolve_conf(settings: SessionSettings) -> dict[str, str]:
    """Defaults, then the profile's settings on top; the table formats' jars are added
    once (those the profile brings in ``spark.jars`` or ``spark.jars.packages`` win)."""
    conf = default_conf(settings)
    user = dict(settings.server_side_parameters)
    if "spark.driver.extraJavaOptions" in user:
        # keep the quiet logging unless the user brings a log4j config of their own
        if "log4j2.configurationFile" not in user["spark.driver.extraJavaOptions"]:
            user["spark.driver.extraJavaOptions"] = (
                conf["spark.driver.extraJavaOptions"] + " " + user["spark.driver.extraJavaOptions"]
            )
    conf.update(user)
    listed = [j for j in conf.get("spark.jars", "").split(",") if j]
    brought = ",".join(listed) + "," + conf.get("spark.jars.packages", "")
    wanted = {"iceberg-spark-runtime": [jars.ICEBERG]}
    if settings.table_format == "delta":
        wanted["delta-spark"] = list(jars.DELTA)  # with its delta-storage
    for name, group in wanted.items():
        if name not in brought:
            listed += jars.jar_paths(group)
    conf["spark.jars"] = ",".join(listed)
    return conf


def java_executable() -> str:
    """The java binary PySpark will start, or a clear error naming what to install."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
        raise DbtRuntimeError(
            f"spark_session: JAVA_HOME is set to '{java_home}' but '{candidate}' is not "
            "an executable java. Point JAVA_HOME at a Java 17 installation or unset it."
        )
    found = shutil.which("java")
    if found:
        return found
    raise DbtRuntimeError(
        "spark_session: Java was not found (JAVA_HOME is not set and `java` is not on "
        "PATH). Spark 3.5 runs in the dbt process and needs Java 17: install it "
        "(Debian/Ubuntu: `sudo apt-get install openjdk-17-jre-headless`; macOS: "
        "`brew install openjdk@17`) or set JAVA_HOME."
    )


def java_major_version(java: str) -> int | None:
    """Major version of ``java`` (8, 11, 17 ...), or None if it cannot be read."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 and match.group(2) else major


def prepare_warehouse(warehouse: Path) -> Path:
    """Create the warehouse folder or say exactly why it cannot be used."""
    path = warehouse.expanduser()
    if path.exists() and not path.is_dir():
        raise DbtRuntimeError(
            f"spark_session: warehouse '{path}' exists but is not a folder. Set "
            "`warehouse` in profiles.yml to a folder (it is created if missing)."
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".dbt_merge_write_probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise DbtRuntimeError(
            f"spark_session: warehouse '{path}' cannot be used: {exc.strerror or exc}. "
            "Set `warehouse` in profiles.yml to a writable folder."
        ) from exc
    return path.resolve()


_held: dict[Path, Any] = {}  # warehouse -> the open lock file, held while the process lives


def hold_warehouse(warehouse: Path, wait: float = WAREHOUSE_WAIT_DEFAULT) -> None:
    """Take the warehouse for this process, or say which process has it.

    The embedded Derby metastore in ``<warehouse>/metastore_db`` admits one process at
    a time, so two dbt runs on one warehouse (a scheduled job and a manual run) would
    collide in it. The first process holds an exclusive lock on
    ``<warehouse>/.dbt_merge_session.lock`` (``flock``: the system drops it when the
    process ends, however it ends, so no stale lock survives a kill) and writes who it
    is into the file. A second process waits up to ``wait`` seconds, polling with
    back-off, then fails naming the holder.
    """
    import fcntl

    if warehouse in _held:
        return
    path = warehouse / WAREHOUSE_LOCK
    handle = path.open("a+")
    deadline = time.monotonic() + max(0.0, float(wait))
    delay = 0.2
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.seek(0)
                holder = handle.read().strip() or "a process that has not said who it is"
                handle.close()
                waited = f"after waiting {wait} s" if wait else "at once"
                raise DbtRuntimeError(
                    f"spark_session: the warehouse '{warehouse}' is in use by another "
                    f"process ({holder}); it admits one process at a time (its embedded "
                    f"Derby metastore), so this run stops {waited}, before anything is "
                    "written. Wait for that run to finish, or set `warehouse_wait` (seconds) "
                    "in the profile to wait for it. The lock goes with its process: "
                    f"nothing needs clearing by hand ({path})."
                ) from None
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 5.0)
    handle.seek(0)
    handle.truncate()
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    command = " ".join(Path(sys.argv[0]).name.split() + sys.argv[1:3])
    handle.write(f"pid {os.getpid()}, `{command}`, since {started}")
    handle.flush()
    _held[warehouse] = handle


_lock = threading.Lock()
_session: Any = None
_session_warehouse: str | None = None
_view_sessions: dict[int, Any] = {}


def get_session(settings: SessionSettings) -> Any:
    """The process's SparkSession, built on first use with ``settings``.

    Later calls (every connection, every Python model) only check that they ask
    for the warehouse the running session has.
    """
    global _session, _session_warehouse
    with _lock:
        if _session is None:
            from pyspark.sql import SparkSession

            settings = replace(settings, warehouse=prepare_warehouse(settings.warehouse))
            hold_warehouse(settings.warehouse, settings.warehouse_wait)
            running = SparkSession.getActiveSession()
            if running is None:
                running = _build_session(settings, resolve_conf(settings))
            _session = running
            _session_warehouse = running.conf.get(WAREHOUSE_KEY, None)
        wanted = settings.server_side_parameters.get(WAREHOUSE_KEY) or str(
            settings.warehouse.expanduser().resolve()
        )
        if _session_warehouse and _session_warehouse != wanted:
            raise DbtRuntimeError(
                f"spark_session: a SparkSession is already running in this process with "
                f"warehouse '{_session_warehouse}', and this profile asks for '{wanted}'. "
                "Static Spark settings cannot change inside one process: run dbt in a new "
                "process or point `warehouse` at the running one."
            )
        return _session


def _build_session(settings: SessionSettings, conf: dict[str, str]) -> Any:
    java = java_executable()
    major = java_major_version(java)
    if major is not None and major not in (11, 17, 21):
        logger.warning("spark_session: Java %s found at %s; Spark 3.5 is tested on 17", major, java)
    settings.log_dir.mkdir(parents=True, exist_ok=True)
    options = conf.get("spark.driver.extraJavaOptions", "")
    if "SharedArchiveFile" not in options and "ArchiveClassesAtExit" not in options:
        archive = class_archive.java_options(java, major)
        if archive:
            conf = {**conf, "spark.driver.extraJavaOptions": f"{options} {archive}".strip()}
    # Python workers (pandas functions such as dbt_merge.bin_packing's, UDFs) run the
    # interpreter that runs dbt, which has dbt_merge and pandas; PySpark's default is
    # whatever `python3` is first on PATH. A PYSPARK_PYTHON set by the user wins.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    if conf.get("spark.sql.catalogImplementation") == "hive":
        builder = builder.enableHiveSupport()
    try:
        return builder.getOrCreate()
    except Exception as exc:  # the JVM did not start: say why, briefly
        raise DbtRuntimeError(
            f"spark_session: Spark could not start ({short_error(exc)}). "
            f"Java: {java}. Spark's own log: {settings.log_dir / 'spark.log'}"
        ) from exc


def activate(session: Any) -> Any:
    """Make ``session`` the active one on this thread and return it.

    Spark resolves ``spark_catalog`` through the thread's active SQLConf
    (``CatalogManager.v2SessionCatalog``); dbt's worker threads have none, so a
    direct JVM call there would see Spark's built-in catalog, not Iceberg's.
    ``spark.sql()`` activates the session itself; everything else must call this.
    """
    session._jvm.org.apache.spark.sql.SparkSession.setActiveSession(session._jsparkSession)
    return session


def has_iceberg_extensions(session: Any) -> bool:
    return ICEBERG_EXTENSIONS in session.conf.get("spark.sql.extensions", "")


def view_session(session: Any) -> Any:
    """A twin of ``session`` without SQL extensions, for persistent-view DDL."""
    if not has_iceberg_extensions(session):
        return session
    with _lock:
        twin = _view_sessions.get(id(session))
        if twin is None:
            from pyspark.sql import SparkSession

            jvm = session._jvm
            jss = session._jsparkSession
            scala_none = getattr(getattr(jvm.scala, "None$"), "MODULE$")
            options = jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(
                jvm.java.util.HashMap()
            )
            # SparkSession's full constructor is private[sql] in Scala but public in
            # the bytecode (Spark 3.5): a new session state, the same SharedState
            # (SparkContext, metastore, cache) and no extensions.
            jtwin = jvm.org.apache.spark.sql.SparkSession(
                jss.sparkContext(),
                jvm.scala.Some(jss.sharedState()),
                scala_none,
                jvm.org.apache.spark.sql.SparkSessionExtensions(),
                options,
            )
            twin = SparkSession(session.sparkContext, jtwin)
            _view_sessions[id(session)] = twin
        return twin


_LEADING_COMMENTS = re.compile(r"^\s*(?:/\*.*?\*/\s*|--[^\n]*(?:\n|$)\s*)*", re.S)
_VIEW_DDL = re.compile(r"(?:create\s+(?:or\s+replace\s+)?view|drop\s+view|alter\s+view)\b", re.I)


def is_persistent_view_ddl(sql: str) -> bool:
    """True for CREATE [OR REPLACE] VIEW, ALTER VIEW and DROP VIEW (not temporary views)."""
    body = _LEADING_COMMENTS.sub("", sql, count=1)
    return bool(_VIEW_DDL.match(body))


def sql_literal(value: Any) -> str:
    """A Spark SQL literal for a seed value; quotes and backslashes are escaped."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, Decimal)):
        return str(value)
    if isinstance(value, float):
        return repr(value) if value == value and abs(value) != float("inf") else f"'{value}'"
    return string_literal(literal_text(value))


def literal_text(value: Any) -> str:
    """The text a seed value's string literal carries (timestamps to the microsecond,
    without their offset); the DataFrame path of seeds casts the same text."""
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def bind(sql: str, bindings: Sequence[Any]) -> str:
    """Substitute ``%s`` placeholders with escaped literals, in order."""
    parts = sql.split("%s")
    if len(parts) - 1 != len(bindings):
        raise DbtRuntimeError(
            f"spark_session: statement has {len(parts) - 1} placeholders but "
            f"{len(bindings)} values were bound"
        )
    out = [parts[0]]
    for value, rest in zip(bindings, parts[1:], strict=True):
        out.append(sql_literal(value))
        out.append(rest)
    return "".join(out)


def short_error(exc: BaseException) -> str:
    """The message of a Spark/JVM error without the Java stack trace."""
    java_exception = getattr(exc, "java_exception", None)
    if java_exception is not None:  # a raw Py4JJavaError
        try:
            return str(java_exception.toString())
        except Exception:  # the JVM is gone
            pass
    text = str(exc)
    kept: list[str] = []
    for line in text.splitlines():
        if line.strip().startswith("at ") or line.startswith("JVM stacktrace"):
            break
        kept.append(line)
    return "\n".join(kept).strip() or type(exc).__name__


_NODE_ID = re.compile(r'"node_id":\s*"([^"]+)"')


def statement_label(sql: str) -> str:
    """What the Spark UI and event log call a statement's jobs: the dbt node (from dbt's
    query comment) and the statement's start, blanks collapsed."""
    node = _NODE_ID.search(sql)
    start = " ".join(re.sub(r"/\*.*?\*/", " ", sql, flags=re.S).split())[:120]
    return f"{node.group(1) + ': ' if node else ''}{start}"


class SessionCursor:
    """A DB-API-like cursor over the shared SparkSession."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self._df: Any = None
        self._rows: list[Any] | None = None

    def execute(self, sql: str, bindings: Sequence[Any] | None = None) -> None:
        from pyspark.sql import DataFrame

        sql = sql.strip()
        if sql.endswith(";"):
            sql = sql[:-1]
        if bindings:
            sql = bind(sql, bindings)
        target = view_session(self._session) if is_persistent_view_ddl(sql) else self._session
        self._rows = None
        # names the jobs of this statement
        target.sparkContext.setJobDescription(statement_label(sql))
        try:
            # the JVM's SparkSession.sql, as PySpark's sql() calls it without arguments,
            # minus that call's lookup of the Java class for its (empty) argument
            # array: a class name py4j resolves by trying every imported package on
            # every jar, about 2 ms of each statement
            self._df = DataFrame(target._jsparkSession.sql(sql), target)
            # a query runs here, not at the fetch (a command already has): dbt times
            # execute for its "SQL status ... in N seconds", and a cursor of dbt-spark's
            # other adapters has run its statement when execute returns
            self._rows = self._df.collect()
        except Exception as exc:
            raise DbtRuntimeError(short_error(exc)) from None

    def fetchall(self) -> list[Any] | None:
        return self._rows

    def fetchone(self) -> Any | None:
        rows = self.fetchall()
        return rows.pop(0) if rows else None

    @property
    def description(self) -> list[tuple[Any, ...]]:
        if self._df is None:
            return []
        return [
            (f.name, f.dataType.simpleString(), None, None, None, None, f.nullable)
            for f in self._df.schema.fields
        ]

    def close(self) -> None:
        self._df = None
        self._rows = None
