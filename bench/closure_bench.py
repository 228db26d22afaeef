"""Benchmark of dbt_merge.closure.connected_components against two baselines.

Graphs (string node names, generated in Spark):
  random  - n edges between random nodes of n (average degree ~2)
  chain   - one path of `edges` edges (diameter = edges)
  chains  - many paths of CHAIN edges each
  stars   - 4 giant stars sharing their edges equally
Each is timed, in one process and including writing the result to an Iceberg table,
for the methods of --methods:
  default      - connected_components as users call it (it picks driver or distributed)
  driver       - the driver method forced (max_driver_edges large)
  distributed  - the distributed method forced (max_driver_edges=0)
  rounds       - the distributed method's rounds to the end (max_task_edges=0 too)
  sql          - the SQL closure, materialized='entity_components' (large-star/small-star
                 rounds in SQL statements), run by dbt in this process on the edges
                 written to a table first (not timed); its seconds are the dbt command's
  lss          - large-star/small-star, the loop of GraphFrames and Splink (baselines.py)
  naive        - min-label propagation, one round per hop (baselines.py)
Before the first measured run every method runs once, not timed, on 10,000 random
edges: the JVM's first jobs and dbt's first (full) parse of the SQL closure's project
are paid there, as a scheduled dbt run parses only what changed.
The two baselines are capped in time ("did not finish" when the cap is hit). Each row
shows seconds, rounds, shuffle bytes and the component count, and each method's result
is compared, node by node, with the first method's (``same``); after each shape, the
ratios. A driver method's row also holds its estimated need
(``closure_memory.driver_need``) and the process's peak resident memory (``ru_maxrss``:
the method's when it runs first, with nothing else held in Python).

--table SCHEMA.NAME runs the methods on that table's (src, dst) instead of generated
graphs, in the warehouse as it is: for example the 25M edges of the entity merge
benchmark at 10M records (``--table bench_entity_merge.people_edges``).

Usage:
  .venv/bin/python bench/closure_bench.py --sizes 1000000,3000000
      [--shapes random,chain,chains,stars] [--methods default,distributed,sql,lss,naive]
      [--baseline-cap 600] [--lss-cap 600] [--no-baseline] [--json bench/out/closure.json]
      [--table SCHEMA.NAME]
  (--distributed, kept for bench/sweep.py, adds the forced distributed method)
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import sys
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from baselines import large_star_small_star, naive_min_label  # noqa: E402
from bench_project import BenchProject  # noqa: E402
from report import Run  # noqa: E402
from spark_metrics import ShuffleMeter  # noqa: E402

from dbt.adapters.spark_session import session as sessions  # noqa: E402
from dbt_merge.core.spark import materialize  # noqa: E402
from dbt_merge.entity_merge.closure import (  # noqa: E402
    ClosureStats,
    connected_components,
    edge_pairs,
    measure_pairs,
)
from dbt_merge.entity_merge.closure_memory import driver_need  # noqa: E402

SHAPES = ("random", "chain", "chains", "stars")
WARMUP_EDGES = 10_000  # the untimed run of every method before the first measured one
METHODS = ("default", "driver", "distributed", "rounds", "sql", "lss", "naive")
DEFAULT_METHODS = "default,distributed,lss,naive"
BASELINES = {"lss": "large-star/small-star", "naive": "naive"}
STARS = 4
CHAIN = 5_000  # edges of each path of "chains"
FORCE = {
    "default": {},
    "driver": {"max_driver_edges": 1 << 40},
    "distributed": {"max_driver_edges": 0},
    "rounds": {"max_driver_edges": 0, "max_task_edges": 0},
}


def graph(spark: SparkSession, shape: str, edges: int) -> DataFrame:
    ids = spark.range(edges)
    name = lambda c: F.concat(F.lit("n"), c.cast("string"))  # noqa: E731
    if shape == "random":
        src = F.floor(F.rand(11) * edges).cast("long")
        dst = F.floor(F.rand(12) * edges).cast("long")
    elif shape == "chain":
        src, dst = F.col("id"), F.col("id") + 1
    elif shape == "chains":  # path k holds nodes k*(CHAIN+1) .. k*(CHAIN+1)+CHAIN
        src = F.col("id") + F.floor(F.col("id") / CHAIN).cast("long")
        dst = src + 1
    elif shape == "stars":
        src, dst = -(F.col("id") % STARS) - 1, F.col("id")
    else:
        raise ValueError(f"unknown shape {shape}")
    return ids.select(name(src).alias("src"), name(dst).alias("dst"))


def _line(shape, edges, method, seconds, rounds, shuffled, components) -> str:
    mb = "-" if shuffled is None else f"{shuffled / 1e6:.0f}"
    return f"{shape:7} {edges:>9} {method:28} {seconds:>8} {rounds:>6} {mb:>10} {components:>10}"


def slug(shape: str) -> str:
    """The shape's part of its result tables' names."""
    return re.sub(r"\W", "_", shape)


def timed_write(spark: SparkSession, result: DataFrame, table: str) -> None:
    result.writeTo(table).using("iceberg").createOrReplace()


def peak_rss_mib() -> float:
    """The process's peak resident memory so far (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def estimate(edges: DataFrame) -> dict:
    """The driver method's estimated need for these edges (untimed: one more pass)."""
    count, name_bytes, nodes = measure_pairs(edge_pairs(edges, "src", "dst"))
    need = driver_need(count, name_bytes, nodes)
    return {"jvm_mib": round(need.jvm / 2**20), "python_mib": round(need.python / 2**20)}


def run_closure(spark, edges, shape, size, label, options) -> dict:
    stats = ClosureStats()
    before = peak_rss_mib()
    meter, started = ShuffleMeter(), time.monotonic()
    result = connected_components(edges, stats=stats, **options)
    timed_write(spark, result, f"bench.cc_{slug(shape)}_{label}")
    seconds = time.monotonic() - started
    shuffled = meter.shuffle_bytes()
    components = (
        spark.table(f"bench.cc_{slug(shape)}_{label}").select("component").distinct().count()
    )
    memory = {}
    if stats.method == "driver":
        memory = {
            "estimate": estimate(edges),
            "python_peak_mib": peak_rss_mib(),
            "python_peak_before_mib": before,
        }
    return dict(
        shape=shape,
        edges=size,
        method=f"{'dbt_merge' if label == 'default' else label}:{stats.method}",
        seconds=round(seconds, 1),
        rounds=stats.rounds,
        components=components,
        nodes=stats.nodes,
        shuffle_bytes=shuffled,
        reason=stats.reason,
        table=f"bench.cc_{slug(shape)}_{label}",
        **memory,
    )


def sql_project(warehouse: Path) -> BenchProject:
    """A project whose model cc_sql is the SQL closure of bench.closure_input."""
    project = BenchProject("closure_sql", "bench")
    project.warehouse = warehouse  # this process's session's
    model = (
        "{{ config(materialized='entity_components', file_format='iceberg') }}\n"
        "select src, dst from bench.closure_input"
    )
    project.write({"cc_sql.sql": model})
    project.dbt("deps")
    return project


def run_sql(spark, project, edges, shape, size) -> dict:
    edges.writeTo("bench.closure_input").using("iceberg").createOrReplace()
    rounds = []

    def record(event) -> None:
        found = re.search(r"cc_sql: closure round (\d+)", getattr(event.info, "msg", "") or "")
        if found:
            rounds.append(int(found.group(1)))

    meter, started = ShuffleMeter(), time.monotonic()
    project.dbt("run", "-s", "cc_sql", callbacks=[record])
    seconds = time.monotonic() - started
    components = spark.table("bench.cc_sql").select("component").distinct().count()
    spark.table("bench.cc_sql").writeTo(f"bench.cc_{slug(shape)}_sql").using(
        "iceberg"
    ).createOrReplace()
    return dict(
        shape=shape,
        edges=size,
        method="sql",
        seconds=round(seconds, 1),
        rounds=max(rounds, default=0),
        components=components,
        shuffle_bytes=meter.shuffle_bytes(),
        table=f"bench.cc_{slug(shape)}_sql",
    )


def run_baseline(spark, edges, shape, size, label, cap) -> dict:
    meter, started = ShuffleMeter(), time.monotonic()
    run = large_star_small_star if label == "lss" else naive_min_label
    labels, rounds = run(edges, cap)
    components, table = None, f"bench.{label}_{slug(shape)}"
    if labels is not None:
        timed_write(spark, labels, table)
    seconds = time.monotonic() - started
    if labels is not None:
        components = spark.table(table).select("component").distinct().count()
    return dict(
        shape=shape,
        edges=size,
        method=BASELINES[label],
        seconds=round(seconds, 1),
        rounds=rounds,
        components=components,
        finished=labels is not None,
        shuffle_bytes=meter.shuffle_bytes(),
        table=table if labels is not None else None,
    )


def measure(spark, project, edges, shape, size, label, args) -> tuple[dict, str]:
    """One method's run on one graph: its result row and its seconds as printed."""
    if label in BASELINES:
        cap = args.baseline_cap
        if label == "lss" and args.lss_cap is not None:
            cap = args.lss_cap
        row = run_baseline(spark, edges, shape, size, label, cap)
        return row, f"{row['seconds']:.1f}" if row["finished"] else f"DNF>{cap:.0f}"
    if label == "sql":
        row = run_sql(spark, project, edges, shape, size)
    else:
        row = run_closure(spark, edges, shape, size, label, FORCE[label])
    return row, f"{row['seconds']:.1f}"


def same_components(spark, table: str, reference: str) -> bool:
    """Whether two results label every node with the same component (both name it by
    its smallest node)."""
    columns = "select node, component from {}"
    one, other = spark.sql(columns.format(table)), spark.sql(columns.format(reference))
    return one.exceptAll(other).isEmpty() and other.exceptAll(one).isEmpty()


def ratios(rows: list[dict]) -> str:
    """The seconds of each row over the distributed method's (and over the driver's)."""
    by = {r["method"].split(":")[0]: r for r in rows}
    driver = next((r for r in rows if r["method"].endswith(":driver")), None)
    dist = by.get("distributed") or by.get("dbt_merge")
    dist = dist if dist and dist["method"].endswith(":distributed") else None
    parts = []
    if dist and driver:
        parts.append(f"distributed/driver {dist['seconds'] / driver['seconds']:.2f}")
    if by.get("rounds") and dist:
        parts.append(f"rounds/distributed {by['rounds']['seconds'] / dist['seconds']:.2f}")
    sql, lss = by.get("sql"), by.get("large-star/small-star")
    if sql and lss and lss.get("finished", True):
        parts.append(f"sql/lss {sql['seconds'] / lss['seconds']:.2f}")
    if sql and dist:
        parts.append(f"sql/distributed {sql['seconds'] / dist['seconds']:.2f}")
    for name, short in (("large-star/small-star", "lss"), ("naive", "naive")):
        row = by.get(name)
        if row and dist:
            sign = "" if row.get("finished", True) else ">"
            parts.append(f"{short}/distributed {sign}{row['seconds'] / dist['seconds']:.2f}")
    return "  ratios: " + (", ".join(parts) if parts else "-")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000000,3000000")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--methods", default=DEFAULT_METHODS, help=f"of {','.join(METHODS)}")
    parser.add_argument(
        "--distributed", action="store_true", help="also time the forced distributed method"
    )
    parser.add_argument("--baseline-cap", type=float, default=600.0)
    parser.add_argument("--lss-cap", type=float, help="large-star/small-star's cap if not that")
    parser.add_argument("--no-baseline", action="store_true", help="leave out lss and naive")
    parser.add_argument("--json", default=str(ROOT / "bench" / "out" / "closure.json"))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--table", help="SCHEMA.NAME: its (src, dst), not generated graphs")
    args = parser.parse_args()
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        parser.error(f"unknown method(s) {unknown}; choose from {','.join(METHODS)}")
    if args.distributed and "distributed" not in methods:
        methods.insert(1, "distributed")
    if args.no_baseline:
        methods = [m for m in methods if m not in BASELINES]

    run = Run(args.master)
    out_dir = ROOT / "bench" / "out"
    if args.table:  # a given table is read from the benchmarks' warehouse as it is
        warehouse = out_dir / "warehouse"
    else:  # generated graphs go to a warehouse of their own, made anew
        warehouse = out_dir / "warehouse-closure"
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
    print(
        f"# closure benchmark on {args.master} ({run.machine['cores']} cores),"
        f" Spark {spark.version}"
    )
    print(f"# baselines capped at {args.baseline_cap:.0f} s; shuffle in MB written")
    print(
        f"{'shape':7} {'edges':>9} {'method':28} {'seconds':>8} {'rounds':>6} "
        f"{'shuffle MB':>10} {'components':>10}"
    )
    project = sql_project(warehouse) if "sql" in methods else None
    # every method once on a small graph, not timed: the JVM's first jobs and dbt's
    # first parse of the project are paid here, not by the first method measured
    small = materialize(graph(spark, "random", WARMUP_EDGES))
    for label in methods:
        measure(spark, project, small, "random", WARMUP_EDGES, label, args)
    results = []
    if args.table:  # read as it is: the driver method's memory is the measured one
        edges = spark.table(args.table).select("src", "dst")
        inputs = [("table:" + args.table.split(".")[-1], edges.count(), edges)]
    else:
        inputs = [
            (shape, int(size), None)
            for size in args.sizes.split(",")
            for shape in args.shapes.split(",")
        ]
    for shape, size, given in inputs:
        edges = given if given is not None else materialize(graph(spark, shape, size))
        shape_rows = []
        for label in methods:
            row, shown = measure(spark, project, edges, shape, size, label, args)
            if row.get("table") and shape_rows and shape_rows[0].get("table"):
                row["same"] = same_components(spark, row["table"], shape_rows[0]["table"])
            results.append(row)
            shape_rows.append(row)
            components = "-" if row["components"] is None else row["components"]
            print(
                _line(
                    shape,
                    size,
                    row["method"],
                    shown,
                    row["rounds"],
                    row["shuffle_bytes"],
                    components,
                ),
                flush=True,
            )
        print(ratios(shape_rows), flush=True)
        if any(row.get("same") is False for row in shape_rows):
            print(f"  DIFFERENT COMPONENTS: {shape} {size}", flush=True)
    run.write(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
