"""Benchmark of incremental_strategy='upsert' against Apache Hudi's own upserts and
against the dbt-spark `merge` model a user writes today to get the same table.

A throw-away dbt project (bench/out/bench_upsert_project) has four incremental Iceberg
models over the same `--table-rows` rows (default 10M; id, ts, name, amount, region,
is_deleted), and two Hudi tables are written beside them in the same process:
  upserted                incremental_strategy='upsert', event-time ordering,
                          delete_column (table_type copy_on_write, the default);
  upserted_mor            the same with table_type merge_on_read;
  hudi_cow, hudi_mor      Apache Hudi 1.0.2's DataFrame upsert
                          (`df.write.format("hudi")`, operation upsert) into a
                          COPY_ON_WRITE and a MERGE_ON_READ table at
                          <warehouse>/hudi/<name>: Hudi's defaults but for the record key
                          id, the ordering field ts (event-time ordering) and the delete
                          marker (the batch's is_deleted as _hoodie_is_deleted); see
                          bench/hudi.py, and "hudi" in the JSON output for every setting
                          Hudi used (index type, metadata table, parallelism);
  merged_same_work        dbt-spark's `merge` strategy doing the same work, as a user
                          writes it today: the model deduplicates the batch by hand
                          (row_number() by id, newest ts first) and the project
                          overrides dbt-spark's spark__get_merge_sql (MACROS) with the
                          ordering against the stored row (`when matched and s.ts >=
                          t.ts`) and the delete clause;
  merged_prededuplicated  dbt-spark's plain `merge` (unique_key only) of the batch
                          deduplicated before the clock starts: no ordering and no
                          deletes, so less work and another table (not compared).
Every table is loaded with the stored rows first (not timed; Hudi's with its
bulk_insert, its operation for an initial load). Then one batch of `--batch-rows` rows
(default 1M) is applied to each, in two rounds on freshly loaded tables (the second in
the other order); the figure is the mean of the two: for a dbt model the node time dbt
reports, for Hudi the seconds of its write. The batch:
  - 30% updates of stored keys (a tenth of them older than the stored version),
  - 2% deletes of stored keys,
  - 10% extra versions of keys already in the batch (duplicate keys),
  - the rest new keys.
`upserted`, `upserted_mor` and Hudi get the raw batch and do the precombine, the
ordering against the stored rows and the deletes themselves.

An untimed round on 20,000 stored rows comes first (warm-up, checked too). After each
round the tables `upserted`, `hudi_cow` (Hudi's meta columns dropped) and
`merged_same_work` are compared row for row, and `upserted_mor` with `upserted`: a
difference fails the run and names the first differing keys with their rows. Hudi's
merge-on-read snapshot read is compared with its copy-on-write table too, and a
difference is reported, not failed (Hudi's MOR read differs from its COW table for some
event-time inputs). Then a full scan of each table (every column of every row; one
warm-up scan, then the median of five). After the rounds, the scheduled compaction of
the merge_on_read table (dbt_merge.execute_upsert_compaction, timed as a whole
run-operation) and its scan again.

The session is the adapter's with Hudi added for this process only (bench/hudi.py:
Hudi's bundle, its SQL extension after Iceberg's, the Kryo serializer); the adapter's
defaults are unchanged. Every model, dbt_merge's included, runs in it.

`--clustered`: the batch's stored keys are one contiguous range of ids (the first
ones) instead of spread over the whole table, so few data files hold them.

`--table-format delta`: every dbt model writes a Delta table (the profile's
`table_format: delta`, its own warehouse), merge_on_read is Delta's deletion vectors,
and the compaction is Delta's REORG TABLE ... APPLY (PURGE); Hudi's tables are Hudi's.

`--no-hudi`: without Hudi's tables (and without its bundle and session settings).

Usage:
  .venv/bin/python bench/upsert_bench.py [--sizes 1000000,10000000] [--batch-rows N]
      [--clustered] [--table-format delta] [--no-hudi] [--json bench/out/upsert.json]
`--sizes` are stored rows, one measurement each (fresh data every time); the batch
is a tenth of the stored rows unless `--batch-rows` is given.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import hudi  # noqa: E402
from bench_project import OUT, BenchProject  # noqa: E402
from report import Run  # noqa: E402
from spark_metrics import ShuffleMeter  # noqa: E402

from dbt.adapters.spark_session import session as sessions  # noqa: E402

SCHEMA = "bench_upsert"
PROJECT = BenchProject("bench_upsert", SCHEMA)  # main() makes it again for --table-format
COLUMNS = "id, ts, name, amount, region, is_deleted"
MODELS = {
    "upserted.sql": """
{{ config(materialized='incremental', incremental_strategy='upsert',
          file_format=var('file_format'),
          unique_key='id', precombine_key='ts', delete_column='is_deleted') }}
select * from {{ var('input') }}
""",
    "upserted_mor.sql": """
{{ config(materialized='incremental', incremental_strategy='upsert',
          file_format=var('file_format'),
          unique_key='id', precombine_key='ts', delete_column='is_deleted',
          table_type='merge_on_read') }}
select * from {{ var('input') }}
""",
    "merged_same_work.sql": """
{{ config(materialized='incremental', incremental_strategy='merge',
          file_format=var('file_format'), unique_key='id',
          merge_ordering_column='ts', merge_delete_column='is_deleted') }}
{#-- the newest version of each key of the batch, by hand (dbt-spark's merge fails on
     duplicate keys); the MERGE orders it against the stored row and deletes
     (macros/merge_with_ordering.sql) --#}
with versions as (
    select
        *,
        row_number() over (partition by id order by ts desc) as version
    from {{ var('input') }}
)
select COLUMNS from versions
where version = 1
{% if not is_incremental() %}and not is_deleted{% endif %}
""".replace("COLUMNS", COLUMNS),
    "merged_prededuplicated.sql": """
{{ config(materialized='incremental', incremental_strategy='merge',
          file_format=var('file_format'),
          unique_key='id') }}
select * from {{ var('input') }}
""",
}
# what a dbt-spark user adds to the project to order a merge against the stored rows and
# delete: dbt-spark's spark__get_merge_sql renders `when matched then update set *` and
# `when not matched then insert *` only; a model opts in with merge_ordering_column and
# merge_delete_column, every other merge model keeps dbt-spark's own SQL
MACROS = {
    "merge_with_ordering.sql": """
{% macro spark__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates) %}
    {%- set ordering = config.get('merge_ordering_column') -%}
    {%- set deleted = config.get('merge_delete_column') -%}
    {%- if not ordering -%}
        {{ return(dbt.spark__get_merge_sql(
            target, source, unique_key, dest_columns, incremental_predicates)) }}
    {%- endif -%}
merge into {{ target }} as DBT_INTERNAL_DEST
using {{ source }} as DBT_INTERNAL_SOURCE
on DBT_INTERNAL_SOURCE.{{ unique_key }} = DBT_INTERNAL_DEST.{{ unique_key }}
when matched and DBT_INTERNAL_SOURCE.{{ ordering }} >= DBT_INTERNAL_DEST.{{ ordering }}
    and DBT_INTERNAL_SOURCE.{{ deleted }} then delete
when matched and DBT_INTERNAL_SOURCE.{{ ordering }} >= DBT_INTERNAL_DEST.{{ ordering }}
    then update set *
when not matched and not DBT_INTERNAL_SOURCE.{{ deleted }} then insert *
{% endmacro %}
""",
}
INPUTS = {"merged_prededuplicated": "batch_dedup"}  # every other table gets the raw batch
HUDI_TABLES = {"hudi_cow": "copy_on_write", "hudi_mor": "merge_on_read"}
# the tables that must hold the same rows after every round: dbt_merge's, Hudi's
# copy-on-write and the same-work merge, and dbt_merge's merge-on-read
SAME_ROWS = (
    ("upserted", "hudi_cow"),
    ("upserted", "merged_same_work"),
    ("upserted", "upserted_mor"),
)
SCANNED = ("upserted", "upserted_mor", "merged_same_work", "hudi_cow", "hudi_mor")
SHOWN_KEYS = 5  # differing keys a failed comparison names
WARM_UP_ROWS = 20_000  # stored rows of the untimed round before the measured ones


def generate(spark, table_rows: int, batch_rows: int, clustered: bool = False) -> dict:
    """The stored rows, the raw batch and the deduplicated batch, as tables of the
    project's format."""
    fmt = PROJECT.table_format
    spark.sql(f"create schema if not exists {SCHEMA}")
    rows = (
        "select id, 100 as ts, concat('name_', id) as name, cast(id % 1000 as double) as amount,"
        " concat('r', id % 50) as region, false as is_deleted"
    )
    spark.sql(
        f"create or replace table {SCHEMA}.base using {fmt} as {rows} from range({table_rows})"
    )
    updates = int(batch_rows * 0.30)
    deletes = int(batch_rows * 0.02)
    duplicates = int(batch_rows * 0.10)
    inserts = batch_rows - updates - deletes - duplicates
    step = 1 if clustered else max(1, table_rows // (updates + deletes))
    # stored keys spread over the whole table; every tenth update is older than stored
    changed = (
        f"select id * {step} as id, case when id % 10 = 0 then 50 else 200 end as ts,"
        f" concat('changed_', id) as name, cast(id as double) as amount,"
        f" concat('r', id % 50) as region, false as is_deleted from range({updates})"
    )
    deleted = (
        f"select (id + {updates}) * {step} as id, 300 as ts, cast(null as string) as name,"
        f" cast(null as double) as amount, cast(null as string) as region, true as is_deleted"
        f" from range({deletes})"
    )
    inserted = (
        f"select {table_rows} + id as id, 200 as ts, concat('new_', id) as name,"
        f" cast(id as double) as amount, concat('r', id % 50) as region, false as is_deleted"
        f" from range({inserts})"
    )
    batch_keys = updates + inserts
    # another version of a key of this batch (of an update or of an insert)
    duplicated = (
        f"select case when id % 2 = 0 then (id % {updates}) * {step}"
        f" else {table_rows} + (id % {inserts}) end as id, 250 as ts,"
        f" concat('dup_', id) as name, cast(id as double) as amount,"
        f" concat('r', id % 50) as region, false as is_deleted from range({duplicates})"
    )
    parts = " union all ".join(f"({part})" for part in (changed, deleted, inserted, duplicated))
    spark.sql(f"create or replace table {SCHEMA}.batch using {fmt} as {parts}")
    spark.sql(
        f"create or replace table {SCHEMA}.batch_dedup using {fmt} as"
        f" select {COLUMNS} from (select *, row_number() over (partition by id order by ts desc)"
        f" as version from {SCHEMA}.batch) where version = 1"
    )
    counts = {
        "table_rows": table_rows,
        "batch_rows": spark.table(f"{SCHEMA}.batch").count(),
        "batch_keys": spark.table(f"{SCHEMA}.batch_dedup").count(),
        "updates": updates,
        "deletes": deletes,
        "duplicates": duplicates,
        "inserts": inserts,
        "clustered": clustered,
    }
    assert counts["batch_rows"] == batch_rows and batch_keys + deletes <= batch_rows
    return counts


def run_model(model: str, table: str, full_refresh: bool = False) -> tuple[float, int]:
    """dbt's node time of one run of the model, and the shuffle bytes it wrote."""
    chosen = {"input": f"{SCHEMA}.{table}", "file_format": PROJECT.table_format}
    args = ["run", "--select", model, "--vars", json.dumps(chosen)]
    meter = ShuffleMeter()
    result = PROJECT.dbt(*args, *(["--full-refresh"] if full_refresh else []))
    return round(result.result[0].execution_time, 1), meter.shuffle_bytes()


def hudi_path(table: str) -> Path:
    return PROJECT.warehouse / "hudi" / table


def hudi_options(table: str, operation: str = "upsert") -> dict[str, str]:
    return hudi.write_options(table, HUDI_TABLES[table], operation=operation)


def run_hudi(spark, table: str, source: str, load: bool = False) -> tuple[float, int]:
    """Seconds of one Hudi write of the table ``source`` into the Hudi table (``load``: a
    new table by bulk_insert, else an upsert), and the shuffle bytes it wrote. The
    batch's delete column is Hudi's delete marker."""
    frame = spark.table(f"{SCHEMA}.{source}").withColumnRenamed("is_deleted", hudi.DELETE_MARKER)
    options = hudi_options(table, "bulk_insert" if load else "upsert")
    meter = ShuffleMeter()
    started = time.monotonic()
    hudi.write(frame, hudi_path(table), options, overwrite=load)
    seconds = round(time.monotonic() - started, 1)
    # the view the checks and scans read, on the table as this write left it
    hudi.read(spark, hudi_path(table)).withColumnRenamed(
        hudi.DELETE_MARKER, "is_deleted"
    ).createOrReplaceTempView(table)
    return seconds, meter.shuffle_bytes()


def relation(table: str) -> str:
    """What SQL names a table by: a Hudi table is its temporary view (run_hudi)."""
    return table if table in HUDI_TABLES else f"{SCHEMA}.{table}"


def first_differences(spark, left: str, right: str) -> list:
    """The smallest keys whose rows differ between the two tables (a row of one that the
    other lacks, as a multiset), at most SHOWN_KEYS."""
    a, b = relation(left), relation(right)
    rows = spark.sql(
        f"select id from ((select {COLUMNS} from {a} except all select {COLUMNS} from {b})"
        f" union all (select {COLUMNS} from {b} except all select {COLUMNS} from {a}))"
        f" group by id order by id limit {SHOWN_KEYS}"
    ).collect()
    return [row.id for row in rows]


def rows_of(spark, table: str, keys: list) -> list[list]:
    listed = ", ".join(str(key) for key in keys)
    sql = f"select {COLUMNS} from {relation(table)} where id in ({listed}) order by id"
    return [list(row) for row in spark.sql(sql).collect()]


def check_same_rows(spark, round_index: int, hudi_on: bool) -> dict:
    """Fails the run, naming the first differing keys and their rows on both sides,
    unless each pair of SAME_ROWS holds the same rows; Hudi's merge-on-read table against
    its copy-on-write one is reported only."""
    checked = {}
    for left, right in SAME_ROWS:
        if right in HUDI_TABLES and not hudi_on:
            continue
        keys = first_differences(spark, left, right)
        if keys:
            raise SystemExit(
                f"round {round_index}: {left} and {right} hold different rows; the first"
                f" differing keys {keys}:\n  {left}: {rows_of(spark, left, keys)}\n"
                f"  {right}: {rows_of(spark, right, keys)}\n  (columns {COLUMNS})"
            )
        checked[f"{left} = {right}"] = True
    if hudi_on:
        keys = first_differences(spark, "hudi_cow", "hudi_mor")
        checked["hudi_cow = hudi_mor"] = not keys
        if keys:
            print(
                f"round {round_index}: Hudi's merge-on-read read differs from its"
                f" copy-on-write table (reported, not failed): keys {keys}:"
                f" hudi_cow {rows_of(spark, 'hudi_cow', keys)},"
                f" hudi_mor {rows_of(spark, 'hudi_mor', keys)}",
                flush=True,
            )
    return checked


def scan(spark, table: str) -> float:
    """Seconds of a full scan: a hash of every column of every row. One scan first,
    untimed (JIT and metadata caches warm up on it, whatever the table), then the
    median of five: a scan of 10M rows takes about a second, so one noisy run would
    move a ratio by a third."""
    sql = f"select sum(xxhash64({COLUMNS})) from {relation(table)}"
    spark.sql(sql).collect()
    times = []
    for _ in range(5):
        started = time.monotonic()
        spark.sql(sql).collect()
        times.append(time.monotonic() - started)
    return round(statistics.median(times), 2)


def files(spark, table: str) -> dict:
    """Data files and delete files (Iceberg), or data files and deletion vectors (Delta)."""
    if PROJECT.table_format == "delta":
        from dbt_merge.auto_merge import delta

        listed = delta.load_table(spark, "spark_catalog", f"{SCHEMA}.{table}").all_files
        found = listed.selectExpr("count(*)", "count(deletionVector)").first()
        return {"data_files": found[0], "deletion_vectors": found[1]}
    rows = spark.sql(f"select content, count(*) from {SCHEMA}.{table}.files group by 1").collect()
    found = dict(rows)
    return {"data_files": found.get(0, 0), "delete_files": found.get(1, 0)}


def compact(spark, table: str) -> dict:
    """The scheduled compaction of a merge_on_read table, timed; the scan before and after."""
    contents = f"select sum(xxhash64({COLUMNS})), count(*) from {SCHEMA}.{table}"
    before = spark.sql(contents).first()
    scan_before = scan(spark, table)
    files_before = files(spark, table)
    args = json.dumps({"model": table, "execute": True})
    started = time.monotonic()
    PROJECT.dbt("run-operation", "dbt_merge.execute_upsert_compaction", "--args", args)
    seconds = round(time.monotonic() - started, 1)
    assert spark.sql(contents).first() == before, "compaction changed the contents"
    return {
        "scan_before_s": scan_before,
        "files_before": files_before,
        "compaction_s": seconds,
        "scan_after_s": scan(spark, table),
        "files_after": files(spark, table),
    }


def measured(hudi_on: bool) -> list[str]:
    """The tables in the first round's order: the plain merge first, Hudi's last."""
    tables = ["merged_prededuplicated", "merged_same_work", "upserted", "upserted_mor"]
    return [*tables, *HUDI_TABLES] if hudi_on else tables


def warm_up(spark, clustered: bool, hudi_on: bool) -> None:
    """Every table loaded and written once on WARM_UP_ROWS stored rows, untimed, and
    checked: the process's first MERGE (and Hudi's first upsert) loads and compiles
    classes that later writes reuse, which would otherwise fall on whichever table comes
    first in the first round."""
    started = time.monotonic()
    generate(spark, WARM_UP_ROWS, WARM_UP_ROWS // 10, clustered)
    for table in measured(hudi_on):
        if table in HUDI_TABLES:
            run_hudi(spark, table, "base", load=True)
            run_hudi(spark, table, "batch")
        else:
            run_model(table, "base", full_refresh=True)
            run_model(table, INPUTS.get(table, "batch"))
    check_same_rows(spark, 0, hudi_on)
    print(f"warm-up on {WARM_UP_ROWS:,} rows: {time.monotonic() - started:.0f} s", flush=True)


def mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 2) if values else None


def share(part: float | None, whole: float | None) -> float | None:
    return round(part / whole, 2) if part is not None and whole else None


def measure(
    spark, table_rows: int, batch_rows: int, clustered: bool = False, hudi_on: bool = True
) -> dict:
    """One size: fresh data, then two rounds on freshly loaded tables, each checked row
    for row and scanned."""
    tables = measured(hudi_on)
    started = time.monotonic()
    counts = generate(spark, table_rows, batch_rows, clustered)
    print(f"data: {json.dumps(counts)} ({time.monotonic() - started:.0f} s)", flush=True)
    writes: dict[str, list] = {table: [] for table in tables}
    shuffled: dict[str, list] = {table: [] for table in tables}
    scans: dict[str, list] = {table: [] for table in SCANNED if table in tables}
    checks = []
    # two rounds, the second in the other order, each on freshly loaded tables
    for round_index, order in enumerate((tables, tables[::-1]), start=1):
        for table in order:
            if table in HUDI_TABLES:
                seconds, _ = run_hudi(spark, table, "base", load=True)
            else:
                seconds, _ = run_model(table, "base", full_refresh=True)
            print(f"load {table}: {seconds} s (not compared)", flush=True)
        for table in order:
            source = INPUTS.get(table, "batch")
            if table in HUDI_TABLES:
                seconds, written = run_hudi(spark, table, source)
            else:
                seconds, written = run_model(table, source)
            writes[table].append(seconds)
            shuffled[table].append(written)
            print(f"{table}: {seconds} s, {written:,} shuffle bytes", flush=True)
        checks.append(check_same_rows(spark, round_index, hudi_on))
        for table in scans:
            scans[table].append(scan(spark, table))
        print(f"round {round_index}: same rows {checks[-1]}; scans {scans}", flush=True)

    stored = {table: spark.table(relation(table)).count() for table in tables}
    expected = table_rows + counts["inserts"] - counts["deletes"]
    for table in ("upserted", "upserted_mor", "merged_same_work", *HUDI_TABLES):
        if table in stored:
            assert stored[table] == expected, (table, stored[table], expected)
    older = spark.sql(
        f"select count(*) from {SCHEMA}.upserted where name like 'changed_%' and ts = 50"
    ).first()[0]
    assert older == 0, "upserted: an older update overwrote a stored row"
    compaction = compact(spark, "upserted_mor")
    print(f"merge_on_read: {json.dumps(compaction)}", flush=True)
    written = {table: mean(seconds) for table, seconds in writes.items()}
    scanned = {table: mean(seconds) for table, seconds in scans.items()}
    upsert_s, upsert_mor_s = written["upserted"], written["upserted_mor"]
    same_work_s = written["merged_same_work"]
    hudi_cow_s, hudi_mor_s = written.get("hudi_cow"), written.get("hudi_mor")
    return {
        **counts,
        "table_format": PROJECT.table_format,
        "upsert_s": upsert_s,
        "upsert_mor_s": upsert_mor_s,
        "hudi_cow_s": hudi_cow_s,
        "hudi_mor_s": hudi_mor_s,
        "merge_same_work_s": same_work_s,
        "merge_prededuplicated_s": written["merged_prededuplicated"],
        "cow_vs_hudi": share(upsert_s, hudi_cow_s),
        "mor_vs_hudi": share(upsert_mor_s, hudi_mor_s),
        "cow_vs_same_work": share(upsert_s, same_work_s),
        "mor_vs_same_work": share(upsert_mor_s, same_work_s),
        "rounds": writes,
        "scan_cow_s": scanned["upserted"],
        "scan_mor_s": scanned["upserted_mor"],
        "scan_same_work_s": scanned["merged_same_work"],
        "scan_hudi_cow_s": scanned.get("hudi_cow"),
        "scan_hudi_mor_s": scanned.get("hudi_mor"),
        "scan_rounds": scans,
        "same_rows": checks,
        "compaction_s": compaction["compaction_s"],
        "scan_mor_before_compaction_s": compaction["scan_before_s"],
        "scan_mor_compacted_s": compaction["scan_after_s"],
        "mor_files": {"before": compaction["files_before"], "after": compaction["files_after"]},
        "shuffle_bytes": {table: max(values) for table, values in shuffled.items()},
        "rows_after": stored,
        "hudi": {
            table: hudi.settings_used(spark, hudi_path(table), hudi_options(table))
            for table in HUDI_TABLES
            if hudi_on
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="10000000", help="stored rows (--table-rows), comma-separated"
    )
    parser.add_argument("--table-rows", type=int, help="one size: the same as --sizes N")
    parser.add_argument(
        "--batch-rows", type=int, help="rows of the batch (default: a tenth of the stored rows)"
    )
    parser.add_argument(
        "--clustered", action="store_true", help="the batch's stored keys are one id range"
    )
    parser.add_argument("--table-format", choices=("iceberg", "delta"), default="iceberg")
    parser.add_argument("--no-hudi", action="store_true", help="without Hudi's tables")
    parser.add_argument("--json", type=Path, help="default: bench/out/upsert[_delta].json")
    args = parser.parse_args()
    global PROJECT
    PROJECT = BenchProject("bench_upsert", SCHEMA, args.table_format)
    suffix = "_delta" if args.table_format == "delta" else ""
    args.json = args.json or OUT / f"upsert{suffix}.json"
    sizes = [args.table_rows] if args.table_rows else [int(s) for s in args.sizes.split(",")]
    hudi_on = not args.no_hudi

    run = Run()
    PROJECT.write(MODELS, macros=MACROS)
    PROJECT.dbt("deps")
    settings = sessions.SessionSettings(
        warehouse=PROJECT.warehouse, log_dir=OUT / "logs", table_format=args.table_format
    )
    if hudi_on:  # this process's session only: the adapter's defaults stay as they are
        settings = sessions.SessionSettings(
            warehouse=settings.warehouse,
            log_dir=settings.log_dir,
            table_format=settings.table_format,
            server_side_parameters=hudi.session_parameters(settings),
        )
    spark = sessions.get_session(settings)
    warm_up(spark, args.clustered, hudi_on)
    results = [
        measure(spark, size, args.batch_rows or size // 10, args.clustered, hudi_on)
        for size in sizes
    ]
    run.write(args.json, results, table_format=args.table_format)
    print()
    print(
        "| table rows | batch rows | upsert COW | Hudi COW | ÷ Hudi | same-work merge | ÷ merge"
        " | upsert MOR | Hudi MOR | ÷ Hudi | ÷ merge | merge, pre-deduplicated batch |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in results:
        print(
            f"| {row['table_rows']:,} | {row['batch_rows']:,} | {row['upsert_s']} s"
            f" | {row['hudi_cow_s']} s | {row['cow_vs_hudi']} | {row['merge_same_work_s']} s"
            f" | {row['cow_vs_same_work']} | {row['upsert_mor_s']} s | {row['hudi_mor_s']} s"
            f" | {row['mor_vs_hudi']} | {row['mor_vs_same_work']}"
            f" | {row['merge_prededuplicated_s']} s |"
        )
    print()
    print(
        "| scan: upsert COW | Hudi COW | same-work merge | upsert MOR | Hudi MOR"
        " | compaction | upsert MOR compacted |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in results:
        print(
            f"| {row['scan_cow_s']} s | {row['scan_hudi_cow_s']} s | {row['scan_same_work_s']} s"
            f" | {row['scan_mor_s']} s | {row['scan_hudi_mor_s']} s | {row['compaction_s']} s"
            f" | {row['scan_mor_compacted_s']} s |"
        )
    loop = json.loads(args.json.read_text())["machine"]["loop_s"]
    print(f"\nthe machine's loop (bench/report.py): {loop} s before and after")


if __name__ == "__main__":
    main()
