"""Auto-merge (SPEC §4) from a project that installs dbt_merge: plans on real Iceberg
tables (dbt_merge.auto_merge.plan_table in a Python model), the executor
(dbt run-operation dbt_merge.execute_auto_merge), provenance, and bad input."""

from __future__ import annotations

import json

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.conftest import dbt_env
from tests.functional.entity_merge_fixtures import InstallsDbtMerge

# Twelve days, 2024-01-01 .. 2024-01-12, one file each (one Spark partition per day);
# 2024-01-05 is big (about 6 KB), the other days are small (about 990 bytes): with the
# plan's limit of 4400 bytes, four small days fit in a merge, five do not.
DAYS_MODEL = """
from pyspark.sql import functions as F


def model(dbt, session):
    dbt.config(materialized="table", file_format="iceberg")
    days = session.range(0, 12, 1, 12).withColumnRenamed("id", "day")
    count = F.when(F.col("day") == 4, 3000).otherwise(5)
    rows = days.select("day", F.explode(F.sequence(F.lit(1), count)).alias("n"))
    return rows.select(
        (F.col("day") * 1000 + F.col("n")).alias("id"),
        F.date_add(F.lit("2024-01-01").cast("date"), F.col("day").cast("int")).alias("day_date"),
        F.concat(F.lit("value "), F.col("n").cast("string")).alias("payload"),
    )
"""

PLAN_MODEL = """
from dbt_merge.auto_merge import plan_table


def model(dbt, session):
    dbt.config(materialized="table", file_format="iceberg")
    return plan_table(
        session,
        dbt.ref("{table}"),
        model_name=dbt.this.identifier,
        config=dbt.config.get("auto_merge"),
    )
"""

# 2024-01-08 is NEVER; 2024-01-11 on are DELAY 1d, marked 2024-01-20: due 2024-01-21.
PLAN_YML = """
version: 2
models:
  - name: days_plan
    config:
      auto_merge:
        sort_column: day_date
        threshold: "{{ env_var('DBT_MERGE_TEST_THRESHOLD', '1') }}"
        split_threshold: "{{ env_var('DBT_MERGE_TEST_SPLIT_THRESHOLD', '4400') }}"
        file_max: "{{ env_var('DBT_MERGE_TEST_FILE_MAX', '10000') }}"
        now: "{{ env_var('DBT_MERGE_TEST_NOW', '2024-01-20T00:00:00') }}"
        mergeability:
          - {from: "2024-01-08", to: "2024-01-08", mergeability: NEVER}
          - {from: "2024-01-11", mergeability: "DELAY:1d", marked_at: "2024-01-20T00:00:00"}
  - name: regions_plan
    config:
      auto_merge:
        source: partitions
        split_threshold: 1000000
        mergeability: [{from: "c", to: "c", mergeability: NEVER}]
"""

REGIONS_PLAN_MODEL = """
from dbt_merge.auto_merge import plan_table


def model(dbt, session):
    dbt.config(materialized="table", file_format="iceberg")
    return plan_table(
        session,
        f"{dbt.this.schema}.regions",
        model_name=dbt.this.identifier,
        config=dbt.config.get("auto_merge"),
    )
"""

PLAN_COLUMNS = "range_index, min_key, action, reason, merge_index, mergeability, due_at"


def plan_rows(spark, schema, name="days_plan"):
    sql = f"select {PLAN_COLUMNS} from {schema}.{name} order by range_index"
    return [r.asDict() for r in spark.sql(sql).collect()]


def merges(rows):
    """{merge_index: [min_key of each member]}."""
    found: dict[int, list[str]] = {}
    for row in rows:
        if row["merge_index"] is not None:
            found.setdefault(row["merge_index"], []).append(row["min_key"])
    return [found[i] for i in sorted(found)]


def days(first, last):
    return [f"2024-01-{d:02d}" for d in range(first, last + 1)]


def table_state(spark, table):
    files = sorted(r[0] for r in spark.sql(f"select file_path from {table}.data_files").collect())
    snapshot = spark.sql(
        f"select snapshot_id from {table}.history where is_current_ancestor "
        "order by made_current_at desc limit 1"
    ).first()[0]
    rows = sorted(tuple(r) for r in spark.table(table).collect())
    return files, snapshot, rows


def execute(plan, execute_flag=None):
    args = {"plan": plan} if execute_flag is None else {"plan": plan, "execute": execute_flag}
    _, output = run_dbt_and_capture(
        ["run-operation", "dbt_merge.execute_auto_merge", "--args", json.dumps(args)]
    )
    return " ".join(output.split())


class TestAutoMergeOnIceberg(InstallsDbtMerge):
    """Plans on a real table's files, the limits at their boundary, DELAY before and
    after it is due, then a dry run, the execution and a stale plan."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "days.py": DAYS_MODEL,
            "days_plan.py": PLAN_MODEL.format(table="days"),
            "regions_plan.py": REGIONS_PLAN_MODEL,
            "plans.yml": PLAN_YML,
        }

    @pytest.fixture(scope="class")
    def ready(self, project):
        run_dbt(["deps"])
        run_dbt(["run", "--select", "days", "days_plan"])
        return project

    def plan(self, **settings):
        """Plan again, with the settings given (dbt_env; a changed --vars would make dbt
        parse the whole project again)."""
        with dbt_env(settings):
            run_dbt(["run", "--select", "days_plan"])

    def test_plan_around_never_and_a_delay_not_yet_due(self, ready, spark):
        rows = plan_rows(spark, ready.test_schema)
        by_day = {r["min_key"]: r for r in rows}
        assert [r["min_key"] for r in rows] == days(1, 12), "one range per file, in key order"
        assert by_day["2024-01-05"]["reason"] == "too_big", "the big day stands alone"
        assert by_day["2024-01-08"]["reason"] == "never", "the NEVER day is left"
        assert by_day["2024-01-08"]["mergeability"] == "NEVER"
        for day in days(11, 12):
            assert by_day[day]["reason"] == "delay_not_due", day
            assert str(by_day[day]["due_at"]) == "2024-01-21 00:00:00", "marked_at + 1d"
        assert by_day["2024-01-01"]["mergeability"] == "ALWAYS", "files the system wrote"
        # runs stop at the big day and at NEVER: nothing merges across them
        assert merges(rows) == [days(1, 4), days(6, 7), days(9, 10)]

    def test_delay_is_eligible_exactly_when_due(self, ready, spark):
        self.plan(now="2024-01-20T23:59:59")
        rows = plan_rows(spark, ready.test_schema)
        assert merges(rows)[-1] == days(9, 10), "one second before: still waiting"
        self.plan(now="2024-01-21T00:00:00")
        rows = plan_rows(spark, ready.test_schema)
        assert merges(rows)[-1] == days(9, 12), "due: the DELAY days join the run"
        assert {r["reason"] for r in rows if r["min_key"] in days(11, 12)} == {"merged"}

    def test_size_and_file_limits_are_inclusive(self, ready, spark):
        table = f"{ready.test_schema}.days"
        sizes = [
            r[0]
            for r in spark.sql(
                f"select file_size_in_bytes from {table}.data_files "
                "order by readable_metrics.day_date.lower_bound"
            ).collect()
        ]
        three = sum(sizes[:3])
        self.plan(split_threshold=three)
        assert merges(plan_rows(spark, ready.test_schema))[0] == days(1, 3), (
            "three files of exactly the size limit merge; the fourth would go over"
        )
        self.plan(split_threshold=three - 1)
        assert merges(plan_rows(spark, ready.test_schema))[0] == days(1, 2), "one byte less"
        self.plan(split_threshold=10**9, file_max=3)
        assert merges(plan_rows(spark, ready.test_schema))[:2] == [days(1, 3), days(4, 6)], (
            "three files = file_max merge; a fourth would be one too many"
        )

    def test_dry_run_then_execute_then_stale(self, ready, spark):
        schema = ready.test_schema
        table = f"{schema}.days"
        self.plan()
        planned = merges(plan_rows(spark, schema))
        before = table_state(spark, table)

        # 1. a dry run (the default) changes nothing
        output = execute("days_plan")
        assert "would run: call spark_catalog.system.rewrite_data_files(" in output
        assert "3 merge(s) would run, rewriting 8 files, 0 would be skipped" in output, output[
            -800:
        ]
        assert table_state(spark, table) == before, "same files, snapshot and rows"
        tables = [r.tableName for r in spark.sql(f"show tables in {schema}").collect()]
        assert "auto_merge_provenance" not in tables, "a dry run records nothing"

        # 2. execute: fewer files, the same rows
        output = execute("days_plan", True)
        assert "3 merge(s) executed, 8 files -> 3, 0 skipped" in output, output[-800:]
        files, snapshot, rows = table_state(spark, table)
        assert len(before[0]) == 12 and len(files) == 12 - 8 + 3, "12 files -> 7"
        assert rows == before[2], "row for row the same contents"
        assert snapshot != before[1]

        # 3. provenance: one JOIN per merge, old files -> the new file
        events = spark.sql(
            f"select * from {schema}.auto_merge_provenance order by merge_index"
        ).collect()
        assert [e["event_type"] for e in events] == ["JOIN"] * 3
        assert [[e["min_key"], e["max_key"]] for e in events] == [[m[0], m[-1]] for m in planned]
        old = {p for e in events for p in e["parent_ids"]}
        new = {c for e in events for c in e["child_ids"]}
        assert [len(e["parent_ids"]) for e in events] == [len(m) for m in planned]
        assert old <= set(before[0]) and not old & set(files), "the parents are gone"
        assert [len(e["child_ids"]) for e in events] == [1, 1, 1] and new <= set(files)
        assert events[-1]["snapshot_id"] == snapshot
        assert all(e["invocation_id"] and e["plan_model"] == "days_plan" for e in events)

        # 4. the same plan again: stale, nothing runs. The runner re-checks each merge
        #    just before it (Accumulo's VerifyMergeability, SEMANTICS.md D12): its files
        #    were rewritten, so the planned ones are gone and a new one is in the range.
        after = table_state(spark, table)
        output = execute("days_plan", True)
        assert output.count("the plan is stale") == 3, output[-800:]
        assert "4 planned file(s) are no longer in the table" in output, output[-1500:]
        assert output.count("2 planned file(s) are no longer in the table") == 2
        assert output.count("would also rewrite 1 file(s) not in the plan") == 3
        assert "0 merge(s) executed" in output and "3 skipped" in output
        assert table_state(spark, table) == after
        count = spark.sql(f"select count(*) from {schema}.auto_merge_provenance").first()[0]
        assert count == 3, "no new events"

        # 5. a fresh plan of the merged table has nothing left to merge in those runs
        self.plan()
        rows = plan_rows(spark, schema)
        assert len(rows) == 7
        merged = {r["min_key"]: r for r in rows}["2024-01-01"]
        assert merged["reason"] == "run_of_one", "the merged file is one range now"

    def test_a_file_added_inside_a_merge_makes_it_stale(self, ready, spark):
        schema = ready.test_schema
        table = f"{schema}.days"
        run_dbt(["run", "--select", "days"])  # back to 12 files
        self.plan()
        spark.sql(f"insert into {table} values (99999, date'2024-01-02', 'late')")
        before = table_state(spark, table)
        output = execute("days_plan", True)
        assert "would also rewrite 1 file(s) not in the plan" in output, output[-800:]
        assert "2 merge(s) executed" in output and "1 skipped" in output
        assert table_state(spark, table)[2] == before[2], "the rows stay"

        # the late file overlaps 2024-01-02's file: the files are no longer key ranges
        _, output = run_dbt_and_capture(["run", "--select", "days_plan"], expect_pass=False)
        text = " ".join(output.split())
        assert "dbt_merge auto-merge in model days_plan, setting 'sort_column'" in text
        assert "overlap on day_date" in text and "(got 'day_date')" in text, text[-1500:]

    def test_partitions_source_compacts_each_partitions_files(self, ready, spark):
        schema = ready.test_schema
        table = f"{schema}.regions"
        spark.sql(
            f"create table {table} (id int, region string) using iceberg partitioned by (region)"
        )
        for batch in range(2):  # two appends: two files in each partition
            values = ", ".join(f"({batch * 10 + i}, '{r}')" for i, r in enumerate("abcde"))
            spark.sql(f"insert into {table} values {values}")
        run_dbt(["run", "--select", "regions_plan"])
        rows = plan_rows(spark, schema, "regions_plan")
        assert [r["min_key"] for r in rows] == list("abcde")
        assert [r["reason"] for r in rows] == ["merged", "merged", "never", "merged", "merged"]
        before = table_state(spark, table)
        output = execute("regions_plan", True)
        assert "2 merge(s) executed, 8 files -> 4" in output, output[-800:]
        files, _, rows_after = table_state(spark, table)
        assert rows_after == before[2]
        per_partition = spark.sql(
            f"select partition.region, file_count from {table}.partitions order by 1"
        ).collect()
        assert [tuple(r) for r in per_partition] == [
            ("a", 1),
            ("b", 1),
            ("c", 2),
            ("d", 1),
            ("e", 1),
        ], "the partitions stay; their files are compacted, except the NEVER one's"


BAD_PLAN = """
from dbt_merge.auto_merge import plan_table


def model(dbt, session):
    dbt.config(materialized="table", auto_merge={config})
    return plan_table(
        session, dbt.ref("small"), model_name=dbt.this.identifier,
        config=dbt.config.get("auto_merge"),
    )
"""

SMALL_MODEL = """
def model(dbt, session):
    dbt.config(materialized="table", file_format="iceberg", tblproperties={props})
    # two files: ids 0, 2 and 1, 3 (they overlap on id); k 0, 1 and 2, 3 (they do not)
    return session.range(0, 4, 1, 2).selectExpr(
        "(id % 2) * 2 + div(id, 2) as id", "cast(id as int) as k"
    )
"""

BAD_CONFIGS = {
    "bad_threshold_zero": (
        {"sort_column": "k", "threshold": 0},
        "setting 'threshold': must be > 0 and <= 1 (got 0)",
    ),
    "bad_threshold_big": (
        {"sort_column": "k", "threshold": 1.5},
        "setting 'threshold': must be > 0 and <= 1 (got 1.5)",
    ),
    "bad_split": (
        {"sort_column": "k", "split_threshold": 0},
        "setting 'split_threshold': must be > 0 (got 0)",
    ),
    "bad_file_max": (
        {"sort_column": "k", "file_max": -1},
        "setting 'file_max': must be > 0 (got -1)",
    ),
    "bad_mergeability": (
        {"sort_column": "k", "mergeability": "SOMETIMES"},
        "setting 'mergeability (the single value)': unknown mergeability, expected NEVER, "
        "ALWAYS or DELAY:<duration> (got 'SOMETIMES')",
    ),
    "bad_delay": (
        {"sort_column": "k", "mergeability": [{"from": 1, "mergeability": "DELAY"}]},
        "setting 'mergeability (rule 1)': DELAY needs a duration, e.g. DELAY:1h or "
        "DELAY 3600s (got 'DELAY')",
    ),
    "bad_overlap": (
        {"sort_column": "id"},
        "setting 'sort_column': the data files of",
    ),
}


class TestAutoMergeBadInput(InstallsDbtMerge):
    """Each bad setting fails its plan model through dbt, naming model, setting, value."""

    @pytest.fixture(scope="class")
    def models(self):
        found = {
            f"{name}.py": BAD_PLAN.format(config=repr(config))
            for name, (config, _) in BAD_CONFIGS.items()
        }
        found["small.py"] = SMALL_MODEL.format(props="{}")
        # a table property of the planned table, read when the config does not set it
        found["props.py"] = SMALL_MODEL.format(props=repr({"dbt_merge.auto_merge.file_max": "0"}))
        found["bad_property.py"] = BAD_PLAN.format(config=repr({"sort_column": "k"})).replace(
            'dbt.ref("small")', 'dbt.ref("props")'
        )
        return found

    def test_errors_name_model_setting_and_value(self, project, spark):
        run_dbt(["deps"])
        # every plan with sort_column k fails on its setting before reading the files
        _, output = run_dbt_and_capture(["run"], expect_pass=False)
        text = " ".join(output.split())
        for name, (_, expected) in BAD_CONFIGS.items():
            assert f"dbt_merge auto-merge in model {name}, {expected}" in text, (
                name,
                text[-3000:],
            )
        assert "overlap on id" in text
        assert (
            "dbt_merge auto-merge in model bad_property, setting "
            "'dbt_merge.auto_merge.file_max': must be > 0 (got 0)" in text
        ), text[-3000:]


CRASH_PLAN_YML = """
version: 2
models:
  - name: crash_plan
    config:
      auto_merge: {sort_column: day_date, threshold: 1, split_threshold: 4400,
                   now: "2024-01-20T00:00:00"}
"""
FAIL_POINTS = [
    "auto_merge.before_rewrite",
    "auto_merge.after_rewrite",
    "auto_merge.after_provenance",
]


class TestAutoMergeFailures(InstallsDbtMerge):
    """A run stopped at each commit boundary of the runner (DBT_MERGE_FAIL_AT): what is
    stored after the failure, and a plain re-run against a run that never failed."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "crash_days.py": DAYS_MODEL,
            "crash_plan.py": PLAN_MODEL.format(table="crash_days"),
            "crash_plan.yml": CRASH_PLAN_YML,
        }

    def fresh(self, spark, schema):
        """The twelve-file table, its plan, and no events yet."""
        spark.sql(f"drop table if exists {schema}.auto_merge_provenance")
        run_dbt(["run", "--select", "crash_days", "crash_plan"])
        return table_state(spark, f"{schema}.crash_days")

    def outcome(self, spark, schema):
        """What a finished execution left: rows, file count, and the events by merge."""
        files, _, rows = table_state(spark, f"{schema}.crash_days")
        events = spark.sql(
            f"select merge_index, min_key, max_key, size(parent_ids) as parents, "
            f"size(child_ids) as children from {schema}.auto_merge_provenance "
            "order by merge_index"
        ).collect()
        return rows, len(files), [tuple(e) for e in events]

    def test_each_boundary_then_a_plain_run(self, project, spark, monkeypatch):
        schema = project.test_schema
        run_dbt(["deps"])
        self.fresh(spark, schema)
        execute("crash_plan", True)
        clean = self.outcome(spark, schema)
        assert clean[1] == 12 - 11 + 3 and len(clean[2]) == 3, "4 + 4 + 3 files, one each"

        for point in FAIL_POINTS:
            before = self.fresh(spark, schema)
            monkeypatch.setenv("DBT_MERGE_FAIL_AT", point)
            _, output = run_dbt_and_capture(
                [
                    "run-operation",
                    "dbt_merge.execute_auto_merge",
                    "--args",
                    json.dumps({"plan": "crash_plan", "execute": True}),
                ],
                expect_pass=False,
            )
            assert f"injected failure at {point}" in output, output[-1500:]
            monkeypatch.delenv("DBT_MERGE_FAIL_AT")

            # after the failure: readable, the same rows, the first merge done or not
            files, _, rows = table_state(spark, f"{schema}.crash_days")
            assert rows == before[2], f"{point}: every row readable and unchanged"
            rewritten = point != "auto_merge.before_rewrite"
            assert len(files) == (12 - 4 + 1 if rewritten else 12), (point, len(files))
            events = f"{schema}.auto_merge_provenance"
            recorded = (
                spark.sql(f"select count(*) from {events}").first()[0]
                if spark.catalog.tableExists(events)
                else 0
            )
            assert recorded == (1 if point == "auto_merge.after_provenance" else 0), point

            # a plain re-run of the same plan finishes the work, events included
            output = execute("crash_plan", True)
            if point == "auto_merge.after_rewrite":
                assert "by a run that stopped before recording it" in output, output[-1500:]
                assert "1 event(s) recorded for merges a stopped run executed" in output
            assert self.outcome(spark, schema) == clean, f"{point}: as if it never failed"
