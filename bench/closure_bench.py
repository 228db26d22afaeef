"""Benchmark of dbt_merge.closure.connected_components against a naive baseline.

Graphs (string node names, generated in Spark):
  random  - n nodes, n edges between random nodes (average degree ~2)
  chain   - one path of `edges` edges (diameter = edges)
  stars   - 4 giant stars sharing their edges equally
Each is timed for connected_components (the default method, and optionally the
distributed one forced) including writing the result to an Iceberg table, and for
a naive iterative min-label propagation in the same process, capped in time
("did not finish" when the cap is hit).

Usage:
  .venv/bin/python bench/closure_bench.py --sizes 1000000,5000000 [--distributed]
      [--baseline-cap 600] [--json bench/out/closure.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from baselines import naive_min_label  # noqa: E402
from spark_metrics import ShuffleMeter  # noqa: E402

from dbt.adapters.spark_session import session as sessions  # noqa: E402
from dbt_merge.core.spark import materialize  # noqa: E402
from dbt_merge.entity_merge.closure import ClosureStats, connected_components  # noqa: E402

SHAPES = ("random", "chain", "stars")
STARS = 4


def graph(spark: SparkSession, shape: str, edges: int) -> DataFrame:
    ids = spark.range(edges)
    name = lambda c: F.concat(F.lit("n"), c.cast("string"))  # noqa: E731
    if shape == "random":
        src = F.floor(F.rand(11) * edges).cast("long")
        dst = F.floor(F.rand(12) * edges).cast("long")
    elif shape == "chain":
        src, dst = F.col("id"), F.col("id") + 1
    elif shape == "stars":
        src, dst = -(F.col("id") % STARS) - 1, F.col("id")
    else:
        raise ValueError(f"unknown shape {shape}")
    return ids.select(name(src).alias("src"), name(dst).alias("dst"))


def _line(shape, edges, method, seconds, rounds, components) -> str:
    return f"{shape:7} {edges:>9} {method:24} {seconds:>8} {rounds:>6} {components:>10}"


def timed_write(spark: SparkSession, result: DataFrame, table: str) -> None:
    result.writeTo(table).using("iceberg").createOrReplace()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000000,5000000")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument(
        "--distributed", action="store_true", help="also time the forced distributed method"
    )
    parser.add_argument("--baseline-cap", type=float, default=600.0)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--json", default=str(ROOT / "bench" / "out" / "closure.json"))
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    out_dir = ROOT / "bench" / "out"
    warehouse = out_dir / "warehouse"
    shutil.rmtree(warehouse, ignore_errors=True)
    spark = sessions.get_session(
        sessions.SessionSettings(
            warehouse=warehouse,
            log_dir=out_dir / "logs",
            server_side_parameters={
                "spark.master": args.master,
                "spark.driver.memory": "12g",
                "spark.sql.shuffle.partitions": "8",
            },
        )
    )
    spark.sql("create schema if not exists bench")
    machine = (
        f"{platform.node()} {platform.machine()}, {spark.sparkContext.defaultParallelism} cores"
    )
    print(f"# closure benchmark on {args.master} ({machine}), Spark {spark.version}")
    header = (
        f"{'shape':7} {'edges':>9} {'method':12} {'seconds':>8} {'rounds':>6} {'components':>10}"
    )
    print(header)
    results = []
    for size in [int(s) for s in args.sizes.split(",")]:
        for shape in args.shapes.split(","):
            edges = materialize(graph(spark, shape, size))
            methods = [("dbt_merge", None)]
            if args.distributed:
                methods.append(("distributed", 0))
            for label, limit in methods:
                stats = ClosureStats()
                meter, started = ShuffleMeter(), time.monotonic()
                kwargs = {} if limit is None else {"max_driver_edges": limit}
                result = connected_components(edges, stats=stats, **kwargs)
                timed_write(spark, result, f"bench.cc_{shape}")
                seconds = time.monotonic() - started
                shuffled = meter.shuffle_bytes()
                components = spark.table(f"bench.cc_{shape}").select("component").distinct().count()
                row = dict(
                    shape=shape,
                    edges=size,
                    method=f"{label}:{stats.method}",
                    seconds=round(seconds, 1),
                    rounds=stats.rounds,
                    components=components,
                    nodes=stats.nodes,
                    shuffle_bytes=shuffled,
                )
                results.append(row)
                print(
                    _line(shape, size, row["method"], f"{seconds:.1f}", stats.rounds, components),
                    flush=True,
                )
            if not args.no_baseline:
                meter, started = ShuffleMeter(), time.monotonic()
                labels, rounds = naive_min_label(edges, args.baseline_cap)
                if labels is None:
                    seconds, components, finished = time.monotonic() - started, None, False
                    shuffled = meter.shuffle_bytes()
                else:
                    timed_write(spark, labels, f"bench.naive_{shape}")
                    seconds = time.monotonic() - started
                    shuffled = meter.shuffle_bytes()
                    components = labels.select("component").distinct().count()
                    finished = True
                row = dict(
                    shape=shape,
                    edges=size,
                    method="naive",
                    seconds=round(seconds, 1),
                    rounds=rounds,
                    components=components,
                    finished=finished,
                    shuffle_bytes=shuffled,
                )
                results.append(row)
                shown = f"{seconds:.1f}" if finished else f"DNF>{args.baseline_cap:.0f}"
                print(
                    _line(shape, size, "naive", shown, rounds, components if finished else "-"),
                    flush=True,
                )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(
        json.dumps({"master": args.master, "machine": machine, "results": results}, indent=2)
    )
    print(f"# results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
