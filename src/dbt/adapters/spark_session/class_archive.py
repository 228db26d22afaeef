"""A class-data-sharing archive of Spark's classes: every later JVM starts from it.

A dbt process on the ``spark_session`` adapter starts a JVM, and before its first
statement returns that JVM has loaded, verified and linked many thousands of classes of
Spark, Hive, Hadoop and Iceberg. The JVM can write those classes, parsed and verified,
into an archive at exit (``-XX:ArchiveClassesAtExit``, Java 13 and later) and map it
into every later JVM (``-XX:SharedArchiveFile``). Measured on this project's 2-core
machine, a session's start with its first three Iceberg statements: 27.2 and 28.9
CPU-seconds of the JVM without the archive, 22.4 and 20.3 with it (17.8 and 18.6 s of
wall time against 15.2 and 13.4); with the test suite's C1-only compiler 17.9 and 16.7
CPU-seconds against 11.7 and 11.0.

``dbt-merge-jars --class-archive`` (``make class-archive``, which ``make test`` runs)
builds the archive once, by running a short session over a scratch warehouse
(``build``); a session finds it by the key of its Java and its classpath
(``archive_path``) and uses it. The JVM checks the archive
itself: one of another Java or another classpath is refused, and the JVM then starts
as without it (its CDS log, which would say so on the console, is off). An archive is
an optimisation, never a requirement: without one (not built, or
``DBT_MERGE_CLASS_ARCHIVE=off``) everything runs as before.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from dbt.adapters.spark_session import jars

ARCHIVE_ENV = "DBT_MERGE_CLASS_ARCHIVE"  # "off": sessions start without the archive
# dynamic archives came with Java 13; Spark 3.5 runs on 11, 17 and 21
MIN_JAVA = 13
BUILD_TIMEOUT = 600  # seconds
TRAIN = f"import sys; from {__name__} import train; raise SystemExit(train(*sys.argv[1:3]))"
# what the build's session runs: the kinds of statement a dbt run sends (DDL, CTAS,
# inserts, MERGE, reads with joins and windows, views, the catalog's listings), so
# that the classes they load are in the archive
TRAINING = (
    "create database if not exists archive",
    "create table archive.t using iceberg as select id, cast(id % 7 as string) k from range(50)",
    "insert into archive.t select id + 50, 'x' from range(10)",
    "merge into archive.t t using (select id, 'y' k from range(5)) s on t.id = s.id "
    "when matched then update set t.k = s.k when not matched then insert *",
    "delete from archive.t where id = 3",
    "select k, count(*), max(id), row_number() over (order by k) from archive.t "
    "join (select id i from range(40)) r on r.i = id group by k order by k",
    "create or replace view archive.v as select * from archive.t where id < 10",
    "select * from archive.v",
    "show tables in archive",
    "show table extended in archive like '*'",
    "describe table extended archive.t",
    "show tblproperties archive.t",
    "select * from archive.t.snapshots",
    "create table archive.p using parquet as select * from archive.t",
    "drop view archive.v",
)


def archive_path(java: str) -> Path:
    """Where the archive of ``java`` and this environment's Spark classpath is kept:
    beside the jars (``jars.jars_dir()``), named by a key of the Java installation, the
    jars of PySpark and the pinned jars, so that a change of either needs a new one."""
    digest = hashlib.sha256()
    java_home = Path(os.path.realpath(java)).parent.parent
    for part in (java_home / "lib" / "server" / "libjvm.so", Path(os.path.realpath(java))):
        if part.is_file():
            stat = part.stat()
            digest.update(f"{part}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
            break
    for jar in sorted(_pyspark_jars().glob("*.jar")):
        digest.update(f"{jar.name}:{jar.stat().st_size}\n".encode())
    for jar in jars.ALL:
        digest.update(f"{jar.coordinates}:{jar.sha256}\n".encode())
    return jars.jars_dir().parent / "class-archive" / f"spark-{digest.hexdigest()[:16]}.jsa"


def _pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _wanted(major: int | None) -> bool:
    """Whether a Java of this major version (None: unknown) may have an archive here:
    13 or later, and ``DBT_MERGE_CLASS_ARCHIVE`` not off."""
    off = os.environ.get(ARCHIVE_ENV, "").lower() == "off"
    return not off and major is not None and major >= MIN_JAVA


def java_options(java: str, major: int | None) -> str:
    """The JVM options that start ``java`` from its archive: empty where there is none,
    the Java is older than MIN_JAVA (or unknown) or ``DBT_MERGE_CLASS_ARCHIVE`` is off."""
    if not _wanted(major):
        return ""
    path = archive_path(java)
    return f"-XX:SharedArchiveFile={path} -Xlog:cds*=off" if path.is_file() else ""


def ensure(java: str, major: int | None) -> Path | None:
    """The archive of ``java``, built now if it is missing (None where a Java older than
    MIN_JAVA or the setting rules one out). A failed build leaves nothing behind and
    raises: the caller says so, and sessions start without an archive."""
    if not _wanted(major):
        return None
    path = archive_path(java)
    if not path.is_file():
        build(path)
    return path


def build(path: Path) -> None:
    """Run the TRAINING statements in a session of their own (a process, so that its
    JVM ends and writes the archive) over a scratch warehouse; keep the archive at
    ``path`` only when it is complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    with tempfile.TemporaryDirectory(prefix="dbt_merge_class_archive_") as scratch:
        env = {**os.environ, ARCHIVE_ENV: "off"}
        done = subprocess.run(
            [sys.executable, "-c", TRAIN, str(part), scratch],
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
    try:
        if done.returncode != 0 or not part.is_file() or part.stat().st_size == 0:
            said = (done.stderr or done.stdout).strip().splitlines()[-4:]
            raise RuntimeError(
                f"the class archive's training session failed (exit {done.returncode}): "
                + " ".join(line.strip() for line in said)
            )
        os.replace(part, path)  # a whole archive or none
    finally:
        part.unlink(missing_ok=True)


def train(part: str, scratch: str) -> int:
    """The training session of ``build`` (its process): the archive goes to ``part``."""
    from dbt.adapters.spark_session import session as sessions

    folder = Path(scratch)
    settings = sessions.SessionSettings(
        warehouse=folder / "warehouse",
        log_dir=folder / "logs",
        server_side_parameters={
            "spark.master": "local[2]",
            "spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={part} -Xlog:cds*=off",
        },
    )
    spark = sessions.get_session(settings)
    for statement in TRAINING:
        sessions.SessionCursor(spark).execute(statement)
    gateway = spark.sparkContext._gateway.proc  # the JVM (spark-submit execs java)
    spark.stop()
    # the JVM writes the archive as it exits, which it does when its input closes: wait
    # for it, or the archive would be read before it is whole
    gateway.stdin.close()
    return gateway.wait(timeout=BUILD_TIMEOUT)
