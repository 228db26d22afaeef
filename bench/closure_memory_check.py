"""The closure's driver-memory estimate against what the driver method really uses.

`closure_memory.driver_need` decides between the driver and the distributed method
from constants (bytes per edge, per node, per name byte). This script checks them:
for each size it starts a fresh process (so that its peak is the method's), builds a
random graph of that many edges (average degree 2, names `n<number>`), and runs the
driver method, then prints

* Python: the estimate, and the peak resident memory of the process during the
  method less what it held before (`ru_maxrss`, Linux);
* JVM heap: the estimate, and the largest live heap during the method less the live
  heap before: every 200 ms a full GC, then the heap in use (without the GC the
  figure would count garbage, which a large heap leaves lying; the GCs slow the
  method down, so its time here is not a benchmark). In local mode the tasks run in
  the driver's JVM, so this also counts their execution memory (sort and aggregation
  buffers), which Spark bounds by spark.memory.fraction and spills: an upper bound
  of what the method holds, sampled, so short peaks can be missed.

With --table, the graph is an existing edges table of the benchmarks' warehouse
(bench/out/warehouse) instead, e.g. the entity benchmark's people_edges (its `src` and
`dst`), measured once.

The estimate uses the exact node count here (the closure counts them with HyperLogLog,
2% error).

Usage:
  .venv/bin/python bench/closure_memory_check.py [--sizes 1000000,3000000] [--width 8]
  .venv/bin/python bench/closure_memory_check.py --table bench_entity_merge.people_edges
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def measure(edges: int, width: int, table: str | None = None) -> dict:
    """One size, in this process: the estimate and the measured need. width: the
    names are `n<number>` left-padded with zeros to this many characters. table: an
    edges table of the benchmarks' warehouse instead (src, dst; nulls as the closure
    takes them)."""
    from pyspark.sql import functions as F

    from dbt.adapters.spark_session import session as sessions
    from dbt_merge.core.spark import materialize
    from dbt_merge.entity_merge import closure
    from dbt_merge.entity_merge.closure_memory import driver_need

    work = Path(tempfile.mkdtemp(prefix="closure_memory_"))
    spark = sessions.get_session(
        sessions.SessionSettings(
            warehouse=ROOT / "bench" / "out" / "warehouse" if table else work / "warehouse",
            log_dir=work / "logs",
            server_side_parameters={"spark.master": "local[2]", "spark.driver.memory": "12g"},
        )
    )
    if table:
        pairs = materialize(closure.edge_pairs(spark.table(table), "src", "dst"))
    else:
        name = lambda c: F.concat(F.lit("n"), F.lpad(c.cast("string"), width - 1, "0"))  # noqa: E731
        pairs = materialize(
            spark.range(edges).select(
                name(F.floor(F.rand(11) * edges).cast("long")).alias("s"),
                name(F.floor(F.rand(12) * edges).cast("long")).alias("d"),
            )
        )
    edges, name_bytes, nodes = closure.measure_pairs(pairs, exact=True)
    need = driver_need(edges, name_bytes, nodes)

    runtime = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()
    used = lambda: runtime.totalMemory() - runtime.freeMemory()  # noqa: E731
    spark.sparkContext._jvm.java.lang.System.gc()
    heap_before, rss_before = used(), _rss_bytes()
    peak_heap = [heap_before]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            spark.sparkContext._jvm.java.lang.System.gc()
            peak_heap[0] = max(peak_heap[0], used())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.monotonic()
    stats = closure.ClosureStats()
    result = closure._driver_components(spark, pairs, "node", "component", stats)
    result.count()  # the result's batches go back to the JVM
    seconds = time.monotonic() - started
    done.set()
    sampler.join()
    python_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before
    return {
        "edges": edges,
        "nodes": stats.nodes,
        "name_bytes": name_bytes,
        "seconds": round(seconds, 1),
        "python_estimate": need.python,
        "python_measured": python_peak,
        "jvm_estimate": need.jvm,
        "jvm_measured": peak_heap[0] - heap_before,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,3000000")
    parser.add_argument("--width", type=int, default=8, help="characters of each name")
    parser.add_argument("--table", help="an edges table of bench/out/warehouse instead")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.width, args.table)), flush=True)
        return 0
    mib = 1024 * 1024
    print(
        "| edges | nodes | name bytes | seconds | Python: estimate | measured peak | ratio"
        " | JVM heap: estimate | measured peak | ratio |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for size in [1] if args.table else [int(s) for s in args.sizes.split(",")]:
        table = ["--table", args.table] if args.table else []
        child = subprocess.run(
            [sys.executable, __file__, "--one", str(size), "--width", str(args.width), *table],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        )
        row = json.loads(child.stdout.strip().splitlines()[-1])
        ratio = {w: row[f"{w}_estimate"] / max(1, row[f"{w}_measured"]) for w in ("python", "jvm")}
        print(
            f"| {row['edges']:,} | {row['nodes']:,} | {row['name_bytes'] / mib:.0f} MiB"
            f" | {row['seconds']} | {row['python_estimate'] / mib:.0f} MiB"
            f" | {row['python_measured'] / mib:.0f} MiB | {ratio['python']:.2f}"
            f" | {row['jvm_estimate'] / mib:.0f} MiB | {row['jvm_measured'] / mib:.0f} MiB"
            f" | {ratio['jvm']:.2f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
