"""The JVM connectors of the ``spark_session`` adapter, pinned and fetched from Maven Central.

Spark finds its table formats in jars: Iceberg's runtime, and Delta Lake's
``delta-spark`` with its ``delta-storage``. They come from one place, a Maven
repository (Maven Central unless ``DBT_MERGE_MAVEN_REPOSITORY`` names a mirror),
at the versions pinned below, each checked against its SHA-256 before it is kept.
They are fetched once into the virtual environment (``<venv>/share/dbt_merge/jars``,
or ``DBT_MERGE_JARS``): ``make install`` runs ``dbt-merge-jars``, and a session
that finds a jar missing fetches it then, so runs after that are offline. A fetch says
so in one line: through dbt's adapter logger inside dbt (the console and
``logs/dbt.log``), on stderr from ``dbt-merge-jars``.

The benchmarks also measure Apache Hudi's own upserts (``bench/upsert_bench.py``): its
Spark bundle is pinned here as well, in ``BENCH``, apart from ``ALL``. Only
``dbt-merge-jars --bench`` (``make install-bench``) and the benchmarks fetch it; no
session of the adapter asks for it, so ``make install`` and ``make test`` never do.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError

# a session starts inside a dbt command: dbt's events reach its console and logs/dbt.log,
# Python's logging does not
logger = AdapterLogger("spark_session")

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
REPOSITORY_ENV = "DBT_MERGE_MAVEN_REPOSITORY"
JARS_DIR_ENV = "DBT_MERGE_JARS"
DOWNLOAD_TIMEOUT = 120  # seconds per jar


@dataclass(frozen=True)
class Jar:
    """One pinned Maven artifact: its coordinates and the SHA-256 of its jar."""

    group: str
    artifact: str
    version: str
    sha256: str

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    def url(self, repository: str) -> str:
        group_path = self.group.replace(".", "/")
        return (
            f"{repository.rstrip('/')}/{group_path}/{self.artifact}/{self.version}/{self.file_name}"
        )


ICEBERG = Jar(
    "org.apache.iceberg",
    "iceberg-spark-runtime-3.5_2.12",
    "1.10.2",
    "c562d482dcd16b666e808b755469fbc4b2604284b41622c9d87e2c02b7cc6c5f",
)
# Delta Lake 3.3 is the newest line for Spark 3.5 (Delta 4 needs Spark 4); its other
# runtime dependencies (scala-library, antlr4-runtime 4.9.3) ship with PySpark.
DELTA = (
    Jar(
        "io.delta",
        "delta-spark_2.12",
        "3.3.3",
        "4912bf902a1c453aba3bd838ff212dedd357155212f9bb37a6b47d97f2827ebc",
    ),
    Jar(
        "io.delta",
        "delta-storage",
        "3.3.3",
        "45ad193053fd30cebe6d9ab1889873cde39b223a0f210e00ebee8b6642476901",
    ),
)
ALL = (ICEBERG, *DELTA)
# Apache Hudi 1.0.2's bundle for Spark 3.5 (Scala 2.12), for the benchmarks only: the
# upsert benchmark and `make test-long`'s comparison run Hudi's own upserts beside
# dbt_merge's. Not in ALL: the adapter never loads it.
HUDI = Jar(
    "org.apache.hudi",
    "hudi-spark3.5-bundle_2.12",
    "1.0.2",
    "2c2ab65a11e91265e4b7346f954448c46df52d66fb72f52dad83767b621deae8",
)
BENCH = (HUDI,)


def jars_dir() -> Path:
    """Where the jars are kept: ``DBT_MERGE_JARS``, else the venv's ``share/dbt_merge/jars``."""
    configured = os.environ.get(JARS_DIR_ENV)
    return (
        Path(configured).expanduser()
        if configured
        else Path(sys.prefix) / "share" / "dbt_merge" / "jars"
    )


def repository() -> str:
    return os.environ.get(REPOSITORY_ENV) or MAVEN_CENTRAL


def jar_paths(jars: Iterable[Jar], say: Callable[[str], None] = logger.info) -> list[str]:
    """Local paths of ``jars``, fetching those that are missing (``say`` tells of each
    fetch: dbt's adapter logger unless told otherwise)."""
    return [str(ensure(jar, say)) for jar in jars]


def ensure(jar: Jar, say: Callable[[str], None] = logger.info) -> Path:
    """The local path of ``jar``, downloaded and checked first if it is not there yet;
    ``say`` gets the one line that tells of a fetch."""
    folder = jars_dir()
    path = folder / jar.file_name
    if path.is_file():
        return path
    url = jar.url(repository())
    say(f"dbt_merge: fetching {jar.coordinates} from {url} into {folder} (once)")
    part = folder / f".{jar.file_name}.{os.getpid()}.part"
    digest = hashlib.sha256()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response:
            with part.open("wb") as out:
                while chunk := response.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
    except (OSError, urllib.error.URLError) as exc:
        part.unlink(missing_ok=True)
        raise DbtRuntimeError(
            f"dbt_merge: the jar {jar.coordinates} is not in {folder} and could not be "
            f"fetched from {url}: {getattr(exc, 'reason', None) or exc}. Connect to the "
            f"repository, point {REPOSITORY_ENV} at a Maven mirror you can reach, or put "
            f"{jar.file_name} into {folder} (or the folder {JARS_DIR_ENV} names)."
        ) from exc
    if digest.hexdigest() != jar.sha256:
        part.unlink(missing_ok=True)
        raise DbtRuntimeError(
            f"dbt_merge: {url} did not give the pinned {jar.coordinates}: its SHA-256 is "
            f"{digest.hexdigest()}, expected {jar.sha256}. Nothing was kept; check "
            f"{REPOSITORY_ENV} ({repository()})."
        )
    os.replace(part, path)  # whole jars only: a reader never sees half of one
    return path


def main(argv: list[str] | None = None) -> int:
    """``dbt-merge-jars``: fetch every pinned jar that is missing and list them all; with
    ``--bench`` the benchmarks' jars (``BENCH``: Hudi's bundle) as well; with
    ``--class-archive`` also build the class archive of this environment's Java if it is
    missing (``class_archive``: about a minute once, then every session starts faster)."""
    import argparse

    parser = argparse.ArgumentParser(prog="dbt-merge-jars", description=main.__doc__)
    parser.add_argument(
        "--class-archive",
        action="store_true",
        help="also build the class-data-sharing archive sessions start from",
    )
    parser.add_argument(
        "--bench",
        action="store_true",
        help="also the benchmarks' jars (Apache Hudi's Spark bundle), which sessions never load",
    )
    args = parser.parse_args(argv)
    wanted = (*ALL, *BENCH) if args.bench else ALL
    try:
        for path in jar_paths(wanted, say=lambda line: print(line, file=sys.stderr)):
            print(path)
    except DbtRuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    if args.class_archive:
        from dbt.adapters.spark_session import class_archive, session

        try:
            java = session.java_executable()
            archive = class_archive.ensure(java, session.java_major_version(java))
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"dbt_merge: no class archive was built: {exc}", file=sys.stderr)
            return 1
        print(archive or f"dbt_merge: no class archive for {java} (Java 13 or later needed)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
