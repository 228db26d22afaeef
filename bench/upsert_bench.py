"""Benchmark of incremental_strategy='upsert' against dbt-spark's own `merge` strategy.

A throw-away dbt project (bench/out/bench_upsert_project) has three incremental Iceberg
models over the same `--table-rows` rows (default 10M; id, ts, name, amount, region,
is_deleted):
  upserted      incremental_strategy='upsert', event-time ordering, delete_column
                (table_type copy_on_write, the default);
  upserted_mor  the same with table_type merge_on_read;
  merged        dbt-spark's merge strategy (unique_key only).
Both are loaded with the table first (not timed). Then one batch of `--batch-rows`
rows (default 1M) is applied to each, and the figure is the node time dbt reports,
the mean of two rounds on freshly loaded tables (merge first, then upsert first):
  - 30% updates of stored keys (a tenth of them older than the stored version),
  - 2% deletes of stored keys,
  - 10% extra versions of keys already in the batch (duplicate keys),
  - the rest new keys.
`upserted` gets the raw batch and does the precombine, the ordering against the
stored rows and the deletes itself. `merged` gets the same batch already
deduplicated (one row per key, the newest, computed before the clock starts), since
dbt-spark's merge fails on duplicate keys; it has no ordering and no deletes.

After the rounds: a full scan of each result (every column of every row; one warm-up
scan, then the median of five), then the scheduled compaction of the merge_on_read table
(dbt_merge.execute_upsert_compaction, timed as a whole run-operation) and its scan
again. The contents of the two upsert tables are checked equal before and after.

`--clustered`: the batch's stored keys are one contiguous range of ids (the first
ones) instead of spread over the whole table, so few data files hold them.

`--table-format delta`: every table is a Delta table (the profile's `table_format:
delta`, its own warehouse), merge_on_read is Delta's deletion vectors, and dbt-spark's
`merge` runs on Delta, and the compaction is Delta's REORG TABLE ... APPLY (PURGE).

Usage:
  .venv/bin/python bench/upsert_bench.py [--sizes 1000000,10000000] [--batch-rows N]
      [--clustered] [--table-format delta] [--json bench/out/upsert.json]
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
    "merged.sql": """
{{ config(materialized='incremental', incremental_strategy='merge',
          file_format=var('file_format'),
          unique_key='id') }}
select * from {{ var('input') }}
""",
}


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


def scan(spark, table: str) -> float:
    """Seconds of a full scan: a hash of every column of every row. One scan first,
    untimed (JIT and metadata caches warm up on it, whatever the table), then the
    median of five: a scan of 10M rows takes about a second, so one noisy run would
    move a ratio by a third."""
    sql = f"select sum(xxhash64({COLUMNS})) from {SCHEMA}.{table}"
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


def measure(spark, table_rows: int, batch_rows: int, clustered: bool = False) -> dict:
    """One size: fresh data, then two rounds of merge and upsert on freshly loaded tables."""
    started = time.monotonic()
    counts = generate(spark, table_rows, batch_rows, clustered)
    print(f"data: {json.dumps(counts)} ({time.monotonic() - started:.0f} s)", flush=True)
    # two rounds, the second in the other order, each on freshly loaded tables
    times = {"merged": [], "upserted": [], "upserted_mor": []}
    shuffled = {"merged": [], "upserted": [], "upserted_mor": []}
    for order in (("merged", "upserted", "upserted_mor"), ("upserted_mor", "upserted", "merged")):
        for model in order:
            seconds, _ = run_model(model, "base", full_refresh=True)
            print(f"load {model}: {seconds} s (not compared)", flush=True)
        for model in order:
            seconds, written = run_model(model, "batch_dedup" if model == "merged" else "batch")
            times[model].append(seconds)
            shuffled[model].append(written)
            print(f"{model}: {seconds} s, {written:,} shuffle bytes", flush=True)
    merge_s = round(sum(times["merged"]) / 2, 1)
    upsert_s = round(sum(times["upserted"]) / 2, 1)
    upsert_mor_s = round(sum(times["upserted_mor"]) / 2, 1)

    models = ("merged", "upserted", "upserted_mor")
    stored = {model: spark.table(f"{SCHEMA}.{model}").count() for model in models}
    expected_upserted = table_rows + counts["inserts"] - counts["deletes"]
    assert stored["upserted"] == expected_upserted, (stored, expected_upserted)
    assert stored["upserted_mor"] == expected_upserted, (stored, expected_upserted)
    for model in ("upserted", "upserted_mor"):
        older = spark.sql(
            f"select count(*) from {SCHEMA}.{model} where name like 'changed_%' and ts = 50"
        ).first()[0]
        assert older == 0, f"{model}: an older update overwrote a stored row"
    differ = spark.sql(
        f"select count(*) from (select * from {SCHEMA}.upserted"
        f" except all select * from {SCHEMA}.upserted_mor)"
    ).first()[0]
    assert differ == 0, "copy_on_write and merge_on_read give different rows"
    scans = {model: scan(spark, model) for model in ("merged", "upserted")}
    compaction = compact(spark, "upserted_mor")
    print(f"scans: {scans}, merge_on_read: {json.dumps(compaction)}", flush=True)
    return {
        **counts,
        "table_format": PROJECT.table_format,
        "merge_s": merge_s,
        "upsert_s": upsert_s,
        "rounds": times,
        "ratio": round(upsert_s / merge_s, 2),
        "upsert_mor_s": upsert_mor_s,
        "mor_ratio": round(upsert_mor_s / merge_s, 2),
        "scan_merged_s": scans["merged"],
        "scan_cow_s": scans["upserted"],
        "scan_mor_s": compaction["scan_before_s"],
        "scan_mor_ratio": round(compaction["scan_before_s"] / scans["upserted"], 2),
        "compaction_s": compaction["compaction_s"],
        "scan_mor_compacted_s": compaction["scan_after_s"],
        "scan_mor_compacted_ratio": compaction["scan_after_s"]
        and round(compaction["scan_after_s"] / scans["upserted"], 2),
        "mor_files": {"before": compaction["files_before"], "after": compaction["files_after"]},
        "merge_shuffle_bytes": max(shuffled["merged"]),
        "upsert_shuffle_bytes": max(shuffled["upserted"]),
        "upsert_mor_shuffle_bytes": max(shuffled["upserted_mor"]),
        "rows_after": stored,
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
    parser.add_argument("--json", type=Path, help="default: bench/out/upsert[_delta].json")
    args = parser.parse_args()
    global PROJECT
    PROJECT = BenchProject("bench_upsert", SCHEMA, args.table_format)
    suffix = "_delta" if args.table_format == "delta" else ""
    args.json = args.json or OUT / f"upsert{suffix}.json"
    sizes = [args.table_rows] if args.table_rows else [int(s) for s in args.sizes.split(",")]

    run = Run()
    PROJECT.write(MODELS)
    PROJECT.dbt("deps")
    spark = sessions.get_session(
        sessions.SessionSettings(
            warehouse=PROJECT.warehouse, log_dir=OUT / "logs", table_format=args.table_format
        )
    )
    results = [
        measure(spark, size, args.batch_rows or size // 10, args.clustered) for size in sizes
    ]
    run.write(args.json, results, table_format=args.table_format)
    print()
    print(
        "| table rows | batch rows | dbt-spark merge (dedup'd batch) | upsert COW (raw batch)"
        " | ratio | upsert MOR | ratio |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in results:
        print(
            f"| {row['table_rows']:,} | {row['batch_rows']:,} | {row['merge_s']} s"
            f" | {row['upsert_s']} s | {row['ratio']} | {row['upsert_mor_s']} s"
            f" | {row['mor_ratio']} |"
        )
    print()
    print("| scan: merge | COW | MOR | MOR / COW | compaction | MOR compacted | / COW |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in results:
        print(
            f"| {row['scan_merged_s']} s | {row['scan_cow_s']} s | {row['scan_mor_s']} s"
            f" | {row['scan_mor_ratio']} | {row['compaction_s']} s"
            f" | {row['scan_mor_compacted_s']} s | {row['scan_mor_compacted_ratio']} |"
        )


if __name__ == "__main__":
    main()
