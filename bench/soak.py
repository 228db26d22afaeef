"""`make soak` (issue #74): a week of scheduled runs with crashes.

A seeded sequence of deliveries reaches a project that installs dbt_merge and holds all
four families: an entity merge that follows the change (records added, changed so that
entities join and split, flagged deleted, hard-deleted), three upserts (copy-on-write,
merge-on-read with inline compaction, merge-on-read compacted by the scheduled
`execute_upsert_compaction`) fed batches with duplicate keys, late rows and deletes, bin
packing with pending bins carried between runs, a defragment whose fragments arrive
over several runs, and an auto-merge plan executed (`execute_auto_merge`) on a table
that every delivery appends to.

Two warehouses get the same deliveries and the same commands, one command at a time:
the twin first, which never fails (its wall time is the command's expected duration),
then the soaked one, whose runs are killed in a seeded share of the deliveries: SIGKILL
of the dbt process group (dbt and its JVM) at a random moment within the expected
duration, sometimes twice in a row. After a kill the same command runs again, as a
scheduled job would, until it succeeds; a retry that fails is a finding. After every
delivery every table of both warehouses is compared (rows, provenance and events
tables, entity ids), except the columns that name a run, a time or a file (IGNORED).

Each delivery's inputs are JSON lines files of one folder that both projects read
(views over `text.<file>`): the project's files never change, so no delivery makes dbt
parse anything again. The comparison runs in a process of its own (one Spark JVM at a
time).

    .venv/bin/python bench/soak.py --format iceberg --deliveries 30 [--seed N] [--keep]

The report is `<root>/report.jsonl` (one line per delivery, then a summary); the root
folder /tmp/soak-<format>-<seed>-* holds both warehouses and is deleted when the soak
passes, unless --keep.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import conftest  # noqa: E402
from tests.conftest import DBT, process_env  # noqa: E402
from tests.entity_records import DATASETS, EntityRecords  # noqa: E402
from tests.project.installing import SHORT_JVM, write_installing_project  # noqa: E402

# tests.conftest makes the test run's folder when imported; the soak has no use for it
shutil.rmtree(conftest.RUN_DIR, ignore_errors=True)

NAME = "soak"
KILL_SHARE = 0.25  # of the deliveries: one command of theirs is killed
TWICE_SHARE = 1 / 3  # of the killed deliveries: the first retry is killed too
COMPACTION_SHARE = 0.3  # of the deliveries: the scheduled upsert compaction runs after
AUTO_MERGE_SHARE = 0.25  # of the deliveries: execute_auto_merge runs after
COLLISION_SHARE = 0.15  # of the deliveries (none killed): a second run starts meanwhile
RETRIES = 3  # runs of a killed command that are not killed, before the soak gives up
TIMEOUT = 900  # seconds of one dbt command
REFUSED = "is in use by another process"  # the warehouse lock's refusal (session.py)

# Columns that name a run, a time, a snapshot or a file, not compared: a twin that ran
# the same deliveries has other values there even without a kill.
IGNORED = {
    # every provenance event: the dbt run that recorded it and when (_provenance_stamp_sql)
    "invocation_id": "the dbt invocation that recorded the event",
    "recorded_at": "when the event was recorded",
    # upsert provenance: the Iceberg snapshot id (Delta version) the change produced
    "table_version": "an Iceberg snapshot id or Delta version",
    # the entity merge's state: the batch a run wrote (its time in microseconds), the
    # edges snapshot the digest describes
    "_batch": "the time of the run that wrote the state row",
    "edges_snapshot": "an Iceberg snapshot id or Delta version",
    # auto-merge plan and events: the planned table's snapshot, its files
    "snapshot_id": "an Iceberg snapshot id or Delta version",
    "range_id": "a data file's name",
    "file_paths": "data files' paths",
}
# Columns of some tables only: the names and bytes of data files. A file rewritten by
# another run holds the same rows in another order, a few bytes more or less.
IGNORED_IN = {
    "events_merge_plan": {
        "size_bytes": "bytes of a data file",
        "merge_size_bytes": "bytes of the planned merge's files",
        "explanation": "names the bytes of the merge's files",
    },
    "auto_merge_provenance": {
        "parent_ids": "data files' paths",
        "child_ids": "data files' paths",
        "rewritten_bytes": "bytes of the rewritten files",
    },
}
# A run's scratch tables (replaced by the next run that needs them, like dbt's
# __dbt_tmp): a killed run can leave one behind. Listed in the report, not compared.
SCRATCH = ("__dbt_tmp", "__dbt_merge_buckets", "__dbt_merge_closure_", "__dbt_merge_digest_plan")


# -- the project ----------------------------------------------------------------------

ENTITY_MERGE = {
    "datasets": ["ent_a a", "ent_b b", "ent_c c"],
    "equality_sets": [["a.email", "b.email"]],
    "equality": [["eq", "b.f2", ["lower", "c.f3"]]],
    "identity": "composite",
    "strategy": "compact",
    "deleted_column": "gone",
}

# the inputs: file -> Spark DDL of one JSON line
INPUTS = {
    "ent_a": "_id string, email string, score int, gone boolean",
    "ent_b": "_id string, email string, f2 string, tags array<string>",
    "ent_c": "_id string, f3 string, score int, gone boolean",
    "orders": (
        "order_id string, customer_id string, status string, amount double,"
        " updated_at timestamp, ingested_at timestamp, is_deleted boolean"
    ),
    "messages": "message_id string, customer_id string, size_bytes int, arrived_at timestamp",
    "fragments": (
        "fragment_id string, upload_id string, fragment_count int, fragment_index int,"
        " size_bytes int, arrived_at timestamp"
    ),
    "events": "event_id bigint, event_date date, customer_id string, amount double",
    "clock": "now string",
}


def read_input(folder: Path, name: str) -> str:
    columns = ", ".join(f"r.{c.split()[0]}" for c in INPUTS[name].split(", "))
    return (
        f"select {columns}\nfrom (\n    select from_json(value, '{INPUTS[name]}') as r\n"
        f"    from text.`{folder / (name + '.jsonl')}`\n) as lines"
    )


UPSERT = (
    "{{{{ config(materialized='incremental', incremental_strategy='upsert',"
    " unique_key='order_id', precombine_key='updated_at', arrival_column='ingested_at',"
    " delete_column='is_deleted', provenance=true{extra}) }}}}\n"
    "select * from {{{{ ref('orders_batch') }}}}\n"
)

COMPONENTS = """from dbt_merge.entity_merge import entity_components


def model(dbt, session):
    dbt.config(materialized="incremental", incremental_strategy="entity_state")
    previous = dbt.this if dbt.is_incremental else None
    return entity_components(dbt.ref("ent_edges"), previous=previous)
"""

BUNDLES = """from datetime import UTC, datetime, timedelta

from dbt_merge.bin_packing import bin_pack


def model(dbt, session):
    dbt.config(materialized="incremental", incremental_strategy="merge", unique_key="bin_id")
    clock = dbt.ref("soak_clock").first()["now"]
    return bin_pack(
        dbt.ref("messages"),
        id_column="message_id",
        size_column="size_bytes",
        arrival_column="arrived_at",
        correlation_column="customer_id",
        min_entries=3,
        max_entries=5,
        min_bytes=1000,
        max_bytes=4000,
        max_bin_age=timedelta(minutes=30),
        max_bins=4,
        now=datetime.fromisoformat(clock).replace(tzinfo=UTC),
        previous=session.table(str(dbt.this)) if dbt.is_incremental else None,
        model_name="message_bundles",
    )
"""

REASSEMBLY = """from datetime import UTC, datetime, timedelta

from dbt_merge.bin_packing import defragment


def model(dbt, session):
    dbt.config(materialized="incremental", incremental_strategy="merge", unique_key="bin_id")
    clock = dbt.ref("soak_clock").first()["now"]
    return defragment(
        dbt.ref("fragments"),
        id_column="fragment_id",
        arrival_column="arrived_at",
        identifier_column="upload_id",
        count_column="fragment_count",
        index_column="fragment_index",
        size_column="size_bytes",
        max_bin_age=timedelta(minutes=30),
        now=datetime.fromisoformat(clock).replace(tzinfo=UTC),
        previous=session.table(str(dbt.this)) if dbt.is_incremental else None,
        model_name="upload_reassembly",
    )
"""

PLAN = """from dbt_merge.auto_merge import plan_table


def model(dbt, session):
    dbt.config(materialized="table")
    return plan_table(
        session, dbt.ref("events"), model_name=dbt.this.identifier,
        config=dbt.config.get("auto_merge"),
    )
"""

PLAN_CONFIG = {
    "version": 2,
    "models": [
        {
            "name": "events_merge_plan",
            "config": {
                "auto_merge": {
                    "sort_column": "event_date",
                    "threshold": 0.5,
                    "split_threshold": 32768,
                    "file_max": 6,
                    "now": "2030-01-01T00:00:00",
                }
            },
        }
    ],
}


def models(inputs: Path) -> dict[str, str]:
    """The soak project's models (file name -> text)."""
    view = "{{ config(materialized='view') }}\n"
    table = "{{ config(materialized='table') }}\n"
    found = {
        # entity merge, following the change
        **{f"ent_{d}.sql": table + read_input(inputs, f"ent_{d}") for d in "abc"},
        "ent_edges.sql": (
            "{{ config(materialized='incremental', incremental_strategy='entity_state') }}\n"
            "{{ dbt_merge.equality_edges('people') }}\n"
        ),
        "ent_components.py": COMPONENTS,
        "people.sql": (
            "{{ config(materialized='incremental', incremental_strategy='merge',"
            " unique_key='_id') }}\n"
            "{{ dbt_merge.merge_entities('people', ref('ent_components')) }}\n"
        ),
        "people_provenance.sql": (
            "{{ config(materialized='incremental', incremental_strategy='append') }}\n"
            "{{ dbt_merge.entity_provenance('people', ref('people')) }}\n"
        ),
        # upserts
        "orders_batch.sql": view + read_input(inputs, "orders"),
        "orders_cow.sql": UPSERT.format(extra=""),
        "orders_mor.sql": UPSERT.format(
            extra=", table_type='merge_on_read', inline_compaction={'delete_files': 2}"
        ),
        "orders_mor_sched.sql": UPSERT.format(extra=", table_type='merge_on_read'"),
        # bin packing and defragment, the delivery's clock
        "soak_clock.sql": view + read_input(inputs, "clock"),
        "messages.sql": view + read_input(inputs, "messages"),
        "message_bundles.py": BUNDLES,
        "message_bundles_provenance.sql": (
            "{{ config(materialized='incremental', incremental_strategy='append') }}\n"
            "{{ dbt_merge.bin_provenance(ref('message_bundles')) }}\n"
        ),
        "fragments.sql": view + read_input(inputs, "fragments"),
        "upload_reassembly.py": REASSEMBLY,
        "upload_reassembly_provenance.sql": (
            "{{ config(materialized='incremental', incremental_strategy='append') }}\n"
            "{{ dbt_merge.bin_provenance(ref('upload_reassembly')) }}\n"
        ),
        # auto-merge: a table every delivery appends to (an upsert of new keys, so a
        # retried run appends nothing twice), its plan
        "events_batch.sql": view + read_input(inputs, "events"),
        "events.sql": (
            "{{ config(materialized='incremental', incremental_strategy='upsert',"
            " unique_key='event_id', merge_mode='commit_time_ordering') }}\n"
            "select * from {{ ref('events_batch') }}\n"
        ),
        "events_merge_plan.py": PLAN,
        "events_merge_plan.yml": yaml.safe_dump(PLAN_CONFIG, sort_keys=False),
    }
    return found


class Project:
    """One warehouse and the project that writes it (the twin's or the soaked one)."""

    def __init__(self, path: Path, inputs: Path, table_format: str, logs: Path):
        self.path = path
        self.table_format = table_format
        self.warehouse = path / "warehouse"
        self.schema_dir = self.warehouse / (f"{NAME}.db" if table_format == "delta" else NAME)
        self.logs = logs
        write_installing_project(
            path,
            NAME,
            self.warehouse,
            file_format=table_format,
            table_format=table_format,
            threads=2,
            log_dir=str(path / "logs"),
            server_side_parameters={
                "spark.master": "local[2]",
                "spark.driver.memory": "2g",
                "spark.sql.shuffle.partitions": "1",
                **SHORT_JVM,
            },
        )
        project = yaml.safe_load((path / "dbt_project.yml").read_text())
        project["vars"] = {"dbt_merge": {"entity_merges": {"people": ENTITY_MERGE}}}
        (path / "dbt_project.yml").write_text(yaml.safe_dump(project, sort_keys=False))
        for name, text in models(inputs).items():
            (path / "models" / name).write_text(text)
        self.args = ["--project-dir", str(path), "--profiles-dir", str(path)]

    def start(self, command: list[str], log: Path) -> subprocess.Popen:
        """A dbt command in a process group of its own (dbt and its JVM)."""
        handle = log.open("w")
        try:
            return subprocess.Popen(
                [DBT, *command, *self.args],
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=process_env(),
                start_new_session=True,
            )
        finally:
            handle.close()


def wait_group(pgid: int) -> None:
    """Until no process of the group is left (the JVM may outlive dbt by a moment)."""
    for _ in range(200):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    wait_group(proc.pid)


# -- the deliveries -------------------------------------------------------------------

EMAILS = [f"e{i}" for i in range(10)]
CODES = ["x", "y", "z", "w", "v"]
CUSTOMERS = [f"c{i}" for i in range(1, 7)]
START = dt.datetime(2026, 11, 1, 8, 0, 0)
DELIVERY_EVERY = dt.timedelta(minutes=10)


def stamp(moment: dt.datetime) -> str:
    return moment.isoformat(sep=" ")


class Deliveries:
    """Every family's inputs, changed one delivery at a time (all from one seed)."""

    def __init__(self, seed: int):
        self.random = random.Random(seed)
        self.number = 0
        self.entity = EntityRecords(self.random, emails=EMAILS, codes=CODES)
        self.orders: dict[str, dt.datetime] = {}  # key -> its latest updated_at
        self.messages: list[dict] = []
        self.fragments: list[dict] = []
        self.waiting: list[list[dict]] = []  # fragments of uploads still to arrive
        self.uploads = 0
        self.kinds = self.entity.kinds

    def count(self, kind: str, n: int = 1) -> None:
        self.kinds[kind] += n

    @property
    def clock(self) -> dt.datetime:
        return START + self.number * DELIVERY_EVERY

    # entity merge: whole datasets, a few records changed each time (entities join and
    # split as emails and codes change)
    def _entity_delivery(self) -> None:
        if self.number == 1:
            for dataset in DATASETS:
                for _ in range(12):
                    self.entity.insert(dataset)
            self.count("new record", 36)
            return
        self.entity.random_delivery(least=2, most=7)

    # upserts: a batch with duplicate keys, late rows, deletes
    def _orders(self) -> list[dict]:
        pick = self.random
        rows = []
        arrival = self.clock
        for _ in range(pick.randrange(20, 60)):
            known = sorted(self.orders)
            if known and pick.random() < 0.6:
                key = pick.choice(known)
            else:
                key = f"o{pick.randrange(1, 400)}"
            latest = self.orders.get(key, self.clock - dt.timedelta(days=1))
            kind = pick.random()
            is_deleted = False
            if key in self.orders and kind < 0.15:
                updated_at = latest - dt.timedelta(seconds=pick.randrange(1, 3600))
                self.count("late row")
            elif key in self.orders and kind < 0.3:
                is_deleted = True
                updated_at = latest + dt.timedelta(seconds=pick.randrange(1, 600))
                self.count("delete")
            else:
                updated_at = latest + dt.timedelta(seconds=pick.randrange(1, 600))
            if not is_deleted or updated_at > latest:
                self.orders[key] = max(latest, updated_at)
            if is_deleted:
                self.orders.pop(key, None)
            if any(r["order_id"] == key for r in rows):
                self.count("duplicate key")
            arrival += dt.timedelta(seconds=1)
            rows.append(
                {
                    "order_id": key,
                    "customer_id": pick.choice(CUSTOMERS),
                    "status": pick.choice(["placed", "paid", "shipped"]),
                    "amount": round(pick.uniform(1, 500), 2),
                    "updated_at": stamp(updated_at),
                    "ingested_at": stamp(arrival),
                    "is_deleted": is_deleted,
                }
            )
        return rows

    # bin packing: messages (every one delivered so far); defragment: fragments
    def _messages(self) -> None:
        pick = self.random
        window = self.clock - DELIVERY_EVERY
        for _ in range(pick.randrange(4, 16)):
            self.messages.append(
                {
                    "message_id": f"m{len(self.messages) + 1:05d}",
                    "customer_id": pick.choice(CUSTOMERS),
                    "size_bytes": pick.randrange(200, 1500),
                    "arrived_at": stamp(window + dt.timedelta(seconds=pick.randrange(600))),
                }
            )

    def _fragments(self) -> None:
        pick = self.random
        for _ in range(pick.randrange(0, 3)):
            self.uploads += 1
            upload = f"u{self.uploads}"
            count = pick.randrange(2, 6)
            parts = [
                {
                    "fragment_id": f"{upload}-{i}",
                    "upload_id": upload,
                    "fragment_count": count,
                    "fragment_index": i,
                    "size_bytes": pick.randrange(100, 2000),
                }
                for i in range(1, count + 1)
            ]
            pick.shuffle(parts)
            if pick.random() < 0.1:
                parts.pop()  # a fragment that never comes: the set fails at its age
                self.count("lost fragment")
            self.waiting.append(parts)
        window = self.clock - DELIVERY_EVERY
        still = []
        for parts in self.waiting:
            for _ in range(pick.randrange(1, len(parts) + 1) if parts else 0):
                part = parts.pop()
                part["arrived_at"] = stamp(window + dt.timedelta(seconds=pick.randrange(600)))
                self.fragments.append(part)
            if parts:
                still.append(parts)
                self.count("fragments over several runs")
        self.waiting = still

    # auto-merge: a day of new events
    def _events(self) -> list[dict]:
        pick = self.random
        day = dt.date(2024, 1, 1) + dt.timedelta(days=self.number)
        return [
            {
                "event_id": self.number * 1000 + i,
                "event_date": day.isoformat(),
                "customer_id": pick.choice(CUSTOMERS),
                "amount": round(pick.uniform(1, 100), 2),
            }
            for i in range(pick.randrange(20, 60))
        ]

    def next(self, folder: Path) -> None:
        """The next delivery, written into folder as one JSON lines file per input."""
        self.number += 1
        self._entity_delivery()
        self._messages()
        self._fragments()
        files = {
            **{f"ent_{d}": list(self.entity.records[d].values()) for d in DATASETS},
            "orders": self._orders(),
            "messages": self.messages,
            "fragments": self.fragments,
            "events": self._events(),
            "clock": [{"now": self.clock.isoformat()}],
        }
        for name, rows in files.items():
            lines = "".join(json.dumps(row) + "\n" for row in rows)
            (folder / f"{name}.jsonl").write_text(lines)


# -- the comparison -------------------------------------------------------------------


def table_dirs(schema_dir: Path, table_format: str) -> dict[str, Path]:
    marker = "_delta_log" if table_format == "delta" else "metadata"
    if not schema_dir.is_dir():
        return {}
    return {p.name: p for p in sorted(schema_dir.iterdir()) if (p / marker).is_dir()}


def ignored_columns(table: str, columns: list[str]) -> list[str]:
    return [c for c in columns if c in IGNORED or c in IGNORED_IN.get(table, {})]


def compare_worker(spec_file: str) -> None:
    """In a process of its own: every table of the two warehouses compared; prints one
    JSON object (tables compared, differences, each with its first rows)."""
    from dbt.adapters.spark_session import session as sessions

    spec = json.loads(Path(spec_file).read_text())
    fmt = spec["format"]
    scratch = Path(spec["scratch"])
    spark = sessions.get_session(
        sessions.SessionSettings(
            warehouse=scratch,
            log_dir=scratch / "logs",
            server_side_parameters={
                "spark.master": "local[2]",
                "spark.driver.memory": "2g",
                "spark.sql.shuffle.partitions": "1",
                **SHORT_JVM,
            },
            table_format=fmt,
        )
    )
    twin = table_dirs(Path(spec["twin"]), fmt)
    soaked = table_dirs(Path(spec["soaked"]), fmt)
    scratch_tables = sorted(
        f"{side}: {name}"
        for side, tables in (("twin", twin), ("soaked", soaked))
        for name in tables
        if any(part in name for part in SCRATCH)
    )
    twin = {k: v for k, v in twin.items() if not any(part in k for part in SCRATCH)}
    soaked = {k: v for k, v in soaked.items() if not any(part in k for part in SCRATCH)}
    differences = []
    for name in sorted(set(twin) - set(soaked)):
        differences.append({"table": name, "difference": "only in the twin"})
    for name in sorted(set(soaked) - set(twin)):
        differences.append({"table": name, "difference": "only in the soaked warehouse"})
    rows_of = {}
    for name in sorted(set(twin) & set(soaked)):
        sides = []
        for path in (twin[name], soaked[name]):
            frame = spark.read.format(fmt).load(str(path))
            kept = [c for c in frame.columns if c not in ignored_columns(name, frame.columns)]
            lines = frame.selectExpr(
                f"to_json(struct({', '.join(f'`{c}`' for c in kept)})) as line"
            ).collect()
            sides.append(sorted(r.line for r in lines))
        rows_of[name] = len(sides[0])
        if sides[0] != sides[1]:
            twin_only = sorted(set(sides[0]) - set(sides[1]))
            soaked_only = sorted(set(sides[1]) - set(sides[0]))
            differences.append(
                {
                    "table": name,
                    "difference": f"{len(sides[0])} rows in the twin, {len(sides[1])} soaked",
                    "twin_only": twin_only[:3],
                    "soaked_only": soaked_only[:3],
                    "duplicates": not twin_only and not soaked_only,
                }
            )
    print(json.dumps({"tables": rows_of, "differences": differences, "scratch": scratch_tables}))


def compare(root: Path, twin: Project, soaked: Project) -> tuple[dict, float]:
    spec = root / "compare.json"
    spec.write_text(
        json.dumps(
            {
                "format": twin.table_format,
                "scratch": str(root / "compare"),
                "twin": str(twin.schema_dir),
                "soaked": str(soaked.schema_dir),
            }
        )
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, __file__, "--compare-worker", str(spec)],
        capture_output=True,
        text=True,
        env=process_env(),
        timeout=TIMEOUT,
    )
    took = time.monotonic() - started
    found = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not found:
        return {"error": (done.stdout + done.stderr)[-3000:]}, took
    return found[-1], took


# -- the soak -------------------------------------------------------------------------


@dataclass
class Attempt:
    killed_at: float | None  # seconds after the start, or None: not to be killed
    took: float = 0.0
    returncode: int | None = None
    outcome: str = ""  # killed, ok, refused, failed, ended before the kill
    log: str = ""
    started_at: float | None = None  # a collider: seconds after the first run started


@dataclass
class Command:
    args: list[str]
    twin_took: float = 0.0
    attempts: list[Attempt] = field(default_factory=list)


def commands_of(deliveries: Deliveries, pick: random.Random) -> list[list[str]]:
    found = [["run"]]
    if deliveries.number > 1 and pick.random() < COMPACTION_SHARE:
        found.append(
            [
                "run-operation",
                "dbt_merge.execute_upsert_compaction",
                "--args",
                "{model: orders_mor_sched, execute: true}",
            ]
        )
    if deliveries.number > 2 and pick.random() < AUTO_MERGE_SHARE:
        found.append(
            [
                "run-operation",
                "dbt_merge.execute_auto_merge",
                "--args",
                "{plan: events_merge_plan, execute: true}",
            ]
        )
    return found


def short(args: list[str]) -> str:
    return args[0] if args[0] == "run" else args[1].removeprefix("dbt_merge.")


def tail(log: Path, chars: int = 2500) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else ""


def run_once(project: Project, args: list[str], log: Path, kill_at: float | None) -> Attempt:
    attempt = Attempt(killed_at=kill_at)
    started = time.monotonic()
    proc = project.start(args, log)
    try:
        proc.wait(timeout=kill_at if kill_at is not None else TIMEOUT)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        attempt.took = time.monotonic() - started
        attempt.outcome = "killed" if kill_at is not None else "timed out"
        attempt.returncode = proc.returncode
        return attempt
    wait_group(proc.pid)
    attempt.took = time.monotonic() - started
    attempt.returncode = proc.returncode
    text = tail(log)
    if proc.returncode == 0:
        attempt.outcome = "ok" if kill_at is None else "ended before the kill"
    elif REFUSED in log.read_text(errors="replace"):
        attempt.outcome = "refused"
    else:
        attempt.outcome = "failed"
        attempt.log = text
    return attempt


def outcome_of(proc: subprocess.Popen, log: Path) -> Attempt:
    """The finished process's attempt (its time is set by the caller)."""
    wait_group(proc.pid)
    attempt = Attempt(killed_at=None, returncode=proc.returncode)
    if proc.returncode == 0:
        attempt.outcome = "ok"
    elif REFUSED in log.read_text(errors="replace"):
        attempt.outcome = "refused"
    else:
        attempt.outcome = "failed"
        attempt.log = tail(log)
    return attempt


def run_colliding(
    project: Project, args: list[str], log: Path, second_log: Path, collide_at: float
) -> tuple[Attempt, Attempt]:
    """The command, and `collide_at` seconds later a second run of it (a manual run, or
    the next schedule, while the first runs): one of them must be refused by name, or
    both end well (one after the other)."""
    started = time.monotonic()
    first = project.start(args, log)
    try:
        first.wait(timeout=collide_at)
    except subprocess.TimeoutExpired:
        pass
    second_started = time.monotonic()
    second = project.start(args, second_log)
    second.wait(timeout=TIMEOUT)
    second_took = time.monotonic() - second_started
    first.wait(timeout=TIMEOUT)
    took = time.monotonic() - started
    one, two = outcome_of(first, log), outcome_of(second, second_log)
    one.took, two.took = took, second_took
    two.started_at = collide_at
    return one, two


def soak(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    print(f"soak: --seed {seed} --deliveries {args.deliveries} --format {args.format}", flush=True)
    root = Path(tempfile.mkdtemp(prefix=f"soak-{args.format}-{seed}-", dir="/tmp"))
    inputs = root / "inputs"
    logs = root / "logs"
    inputs.mkdir()
    logs.mkdir()
    twin = Project(root / "twin", inputs, args.format, logs)
    soaked = Project(root / "soaked", inputs, args.format, logs)
    report = (root / "report.jsonl").open("w")
    print(f"soak: warehouses and report in {root}", flush=True)

    pick = random.Random(seed + 1)  # the faults' own stream: the deliveries stay the same
    killed_deliveries = set(
        pick.sample(range(1, args.deliveries + 1), math.ceil(args.deliveries * KILL_SHARE))
    )
    calm = [n for n in range(2, args.deliveries + 1) if n not in killed_deliveries]
    colliding = set(pick.sample(calm, min(len(calm), math.ceil(args.deliveries * COLLISION_SHARE))))
    deliveries = Deliveries(seed)
    started = time.monotonic()
    for project, side in ((twin, "twin"), (soaked, "soaked")):
        done = subprocess.run(
            [DBT, "deps", *project.args], capture_output=True, text=True, env=process_env()
        )
        if done.returncode != 0:
            print(f"soak: dbt deps of the {side} failed:\n{done.stdout[-3000:]}")
            return 2
    totals = {"kills": 0, "collisions": 0, "differences": 0, "findings": 0}
    totals.update(twin_s=0.0, soaked_s=0.0)
    totals.update(compare_s=0.0)
    failed = False
    for number in range(1, args.deliveries + 1):
        deliveries.next(inputs)
        commands = [Command(c) for c in commands_of(deliveries, pick)]
        victim = pick.randrange(len(commands)) if number in killed_deliveries else None
        twice = victim is not None and pick.random() < TWICE_SHARE
        findings = []
        for index, command in enumerate(commands):
            name = short(command.args)
            log = logs / f"d{number:03d}-twin-{name}.log"
            attempt = run_once(twin, command.args, log, None)
            command.twin_took = attempt.took
            totals["twin_s"] += attempt.took
            if attempt.outcome != "ok":
                findings.append(f"the twin's {name} failed: {attempt.log[-1500:]}")
                break
            kills = (2 if twice else 1) if index == victim else 0
            if index == 0 and number in colliding:
                one, two = run_colliding(
                    soaked,
                    command.args,
                    logs / f"d{number:03d}-soaked-{name}-1.log",
                    logs / f"d{number:03d}-soaked-{name}-collider.log",
                    pick.uniform(0, command.twin_took),
                )
                two.outcome = f"collider {two.outcome}"
                command.attempts += [one, two]
                totals["soaked_s"] += one.took
                totals["collisions"] += 1
                if {one.outcome, two.outcome} not in (
                    {"ok", "collider refused"},
                    {"refused", "collider ok"},
                    {"ok", "collider ok"},
                ):
                    findings.append(
                        f"a collision of two {name}s ended {one.outcome} and {two.outcome}: "
                        + (one.log or two.log)
                    )
                    break
                continue
            for n in range(kills + RETRIES):
                kill_at = pick.uniform(0, command.twin_took) if n < kills else None
                log = logs / f"d{number:03d}-soaked-{name}-{n + 1}.log"
                attempt = run_once(soaked, command.args, log, kill_at)
                command.attempts.append(attempt)
                totals["soaked_s"] += attempt.took
                if attempt.outcome == "killed":
                    totals["kills"] += 1
                    continue
                if attempt.outcome == "ended before the kill" and n == 0:
                    # the run was quicker than the twin's: the kill goes to the next delivery
                    killed_deliveries.add(number + 1)
                if attempt.outcome in ("ok", "ended before the kill"):
                    break
                if attempt.outcome != "refused":
                    findings.append(
                        f"run {n + 1} of {name} (after {n} killed) failed: {attempt.log}"
                    )
                    break
            else:
                findings.append(f"{name} did not succeed in {kills + RETRIES} runs")
            if findings:
                break
        result, took = ({}, 0.0)
        due = number % args.compare_every == 0 or number == args.deliveries
        if due and (not findings or all("failed" not in f for f in findings)):
            result, took = compare(root, twin, soaked)
            totals["compare_s"] += took
        differences = result.get("differences", [])
        if "error" in result:
            findings.append(f"the comparison failed: {result['error']}")
        totals["differences"] += len(differences)
        totals["findings"] += len(findings)
        line = {
            "delivery": number,
            "commands": [
                {
                    "command": short(c.args),
                    "twin_s": round(c.twin_took, 1),
                    "attempts": [
                        {
                            "outcome": a.outcome,
                            "killed_at_s": None if a.killed_at is None else round(a.killed_at, 1),
                            "took_s": round(a.took, 1),
                            **(
                                {"started_at_s": round(a.started_at, 1)}
                                if a.started_at is not None
                                else {}
                            ),
                        }
                        for a in c.attempts
                    ],
                }
                for c in commands
            ],
            "compare_s": round(took, 1),
            "tables": len(result.get("tables", {})),
            "differences": differences,
            "scratch_tables": result.get("scratch", []),
            "findings": findings,
        }
        report.write(json.dumps(line) + "\n")
        report.flush()
        print(summary_line(line), flush=True)
        if differences or findings:
            failed = True
            if not args.go_on:
                break
    totals["wall_s"] = time.monotonic() - started
    totals = {k: round(v, 1) if isinstance(v, float) else v for k, v in totals.items()}
    summary = {
        "seed": seed,
        "format": args.format,
        "deliveries": deliveries.number,
        **totals,
        "kinds": deliveries.kinds,
        "ignored": {"every table": IGNORED, **IGNORED_IN},
        "passed": not failed,
    }
    report.write(json.dumps({"summary": summary}) + "\n")
    report.close()
    print("soak: " + json.dumps(summary), flush=True)
    if failed or args.keep:
        print(f"soak: kept {root} (replay: --seed {seed} --format {args.format})")
    else:
        shutil.rmtree(root)
    return 1 if failed else 0


def summary_line(line: dict) -> str:
    parts = []
    for c in line["commands"]:
        runs = []
        for a in c["attempts"]:
            if a["outcome"] == "killed":
                runs.append(f"killed at {a['killed_at_s']}s")
            elif a["outcome"].startswith("collider"):
                runs.append(f"{a['outcome']} (started at {a['started_at_s']}s)")
            else:
                runs.append(f"{a['outcome']} {a['took_s']}s")
        parts.append(f"{c['command']} (twin {c['twin_s']}s; {', '.join(runs)})")
    verdict = f"{len(line['differences'])} differences" + (
        f", {len(line['findings'])} findings" if line["findings"] else ""
    )
    text = f"delivery {line['delivery']:3d}: {'; '.join(parts)}; compared {line['tables']}"
    text += f" tables in {line['compare_s']}s: {verdict}"
    for difference in line["differences"][:1]:
        text += "\n    first difference: " + json.dumps(difference)[:1500]
    for finding in line["findings"][:1]:
        text += "\n    finding: " + finding[-1500:]
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, help="replay a soak (default: a fresh seed)")
    parser.add_argument("--deliveries", type=int, default=30)
    parser.add_argument("--format", choices=["iceberg", "delta"], default="iceberg")
    parser.add_argument("--keep", action="store_true", help="keep the warehouses")
    parser.add_argument(
        "--compare-every",
        type=int,
        default=1,
        help="compare the warehouses after every Nth delivery and the last (default 1)",
    )
    parser.add_argument(
        "--go-on", action="store_true", help="go on after a difference or a finding"
    )
    parser.add_argument("--compare-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.compare_worker:
        compare_worker(args.compare_worker)
        return 0
    return soak(args)


if __name__ == "__main__":
    sys.exit(main())
