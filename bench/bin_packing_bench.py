"""Benchmark of dbt_merge.bin_packing: items in correlation groups (default 1M in 1,000), local[2].

The items (id, group, size, arrival) are generated once into an Iceberg table (not
timed). Sizes are uniform in [1, max_bytes / 4]. Then, each written to an Iceberg
table, as a dbt Python model would:
  - streaming bin packing (`bin_pack`: first fit in arrival order per group, max
    bytes and max entries, one applyInPandas task per group);
  - offline planning (`plan_offline`: first-fit-decreasing per group), reported as
    bins against the lower bound ceil(total bytes / max bytes) per group;
  - the naive baseline in the same process: what a hand-written job does, collect
    the items to the driver and first-fit in arrival order with a linear scan over
    the group's open bins; its bins are reported against the same lower bound.

Usage:
  .venv/bin/python bench/bin_packing_bench.py [--sizes 100000,1000000] [--groups 1000]
      [--max-bytes 100000] [--baseline-cap 600] [--json bench/out/bin_packing.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bench_project import OUT, local_session  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from report import Run  # noqa: E402
from spark_metrics import ShuffleMeter  # noqa: E402

from dbt_merge.bin_packing import bin_pack, offline_report, plan_offline  # noqa: E402

SCHEMA = "bench_bin_packing"


def generate(spark, items: int, groups: int, max_bytes: int) -> None:
    spark.sql(f"create schema if not exists {SCHEMA}")
    spark.sql(
        f"create or replace table {SCHEMA}.items using iceberg as"
        f" select concat('i', id) as item_id, concat('g', id % {groups}) as group_id,"
        f" 1 + cast(floor(rand(7) * {max_bytes // 4}) as bigint) as size_bytes,"
        f" timestamp_seconds(1700000000 + id) as arrived_at"
        f" from range({items})"
    )


def timed_write(frame, table: str) -> tuple[float, int]:
    """Write the frame to an Iceberg table: the seconds, and the shuffle bytes written."""
    meter, started = ShuffleMeter(), time.monotonic()
    frame.writeTo(f"{SCHEMA}.{table}").using("iceberg").createOrReplace()
    return round(time.monotonic() - started, 1), meter.shuffle_bytes()


def naive_first_fit(spark, max_bytes: int, max_entries: int, cap: float) -> dict:
    """Collect, then first fit in arrival order with a linear scan of each group's bins."""
    meter, started = ShuffleMeter(), time.monotonic()
    rows = spark.table(f"{SCHEMA}.items").orderBy("arrived_at", "item_id").collect()
    bins: dict[str, list[list[int]]] = defaultdict(list)  # group -> [bytes, entries]
    for done, row in enumerate(rows):
        if done % 10000 == 0 and time.monotonic() - started > cap:
            return {"seconds": None, "finished": False, "items_done": done}
        open_bins = bins[row.group_id]
        for b in open_bins:
            if b[0] + row.size_bytes <= max_bytes and b[1] < max_entries:
                b[0] += row.size_bytes
                b[1] += 1
                break
        else:
            open_bins.append([row.size_bytes, 1])
    seconds = round(time.monotonic() - started, 1)
    count = sum(len(v) for v in bins.values())
    lower = sum(math.ceil(sum(b[0] for b in v) / max_bytes) for v in bins.values())
    return {
        "seconds": seconds,
        "finished": True,
        "bins": count,
        "lower_bound": lower,
        "shuffle_bytes": meter.shuffle_bytes(),
    }


def measure(spark, items_count: int, args) -> dict:
    """One size: fresh items, then streaming, offline and (unless off) the naive baseline."""
    generate(spark, items_count, args.groups, args.max_bytes)
    items = spark.table(f"{SCHEMA}.items")
    print(f"items: {items_count:,} in {args.groups:,} groups", flush=True)

    # the settings both packers share
    settings = dict(
        id_column="item_id",
        size_column="size_bytes",
        correlation_column="group_id",
        max_bytes=args.max_bytes,
        max_entries=args.max_entries,
        model_name="bench",
    )
    packed = bin_pack(items, arrival_column="arrived_at", **settings)
    streaming_s, streaming_shuffle = timed_write(packed, "streaming_bins")
    streaming = spark.table(f"{SCHEMA}.streaming_bins")
    streaming_bins = streaming.count()
    members = streaming.select(F.sum("entries")).first()[0]
    assert members == items_count, "every item is in exactly one bin"
    print(f"streaming bin_pack: {streaming_s} s, {streaming_bins:,} bins", flush=True)

    planned = plan_offline(items, **settings)
    offline_s, offline_shuffle = timed_write(planned, "offline_bins")
    report = offline_report(
        spark.table(f"{SCHEMA}.offline_bins"), max_bytes=args.max_bytes, model_name="bench"
    )
    total = report.where("level = 'total'").first()
    worst = report.where("level = 'group'").agg(F.max("bins_over_lower_bound")).first()[0]
    print(
        f"offline plan_offline: {offline_s} s, {total.bins:,} bins, lower bound"
        f" {total.lower_bound:,} ({total.bins_over_lower_bound:.4f}; worst group {worst:.4f})",
        flush=True,
    )

    row = {
        "items": items_count,
        "groups": args.groups,
        "max_bytes": args.max_bytes,
        "streaming": {
            "seconds": streaming_s,
            "bins": streaming_bins,
            "shuffle_bytes": streaming_shuffle,
        },
        "offline": {
            "seconds": offline_s,
            "shuffle_bytes": offline_shuffle,
            "bins": total.bins,
            "lower_bound": total.lower_bound,
            "ratio": round(total.bins_over_lower_bound, 4),
            "worst_group_ratio": round(worst, 4),
        },
    }
    if not args.no_baseline:
        naive = naive_first_fit(spark, args.max_bytes, args.max_entries, args.baseline_cap)
        row["naive"] = naive
        print(f"naive driver first fit: {json.dumps(naive)}", flush=True)
        if naive["finished"]:
            # the same first fit in arrival order: the same number of bins
            assert naive["bins"] == streaming_bins, (naive["bins"], streaming_bins)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000", help="items, comma-separated")
    parser.add_argument("--items", type=int, help="one size: the same as --sizes N")
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--max-bytes", type=int, default=100_000)
    parser.add_argument("--max-entries", type=int, default=1_000)
    parser.add_argument("--baseline-cap", type=float, default=600.0)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--json", type=Path, default=OUT / "bin_packing.json")
    args = parser.parse_args()
    sizes = [args.items] if args.items else [int(s) for s in args.sizes.split(",")]

    run = Run()
    spark = local_session()
    results = [measure(spark, size, args) for size in sizes]
    run.write(args.json, results)

    print()
    print(
        "| items | groups | streaming `bin_pack` | offline `plan_offline` (bins / lower bound)"
        " | naive driver first fit (bins / lower bound) |"
    )
    print("| ---: | ---: | ---: | ---: | ---: |")
    for row in results:
        naive = row.get("naive") or {}
        naive_text = (
            f"{naive['seconds']} s, {naive['bins']:,} bins"
            f" ({naive['bins'] / naive['lower_bound']:.4f})"
            if naive.get("finished")
            else ("did not finish" if naive else "-")
        )
        offline = row["offline"]
        print(
            f"| {row['items']:,} | {row['groups']:,} | {row['streaming']['seconds']} s"
            f" ({row['streaming']['bins']:,} bins) | {offline['seconds']} s,"
            f" {offline['bins']:,} / {offline['lower_bound']:,} = {offline['ratio']:.4f}"
            f" | {naive_text} |"
        )


if __name__ == "__main__":
    main()
