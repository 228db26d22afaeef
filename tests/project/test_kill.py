"""`kill -9` of a real `dbt run` in the middle of an upsert (README "Guarantees"), on an
Iceberg and on a Delta table.

A project that installs dbt_merge has two identical upsert models with provenance:
`killed` and `twin`. After a first run of both, `killed` runs the second batch alone
twice, and each time its process group (dbt and its JVM) is killed with SIGKILL at a
named statement: inside its MERGE (each read of the batch first hashes 20M numbers,
seconds of work, and the kill comes a second after the MERGE starts: it cannot have
committed, and the test would see it if it had), then right as its provenance insert
starts. After each kill the table is readable at its old or its new snapshot; the
second run's MERGE commits, so the first left the warehouse free; and the next plain
run of both models leaves `killed` equal to `twin`, which never failed: the same rows
and the same provenance events.
On Delta a snapshot is a table version (a commit file of its `_delta_log`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import DBT, process_env
from tests.project.installing import SHORT_JVM, write_installing_project

BATCH = """
{{ config(materialized='view') }}
{% set rows = {
    '1': "(1, 1, 'a', false), (2, 1, 'b', false), (3, 1, 'c', false)",
    '2': "(1, 2, 'a2', false), (2, 2, null, true), (4, 1, 'd', false)",
} %}
-- STALL_ROWS: each query that reads the batch first hashes this many numbers (a MERGE
-- source must be deterministic, so no sleep). The batch and the stall are environment
-- variables, not --vars: a change of vars makes dbt parse the whole project again (the
-- package's 700 macros) in every process, a changed env_var only this file
select id, ts, name, is_deleted
from values {{ rows[env_var('BATCH')] }} as t(id, ts, name, is_deleted)
cross join (
    select count(distinct hash(id) % 7) as stall from range({{ env_var('STALL_ROWS', '0') }})
) where stall >= 0
"""

# what each read of the batch hashes in the run killed inside its MERGE
STALL_ROWS = 20_000_000

UPSERT = (
    "{{ config(materialized='incremental', incremental_strategy='upsert',"
    " unique_key='id', precombine_key='ts', delete_column='is_deleted',"
    " provenance=true) }}\nselect * from {{ ref('batch') }}"
)


class Project:
    def __init__(self, path: Path, table_format: str):
        self.path = path
        self.warehouse = path / "warehouse"
        # Iceberg's hadoop catalog: <warehouse>/<schema>/<table>; Delta: the metastore's
        self.schema_dir = self.warehouse / ("killing.db" if table_format == "delta" else "killing")
        write_installing_project(
            path,
            "killing",
            self.warehouse,
            file_format=table_format,
            table_format=table_format,
            server_side_parameters={
                "spark.master": "local[1]",
                "spark.driver.memory": "1g",
                "spark.sql.shuffle.partitions": "1",
                **SHORT_JVM,
            },
        )
        (path / "models" / "batch.sql").write_text(BATCH)
        (path / "models" / "killed.sql").write_text(UPSERT)
        (path / "models" / "twin.sql").write_text(UPSERT)
        self.args = ["--project-dir", str(path), "--profiles-dir", str(path)]
        self.log = path / "logs" / "dbt.log"

    def dbt(self, *command: str, **env: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [DBT, *command, *self.args],
            capture_output=True,
            text=True,
            env=process_env(**env),
            timeout=600,
        )
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        return proc

    def run(self, batch: int, *select: str) -> None:
        selection = ["--select", *select] if select else []
        self.dbt("run", *selection, BATCH=str(batch))

    def kill_at(self, batch: int, statement: str, stall_rows: int, after: float) -> str:
        """Run `killed` (and the batch view it reads, which this batch and stall make
        anew: a view's SQL is rendered when it is created); SIGKILL its process group
        `after` seconds after the log shows `statement` (a regular expression). Returns
        the log's tail for messages."""
        start = self.log.stat().st_size if self.log.exists() else 0
        proc = subprocess.Popen(
            [DBT, "run", "--select", "batch", "killed", *self.args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=process_env(BATCH=str(batch), STALL_ROWS=str(stall_rows)),
            start_new_session=True,
        )
        pattern = re.compile(statement, re.I)
        deadline = time.monotonic() + 300
        try:
            while True:
                assert proc.poll() is None, f"the run ended before `{statement}`"
                assert time.monotonic() < deadline, f"no `{statement}` in the log"
                text = self.log.read_text(errors="replace")[start:] if self.log.exists() else ""
                if pattern.search(text):
                    break
                time.sleep(0.05)
            time.sleep(after)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        assert proc.returncode == -signal.SIGKILL
        return text


def snapshots(spark, table: Path, fmt: str) -> list[int]:
    """The table's snapshots (Iceberg) or versions (Delta), oldest first."""
    if fmt == "delta":
        return sorted(int(commit.stem) for commit in (table / "_delta_log").glob("*.json"))
    return [
        r.snapshot_id
        for r in spark.read.format("iceberg")
        .load(f"{table}#snapshots")
        .orderBy("committed_at")
        .collect()
    ]


def rows(spark, table: Path, fmt: str) -> list[tuple]:
    return sorted(tuple(r) for r in spark.read.format(fmt).load(str(table)).collect())


def events(spark, table: Path, fmt: str) -> list[tuple]:
    frame = spark.read.format(fmt).load(f"{table}__provenance")
    return sorted(
        tuple(r) for r in frame.select("event_type", "record_key", "old_row", "new_row").collect()
    )


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_a_killed_run_loses_nothing(spark, tmp_path, fmt):
    project = Project(tmp_path / "p", fmt)
    project.dbt("deps")
    project.run(1)
    killed = project.schema_dir / "killed"
    twin = project.schema_dir / "twin"

    # 1. inside the MERGE: its source is still hashing, so it has not committed
    before = snapshots(spark, killed, fmt)
    # (the upsert's key check reads the batch before its MERGE, and pays the stall too:
    # 200M numbers took 73 s there, 20M take seconds)
    project.kill_at(2, r"merge into\s+\S*killed", stall_rows=STALL_ROWS, after=1.0)
    assert snapshots(spark, killed, fmt) == before, "killed before its commit: the old snapshot"
    assert rows(spark, killed, fmt) == rows(spark, twin, fmt), "readable, as it was"

    # 2. the same batch again, killed as its provenance insert starts: the warehouse was
    # free (no stale lock), so its MERGE committed; its events may not have
    log = project.kill_at(2, r"insert into\s+\S*killed__provenance", stall_rows=0, after=0.0)
    assert "merge into" in log.lower()
    after = snapshots(spark, killed, fmt)
    assert after[: len(before)] == before and len(after) == len(before) + 1, (
        "the MERGE committed one snapshot"
    )
    assert rows(spark, killed, fmt) != rows(spark, twin, fmt), "batch 2 is in killed alone"

    # the next plain run of both: killed records the change it has no events of (its
    # MERGE's), twin takes batch 2 as a run that never failed does
    project.run(2)
    assert rows(spark, killed, fmt) == rows(spark, twin, fmt)
    assert events(spark, killed, fmt) == events(spark, twin, fmt), "no event lost, none doubled"
    assert [r[:2] for r in events(spark, killed, fmt)] == [
        ("CREATE", "1"),
        ("CREATE", "2"),
        ("CREATE", "3"),
        ("CREATE", "4"),
        ("DELETE", "2"),
        ("UPDATE", "1"),
    ]
