"""Run only by tests/project/test_workers.py, as a pytest run of its own on two workers:
each test builds model `same_name` in schema `probe` with dbt in its worker's process,
waits until the other worker has built it too, and reads its own table back."""

from __future__ import annotations

import os
import time
from pathlib import Path

from dbt.cli.main import dbtRunner

from tests.conftest import LOG_DIR, RUN_DIR, SPARK_SETTINGS, WAREHOUSE
from tests.project.installing import write_installing_project

MEETING = Path(os.environ.get("DBT_MERGE_PROBE_DIR", RUN_DIR / "probe"))
WAIT = int(os.environ.get("DBT_MERGE_PROBE_WAIT", "300"))  # seconds for the other worker's build


def built_by_me(spark) -> None:
    """Build `probe.same_name` (this worker's id in it), meet the other worker, read it."""
    worker = os.environ["PYTEST_XDIST_WORKER"]
    project = RUN_DIR / "probe_project"
    write_installing_project(
        project, "probe", WAREHOUSE, log_dir=str(LOG_DIR), server_side_parameters=SPARK_SETTINGS
    )
    (project / "packages.yml").unlink()  # nothing of dbt_merge is needed
    (project / "models" / "same_name.sql").write_text(
        f"{{{{ config(materialized='table') }}}}\nselect '{worker}' as built_by"
    )
    args = ["--project-dir", str(project), "--profiles-dir", str(project)]
    result = dbtRunner().invoke(["run", *args, "--target-path", str(project / "target")])
    assert result.success, result.exception
    (MEETING / f"{worker}.built").write_text(str(WAREHOUSE))
    deadline = time.monotonic() + WAIT
    while len(list(MEETING.glob("*.built"))) < 2:
        assert time.monotonic() < deadline, "the other worker did not build in time"
        time.sleep(0.5)
    assert [tuple(r) for r in spark.sql("select * from probe.same_name").collect()] == [(worker,)]


def test_a(spark):
    built_by_me(spark)


def test_b(spark):
    built_by_me(spark)
