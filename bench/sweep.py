"""Scaling curves: every benchmark of the project at several sizes, with its baseline.

Runs the four benchmark scripts one after the other, each in a process of its own
(each starts its own local[2] SparkSession), at three sizes each by default:

  closure       connected_components on a random graph (average degree 2), the
                default method and the distributed one forced, against
                large-star/small-star (the loop of GraphFrames and Splink) and
                naive min-label propagation;
  entity_merge  the whole `dbt run` of an entity merge over three datasets, against
                a hand-written Spark job (pairwise edges + min-label propagation);
  upsert        incremental_strategy='upsert' with a raw batch of a tenth of the
                stored rows, against Apache Hudi 1.0's upserts (copy-on-write and
                merge-on-read), dbt-spark's merge doing the same work, and dbt-spark's
                merge of the batch deduplicated beforehand;
  bin_packing   streaming bin_pack and offline plan_offline over items in 1,000
                groups, against a driver-side first fit.

Baselines are capped in time (--baseline-cap); a capped run is recorded as "did not
finish" and drawn at the cap. The figures go to bench/out/results.json (the raw rows
of each script too) and one log-log plot per benchmark to bench/out/plots/<name>.png,
with the fitted slope of each curve (time ~ size^slope) in its legend. bench/out/ is
git-ignored; `make bench-publish` copies a run's figures to docs/bench/, which the
README shows.

Usage:
  .venv/bin/python bench/sweep.py [--large] [--only closure,upsert] [--baseline-cap 120]
      [--scale 0.01]
  .venv/bin/python bench/sweep.py --plot-only      # redraw from bench/out/results.json
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
OUT = BENCH / "out"  # git-ignored: a run never overwrites tracked files
RESULTS = OUT / "results.json"
PLOTS = OUT / "plots"
sys.path.insert(0, str(BENCH))

from report import loop_seconds, machine  # noqa: E402


@dataclass(frozen=True)
class Benchmark:
    """One benchmark script, its sizes and how its rows become curves."""

    script: str
    size_key: str  # the field of the script's rows that holds the size
    title: str
    x_label: str
    sizes: tuple[int, ...]
    large: tuple[int, ...]
    args: tuple[str, ...] = field(default_factory=tuple)
    capped: bool = True  # the baseline takes --baseline-cap


BENCHMARKS = {
    "closure": Benchmark(
        "closure_bench.py",
        "edges",
        "Transitive closure (connected components)",
        "edges (random graph, average degree 2)",
        (100_000, 300_000, 1_000_000),
        (3_000_000, 10_000_000),
        ("--shapes", "random", "--distributed"),
    ),
    "entity_merge": Benchmark(
        "entity_merge_bench.py",
        "records",
        "Entity merge: whole dbt run (edges, closure, golden records)",
        "records (three datasets, chains of 25 people)",
        (100_000, 300_000, 1_000_000),
        (3_000_000,),
    ),
    "upsert": Benchmark(
        "upsert_bench.py",
        "table_rows",
        "Record upserts: a batch of a tenth of the table",
        "stored rows (batch = stored / 10)",
        (300_000, 1_000_000, 3_000_000),
        (10_000_000, 30_000_000),
        capped=False,  # the baselines finish at these sizes: no cap needed
    ),
    "bin_packing": Benchmark(
        "bin_packing_bench.py",
        "items",
        "Bin packing: items in 1,000 correlation groups",
        "items",
        (100_000, 300_000, 1_000_000),
        (3_000_000,),
    ),
}


# the upsert benchmark's curves: label, baseline or not, the row's field, its table
UPSERT_SERIES = (
    ("upsert, raw batch", False, "upsert_s", "upserted"),
    ("upsert, merge_on_read table", False, "upsert_mor_s", "upserted_mor"),
    ("Hudi 1.0 upsert, copy-on-write", True, "hudi_cow_s", "hudi_cow"),
    ("Hudi 1.0 upsert, merge-on-read", True, "hudi_mor_s", "hudi_mor"),
    (
        "dbt-spark merge, same work (dedupe, ordering, deletes)",
        True,
        "merge_same_work_s",
        "merged_same_work",
    ),
    (
        "dbt-spark merge, deduplicated batch",
        True,
        "merge_prededuplicated_s",
        "merged_prededuplicated",
    ),
)


def point(size: int, seconds: float | None, cap: float | None = None, shuffle=None) -> dict:
    """A measured point; seconds None means the run hit its cap."""
    measured = {} if shuffle is None else {"shuffle_bytes": shuffle}
    if seconds is None:
        return {"size": size, "seconds": cap, "finished": False, **measured}
    return {"size": size, "seconds": seconds, "finished": True, **measured}


def curves(name: str, rows: list[dict], cap: float) -> dict[str, dict]:
    """The script's rows as {series: {"baseline": bool, "points": [...], "slope": ...}}.

    Each point has the size, the seconds (the cap when the run did not finish) and,
    where the script measured them, the shuffle bytes the run wrote.
    """
    series: dict[str, dict] = {}

    def add(label: str, baseline: bool, size: int, measured: dict, seconds_key: str) -> dict:
        seconds = measured[seconds_key] if measured.get("finished", True) else None
        p = point(size, seconds, cap, measured.get("shuffle_bytes"))
        series.setdefault(label, {"baseline": baseline, "points": []})["points"].append(p)
        return p

    size_key = BENCHMARKS[name].size_key
    for row in rows:
        size = row[size_key]
        if name == "closure":
            method = row["method"]
            if method == "naive":
                add("naive min-label propagation", True, size, row, "seconds")
            elif method == "large-star/small-star":
                add("large-star/small-star (GraphFrames, Splink)", True, size, row, "seconds")
            elif method.startswith("distributed"):
                add("dbt_merge, distributed (forced)", False, size, row, "seconds")
            else:  # the default picks the driver or the distributed method by size
                p = add("dbt_merge, default", False, size, row, "seconds")
                p["method"] = method.split(":")[-1]
        elif name == "entity_merge":
            add("dbt_merge: dbt run", False, size, row["dbt_merge"], "total_s")
            if "naive" in row:
                add("hand-written Spark job", True, size, row["naive"], "total_s")
        elif name == "upsert":
            shuffled = row.get("shuffle_bytes") or {}
            for label, baseline, key, table in UPSERT_SERIES:
                if row.get(key) is not None:  # Hudi's are missing from a --no-hudi run
                    measured = {"seconds": row[key], "shuffle_bytes": shuffled.get(table)}
                    add(label, baseline, size, measured, "seconds")
        elif name == "bin_packing":
            add("bin_pack (streaming)", False, size, row["streaming"], "seconds")
            add("plan_offline (first fit decreasing)", False, size, row["offline"], "seconds")
            if "naive" in row:
                add("driver first fit", True, size, row["naive"], "seconds")
    for data in series.values():
        data["points"].sort(key=lambda p: p["size"])
        data["slope"] = slope(data["points"])
    return series


def slope(points: list[dict]) -> float | None:
    """Least-squares slope of log(seconds) on log(size) over the finished points."""
    done = [(math.log(p["size"]), math.log(p["seconds"])) for p in points if p["finished"]]
    if len(done) < 2:
        return None
    mx = sum(x for x, _ in done) / len(done)
    my = sum(y for _, y in done) / len(done)
    var = sum((x - mx) ** 2 for x, _ in done)
    if var == 0:
        return None
    return round(sum((x - mx) * (y - my) for x, y in done) / var, 2)


def run(name: str, bench: Benchmark, sizes: list[int], cap: float) -> dict:
    """Run one benchmark script over the sizes; its raw rows and curves.

    The script first runs a warm-up size (a tenth of the smallest), left out of the
    curves: otherwise the smallest size would also pay the JVM's and Python workers'
    first-use costs, and the slopes would come out too flat.
    """
    out = OUT / f"sweep_{name}.json"
    out.unlink(missing_ok=True)
    warmup = sizes[0] // 10
    runs = [warmup, *sizes] if warmup >= 1_000 else sizes
    command = [
        sys.executable,
        str(BENCH / bench.script),
        "--sizes",
        ",".join(str(s) for s in runs),
        *(("--baseline-cap", str(cap)) if bench.capped else ()),
        *bench.args,
        "--json",
        str(out),
    ]
    print(f"\n## {name}: {' '.join(command[1:])}", flush=True)
    started = time.monotonic()
    subprocess.run(command, check=True, cwd=BENCH.parent)
    rows = [r for r in json.loads(out.read_text())["results"] if r[bench.size_key] in sizes]
    return {
        "title": bench.title,
        "x_label": bench.x_label,
        "sizes": sizes,
        "warmup_size": warmup if runs[0] == warmup else None,
        "baseline_cap_s": cap,
        "wall_s": round(time.monotonic() - started, 1),
        "series": curves(name, rows, cap),
        "rows": rows,
    }


def plot(name: str, result: dict) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=110)
    for label, data in result["series"].items():
        points = data["points"]
        xs = [p["size"] for p in points]
        ys = [p["seconds"] for p in points]
        fitted = f", slope {data['slope']}" if data["slope"] is not None else ""
        style = "--" if data["baseline"] else "-"
        marker = "s" if data["baseline"] else "o"
        (line,) = ax.plot(xs, ys, style, marker=marker, label=f"{label}{fitted}")
        capped = [p for p in points if not p["finished"]]
        if capped:
            ax.plot(
                [p["size"] for p in capped],
                [p["seconds"] for p in capped],
                "^",
                markersize=11,
                color=line.get_color(),
                label=f"{label}: did not finish (cap {result['baseline_cap_s']:.0f} s)",
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(result["x_label"])
    ax.set_ylabel("seconds (log)")
    ax.set_title(result["title"], fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    PLOTS.mkdir(parents=True, exist_ok=True)
    path = PLOTS / f"{name}.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def table(results: dict) -> str:
    """A markdown table: per benchmark and size, the seconds of each series."""
    lines = ["| benchmark | size | series | seconds | shuffle written |"]
    lines.append("| --- | ---: | --- | ---: | ---: |")
    for name, result in results["benchmarks"].items():
        for label, data in result["series"].items():
            for p in data["points"]:
                shown = f"{p['seconds']}" if p["finished"] else f"> {p['seconds']:.0f} (cap)"
                written = p.get("shuffle_bytes")
                mib = "-" if written is None else f"{written / 2**20:,.1f} MiB"
                lines.append(f"| {name} | {p['size']:,} | {label} | {shown} | {mib} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true", help="also the larger sizes")
    parser.add_argument("--only", help=f"a comma-separated subset of {','.join(BENCHMARKS)}")
    parser.add_argument("--baseline-cap", type=float, default=120.0)
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply every size (0.01 for a smoke run)"
    )
    parser.add_argument("--plot-only", action="store_true")
    args = parser.parse_args()

    names = args.only.split(",") if args.only else list(BENCHMARKS)
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        parser.error(f"--only: unknown benchmark {unknown}; choose from {list(BENCHMARKS)}")
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"benchmarks": {}}
    if not args.plot_only:
        started = time.monotonic()
        OUT.mkdir(parents=True, exist_ok=True)
        measured_on = machine()
        loop_before = measured_on["loop_s"][0]
        for name in names:
            bench = BENCHMARKS[name]
            sizes = [*bench.sizes, *(bench.large if args.large else ())]
            sizes = [max(1_000, round(size * args.scale)) for size in sizes]
            results["benchmarks"][name] = run(name, bench, sizes, args.baseline_cap)
            loop_after = loop_seconds()
            stamp = {
                "generated": datetime.now(UTC).isoformat(timespec="seconds"),
                "command": " ".join(["bench/sweep.py", *sys.argv[1:]]),
            }
            # each benchmark's own date, command and loop before and after it: --only
            # merges into earlier results
            results["benchmarks"][name].update(
                stamp, machine=dict(measured_on, loop_s=[loop_before, loop_after])
            )
            # written after every benchmark, so a later failure keeps the earlier curves
            results.update(
                stamp, machine=dict(measured_on, loop_s=[measured_on["loop_s"][0], loop_after])
            )
            loop_before = loop_after
            RESULTS.write_text(json.dumps(results, indent=2) + "\n")
        print(f"\n# sweep took {time.monotonic() - started:.0f} s", flush=True)
    for name, result in results["benchmarks"].items():
        print(f"plot: {plot(name, result).relative_to(BENCH.parent)}")
    print()
    print(table(results))
    print(f"\n# results: {RESULTS.relative_to(BENCH.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
