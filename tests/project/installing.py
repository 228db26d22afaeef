"""A project that installs dbt_merge with `packages: - local: ...`, as the project
tests write it."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.conftest import ROOT

# The JVM of a short dbt process a test starts (a few statements on a handful of rows):
# the C1 compiler alone and the serial collector. Measured on this 2-core machine, a
# process's start and first statements take about a fifth less (the shared session of
# the test run compiles with C1 alone too, tests/conftest.py). C1 alone has a code cache
# of 48 MB by default, which a long process of the suite (the Delta modules' runner)
# fills: the JVM then stops compiling, and a method handle that needs new code fails
# (`java.lang.InternalError: ... MethodHandle.linkToStatic`, seen in a Python model).
SHORT_JVM = {
    "spark.driver.extraJavaOptions": (
        "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=512m"
    )
}


def write_installing_project(
    path: Path,
    name: str,
    warehouse: Path,
    profile: str | None = None,
    file_format: str = "iceberg",
    **target: object,
) -> None:
    """dbt_project.yml (the models' `file_format`, Iceberg by default), packages.yml and
    a `spark_session` profile (named `profile`, by default `name`) whose dev target
    writes to `warehouse`; `target` adds profile fields (`table_format="delta"` for
    Delta tables)."""
    profile = profile or name
    (path / "models").mkdir(parents=True, exist_ok=True)
    project = {
        "name": name,
        "version": "1.0",
        "config-version": 2,
        "profile": profile,
        "models": {name: {"+file_format": file_format}},
        "flags": {"send_anonymous_usage_stats": False},
    }
    (path / "dbt_project.yml").write_text(yaml.safe_dump(project, sort_keys=False))
    (path / "packages.yml").write_text(f"packages:\n  - local: {ROOT}\n")
    dev = {"type": "spark_session", "method": "session", "schema": name}
    dev.update(warehouse=str(warehouse), **target)
    profiles = {profile: {"target": "dev", "outputs": {"dev": dev}}}
    (path / "profiles.yml").write_text(yaml.safe_dump(profiles, sort_keys=False))
