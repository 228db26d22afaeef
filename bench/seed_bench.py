"""Benchmark of `dbt seed` on the spark_session adapter: one DataFrame write against
dbt-spark's `insert into ... values` batches, in one process.

Each size gets a generated CSV of mixed types (11 columns: integers, decimals, booleans,
dates, timestamps, text with quotes, commas, backslashes and non-ASCII characters, empty
cells), seeded twice into Iceberg tables of a throw-away project (bench/out/bench_seed_project):
once with `seed_load: dataframe` (the adapter's path) and once with `seed_load: insert`
(dbt-spark's), up to `--insert-max` rows (the INSERT path takes minutes at 100k). The
DataFrame write runs twice: with the CSV read by dbt's own function
(``agate_helper.from_csv``) and by the adapter's (``csv_table.from_csv``, the same agate
table faster), and the two readings alone are timed and compared too. The
figure is the seed node's time as dbt reports it, creating the table, with the
SparkSession up and warmed by a 100-row seed through both paths; `--repeat` measures
each size again (a new table each time). The two tables are then compared
(schema, and rows both ways with `except all`), so the speed is not bought with a
difference.

Usage:
  .venv/bin/python bench/seed_bench.py [--sizes 5000,100000,1000000] [--insert-max 100000]
      [--json bench/out/seed.json]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bench_project import OUT, WAREHOUSE, BenchProject, local_session  # noqa: E402
from dbt_common.clients import agate_helper  # noqa: E402
from report import Run  # noqa: E402

from dbt.adapters.spark_session import csv_table  # noqa: E402

SCHEMA = "bench_seed"
PROJECT = BenchProject("bench_seed", SCHEMA)
HEADER = [
    "person_id", "full_name", "amount", "quantity", "is_active", "born_on",
    "seen_at", "note", "postcode", "score", "city",
]  # fmt: skip
NOTES = ["", "plain", "ünïcode ✓ 東京", "comma, inside", 'a "quoted" word', "back\\slash", "it's"]
CITIES = ["Oslo", "Bergen", "Trondheim", "", "São Paulo"]


def generate(rows: int, path: Path) -> Path:
    """A CSV of ``rows`` people of mixed types (the same rows for the same size)."""
    if path.exists():
        return path
    rng = random.Random(rows)
    born0, seen0 = dt.date(1940, 1, 1), dt.datetime(2020, 1, 1)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        for i in range(rows):
            writer.writerow(
                [
                    i,
                    f"Person {i} O'Neil",
                    f"{rng.random() * 10000:.2f}",
                    rng.randint(0, 500) if rng.random() > 0.05 else "",
                    rng.choice(["true", "false", ""]),
                    (born0 + dt.timedelta(days=rng.randint(0, 30000))).isoformat(),
                    (seen0 + dt.timedelta(seconds=rng.randint(0, 10**8))).strftime(
                        "%Y-%m-%d %H:%M:%S"
                    ),
                    rng.choice(NOTES),
                    f"{rng.randint(0, 9999):04d}",
                    rng.random(),
                    rng.choice(CITIES),
                ]
            )
    return path


def seed_time(name: str, load: str, reader=csv_table.from_csv) -> tuple[float, float]:
    """(dbt's node time, the whole `dbt seed` call) of seeding ``name`` with ``load``,
    the CSV read by ``reader`` (the adapter's, or dbt's own ``DBT_FROM_CSV``)."""
    agate_helper.from_csv = reader
    started = time.perf_counter()
    try:
        result = PROJECT.dbt("seed", "--select", name, "--vars", json.dumps({"seed_load": load}))
    finally:
        agate_helper.from_csv = csv_table.from_csv
    wall = time.perf_counter() - started
    return result.result.results[0].execution_time, wall


def read_times(path: Path) -> dict:
    """Seconds of reading the CSV into dbt's agate table: dbt's function and the
    adapter's (csv_table), and whether they gave the same table."""
    times, tables = {}, {}
    for name, reader in (("dbt", csv_table.DBT_FROM_CSV), ("adapter", csv_table.from_csv)):
        started = time.perf_counter()
        tables[name] = reader(str(path), {})
        times[f"read_{name}_s"] = round(time.perf_counter() - started, 2)
    dbt, adapter = tables["dbt"], tables["adapter"]
    times["same_agate_table"] = (
        dbt.column_names == adapter.column_names
        and [type(t) for t in dbt.column_types] == [type(t) for t in adapter.column_types]
        and all(
            [repr(v) for v in a.values()] == [repr(v) for v in b.values()]
            for a, b in zip(dbt.rows, adapter.rows, strict=True)
        )
    )
    return times


def same_table(spark, left: str, right: str) -> bool:
    a, b = spark.table(f"{SCHEMA}.{left}"), spark.table(f"{SCHEMA}.{right}")
    if a.dtypes != b.dtypes:
        print(f"  types differ: {a.dtypes} / {b.dtypes}")
        return False
    return a.exceptAll(b).isEmpty() and b.exceptAll(a).isEmpty()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="5000,100000,1000000")
    parser.add_argument("--insert-max", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path, default=OUT / "seed.json")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    OUT.mkdir(parents=True, exist_ok=True)
    csvs = {n: generate(n, OUT / f"seed_rows_{n}.csv") for n in [100, *sizes]}
    seeds = {"warm_frame.csv": csvs[100], "warm_insert.csv": csvs[100]}
    for n, path in csvs.items():
        seeds[f"frame_{n}.csv"] = path
        if n <= args.insert_max:
            seeds[f"insert_{n}.csv"] = path
    config = {"seeds": {"bench_seed": {"+file_format": "iceberg"}}}
    # the load method comes from a var, so that one project holds both paths
    config["seeds"]["bench_seed"]["+seed_load"] = "{{ var('seed_load', 'dataframe') }}"
    PROJECT.write({}, config, seeds=seeds)
    PROJECT.dbt("deps")
    spark = local_session()
    seed_time("warm_frame", "dataframe")
    seed_time("warm_insert", "insert")
    run = Run()
    results = []
    for n in [n for _ in range(args.repeat) for n in sizes]:
        row: dict = {"rows": n}
        row.update(read_times(csvs[n]))
        print(
            f"{n:>9} rows  reading the CSV: dbt's {row['read_dbt_s']:.2f} s, the adapter's"
            f" {row['read_adapter_s']:.2f} s, same agate table: {row['same_agate_table']}",
            flush=True,
        )
        # the DataFrame write with the CSV read by dbt's own function, then the adapter's
        paths = [
            ("dataframe_dbt_csv", f"frame_{n}", "dataframe", csv_table.DBT_FROM_CSV),
            ("dataframe", f"frame_{n}", "dataframe", csv_table.from_csv),
        ]
        if n <= args.insert_max:
            paths.append(("insert", f"insert_{n}", "insert", csv_table.from_csv))
        for label, name, load, reader in paths:
            spark.sql(f"drop table if exists {SCHEMA}.{name}")
            node, wall = seed_time(name, load, reader)
            row[f"{label}_s"] = round(node, 2)
            row[f"{label}_wall_s"] = round(wall, 2)
            print(
                f"{n:>9} rows  {label:<17} {node:8.2f} s (dbt seed call {wall:.2f} s)", flush=True
            )
        row["ratio_dbt_csv_to_dataframe"] = round(
            row["dataframe_dbt_csv_s"] / row["dataframe_s"], 2
        )
        if "insert_s" in row:
            row["ratio_insert_to_dataframe"] = round(row["insert_s"] / row["dataframe_s"], 1)
            row["same_rows_and_types"] = same_table(spark, f"frame_{n}", f"insert_{n}")
            print(
                f"{n:>9} rows  insert / dataframe = {row['ratio_insert_to_dataframe']}x, "
                f"same rows and types: {row['same_rows_and_types']}",
                flush=True,
            )
        results.append(row)
    run.write(args.json, results, warehouse=str(WAREHOUSE))


if __name__ == "__main__":
    main()
