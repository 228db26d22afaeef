"""The benchmark pages' figures, generated from the results files the benchmarks write.

docs/benchmarks.md (and the other pages of PAGES) holds blocks like::

    <!-- figures: closure.json -->
    ...the command, the machine, the date and the table of that run...
    <!-- end figures -->

each generated from ``docs/bench/<file>`` (a copy of what a benchmark wrote to
``bench/out/``, with ``bench/report.py``'s date, command and machine). Nothing in a
block is written by hand, and the docs test checks that every block equals what this
module renders from its file, so a figure cannot go stale without the test failing.

Usage (`make bench-publish PUBLISH="closure.json ..."`):
  .venv/bin/python bench/publish.py [FILE ...]
      copies bench/out/FILE to docs/bench/FILE (plus results.json's plots, for the
      sweep), then renders every block of the pages again from docs/bench/
  .venv/bin/python bench/publish.py --check
      fails, naming the block, where a page differs from its files
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
PUBLISHED = ROOT / "docs" / "bench"
# the pages with figures blocks (contributing.md: the test suite's run, suite.json)
PAGES = (
    ROOT / "docs" / "benchmarks.md",
    ROOT / "docs" / "scaling.md",
    ROOT / "docs" / "contributing.md",
    ROOT / "README.md",
)
# a block names its file, and for the sweep's file may name one benchmark of it
# (results.json#closure: that benchmark's points, size by size) or the README's
# table (results.json#summary)
BLOCK = re.compile(
    r"(<!-- figures: (?P<file>[\w.-]+(?:#\w+)?) -->\n)(?P<body>.*?)(<!-- end figures -->)", re.S
)
# the make target of each benchmark script (BENCH_ARGS carries its arguments)
TARGETS = {
    "sweep.py": "bench",
    "closure_bench.py": "bench-closure",
    "entity_merge_bench.py": "bench-entity-merge",
    "upsert_bench.py": "bench-upsert",
    "bin_packing_bench.py": "bench-bin-packing",
    "seed_bench.py": "bench-seed",
}


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def ratio(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f} MiB"


def table(header: list[str], align: str, rows: list[list[str]]) -> list[str]:
    """A Markdown table; align holds one character a column: l(eft) or r(ight)."""
    rule = ["---" if a == "l" else "---:" for a in align]
    return [f"| {' | '.join(cells)} |" for cells in (header, rule, *rows)]


def command(report: dict) -> str:
    """The make command of the run."""
    if report["command"].startswith("make "):
        return report["command"]
    script, *args = report["command"].split()
    target = TARGETS[Path(script).name]
    return f'make {target} BENCH_ARGS="{" ".join(args)}"' if args else f"make {target}"


def machine_text(report: dict, loop: bool = True) -> str:
    """Cores, memory, versions and (with loop) the loop's seconds of the run's machine."""
    m = report["machine"]
    versions = (
        f"{m['cores']} cores, {m['memory']}, `{m['master']}`, Python {m['python']},"
        f" Spark {m['spark']}"
    )
    if not loop:
        return versions
    loop = m.get("loop_s") or []
    if len(loop) == 2:
        speed = f"the loop of 30M additions took {loop[0]:.2f} s before and {loop[1]:.2f} s after"
    elif loop:
        speed = f"the loop of 30M additions took {loop[0]:.2f} s"
    else:
        speed = "the loop was not timed"
    return f"{versions}; {speed}"


def run_line(report: dict) -> str:
    """When and where the run was: date, cores, memory, versions, the loop's seconds."""
    return f"Run of {report['generated'][:10]}: {machine_text(report)}."


# -- one renderer a benchmark: (report) -> table lines


SHAPES = {
    "random": "random, average degree 2",
    "chain": "one chain",
    "chains": "chains of 5,000",
    "stars": "4 giant stars",
}
METHODS = {
    "dbt_merge:driver": "default (driver)",
    "dbt_merge:distributed": "default (distributed)",
    "driver:driver": "driver (forced)",
    "distributed:distributed": "distributed (forced)",
    "rounds:distributed": "distributed, rounds to the end",
    "sql": "SQL closure",
    "large-star/small-star": "large-star/small-star",
    "naive": "naive min-label",
}


def shape_name(shape: str) -> str:
    if shape.startswith("table:"):
        return f"the table `{shape.split(':', 1)[1]}`"
    return SHAPES.get(shape, shape)


def closure(report: dict) -> list[str]:
    """One row a graph; a column a method (seconds and rounds); whether all agree."""
    rows = report["results"]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    graphs = list(dict.fromkeys((r["shape"], r["edges"]) for r in rows))
    body = []
    for shape, edges in graphs:
        by_method = {r["method"]: r for r in rows if (r["shape"], r["edges"]) == (shape, edges)}
        cells = [shape_name(shape), f"{edges:,}"]
        for method in methods:
            r = by_method.get(method)
            if r is None:
                cells.append("")
            elif r.get("finished", True):
                cells.append(f"{r['seconds']:.1f} s ({r['rounds']})")
            else:
                cells.append(f"did not finish in {r['seconds']:.0f} s")
        components = {r["components"] for r in by_method.values() if r["components"] is not None}
        cells.append(" / ".join(f"{c:,}" for c in sorted(components)))
        compared = [r["same"] for r in by_method.values() if "same" in r]
        cells.append("-" if not compared else ("yes" if all(compared) else "**no**"))
        body.append(cells)
    header = ["graph", "edges", *(f"{METHODS.get(m, m)}: s (rounds)" for m in methods)]
    lines = table(
        [*header, "components", "same components"], "lr" + "r" * len(methods) + "rr", body
    )
    # the peak is the process's: it is the method's only when the method ran first; shown
    # for a given table (--table), where the memory decides the method
    memory = [r for r in rows[:1] if "estimate" in r and r["shape"].startswith("table:")]
    if memory:
        lines += ["", *closure_memory(memory)]
    return lines


def closure_memory(rows: list[dict]) -> list[str]:
    body = []
    for r in rows:
        peak = r["python_peak_mib"] - r["python_peak_before_mib"]
        estimate = r["estimate"]["python_mib"]
        body.append(
            [
                shape_name(r["shape"]),
                f"{r['edges']:,}",
                f"{r['nodes']:,}",
                f"{r['seconds']:.1f} s",
                f"{estimate:,} MiB",
                f"{peak:,.0f} MiB",
                ratio(estimate / peak),
                f"{r['estimate']['jvm_mib']:,} MiB",
            ]
        )
    header = [
        "driver method on",
        "edges",
        "nodes",
        "seconds",
        "Python: estimate",
        "peak (`ru_maxrss`)",
        "estimate ÷ peak",
        "JVM heap: estimate",
    ]
    return table(header, "lrrrrrrr", body)


def entity_merge_incremental(report: dict) -> list[str]:
    runs = [run for result in report["results"] for run in result["runs"]]
    # a run of the benchmark since it counts each node's SQL statements
    counted = all("statements" in run for run in runs)
    nodes_of = ("people_edges", "people_components", "people")
    body = []
    for result in report["results"]:
        for run in result["runs"]:
            nodes = run["nodes_s"]
            written = run.get("written_share")
            row = [
                f"{result['records']:,}",
                run["run"],
                "100%" if written is None else f"{written:.2%}",
                seconds(nodes.get("people_edges")),
                seconds(nodes.get("people_components")),
                seconds(nodes.get("people")),
                seconds(run["merge_s"]),
                ratio(run.get("ratio_to_full", 1.0), 3),
            ]
            if counted:
                row.append(" + ".join(str(run["statements"][node]) for node in nodes_of))
            body.append(row)
    header = [
        "records",
        "run",
        "nodes written",
        "edges",
        "components",
        "merged",
        "three nodes",
        "÷ full build",
    ]
    if counted:
        header.append("statements (edges + components + merged)")
    return table(header, "rlrrrrrr" + "r" * counted, body)


def upsert(report: dict) -> list[str]:
    """The upsert benchmark's tables: writes, then scans, against Hudi and the same-work
    merge; a file written before Hudi was in the benchmark (#75) as it was rendered."""
    if "merge_same_work_s" not in report["results"][0]:
        return upsert_against_merge(report)
    mor = "deletion vectors" if report.get("table_format") == "delta" else "merge-on-read"
    writes, scans = [], []
    for r in report["results"]:
        writes.append(
            [
                f"{r['table_rows']:,} / {r['batch_rows']:,}",
                "clustered (one id range)" if r["clustered"] else "spread over the table",
                seconds(r["upsert_s"]),
                seconds(r["hudi_cow_s"]),
                ratio(r["cow_vs_hudi"]),
                seconds(r["merge_same_work_s"]),
                ratio(r["cow_vs_same_work"]),
                seconds(r["upsert_mor_s"]),
                seconds(r["hudi_mor_s"]),
                ratio(r["mor_vs_hudi"]),
                ratio(r["mor_vs_same_work"]),
                seconds(r["merge_prededuplicated_s"]),
                f"{r['rows_after']['upserted']:,}",
            ]
        )
        scans.append(
            [
                f"{r['table_rows']:,}",
                *(
                    f"{r[key]:.2f} s" if r.get(key) is not None else "-"
                    for key in (
                        "scan_cow_s",
                        "scan_hudi_cow_s",
                        "scan_same_work_s",
                        "scan_mor_s",
                        "scan_hudi_mor_s",
                    )
                ),
                seconds(r["compaction_s"]),
                f"{r['scan_mor_compacted_s']:.2f} s",
            ]
        )
    write_header = [
        "stored / batch rows",
        "keys of the batch",
        "`upsert` copy-on-write",
        "Hudi copy-on-write",
        "÷ Hudi",
        "same-work `merge`",
        "÷ merge",
        f"`upsert` {mor}",
        "Hudi merge-on-read",
        "÷ Hudi",
        "÷ merge",
        "`merge` of a deduplicated batch",
        "rows after the upsert",
    ]
    scan_header = [
        "stored rows",
        "scan: `upsert` copy-on-write",
        "Hudi copy-on-write",
        "same-work `merge`",
        f"`upsert` {mor}",
        "Hudi merge-on-read",
        "compaction",
        f"`upsert` {mor} compacted",
    ]
    return [
        *table(write_header, "ll" + "r" * 11, writes),
        "",
        *table(scan_header, "r" * 8, scans),
    ]


def upsert_against_merge(report: dict) -> list[str]:
    delta = report.get("table_format") == "delta"
    mor = "deletion vectors" if delta else "merge-on-read"
    body = []
    for r in report["results"]:
        body.append(
            [
                f"{r['table_rows']:,} / {r['batch_rows']:,}",
                "clustered (one id range)" if r["clustered"] else "spread over the table",
                seconds(r["merge_s"]),
                seconds(r["upsert_s"]),
                ratio(r["ratio"]),
                seconds(r["upsert_mor_s"]),
                ratio(r["mor_ratio"]),
                ratio(r["scan_mor_ratio"]),
                seconds(r["compaction_s"]),
                ratio(r["scan_mor_compacted_ratio"]),
                f"{r['rows_after']['upserted']:,}",
            ]
        )
    header = [
        "stored / batch rows",
        "keys of the batch",
        "`merge`",
        "`upsert` copy-on-write",
        "÷ merge",
        f"`upsert` {mor}",
        "÷ merge",
        "scan ÷ copy-on-write",
        "compaction",
        "scan after ÷ copy-on-write",
        "rows after the upsert",
    ]
    return table(header, "llrrrrrrrrr", body)


def bin_packing(report: dict) -> list[str]:
    body = []
    for r in report["results"]:
        naive = r.get("naive") or {}
        if naive.get("finished"):
            baseline = f"{naive['seconds']:.1f} s ({naive['bins']:,} bins)"
        else:
            baseline = f"did not finish in {naive['seconds']:.0f} s" if naive else "-"
        offline = r["offline"]
        body.append(
            [
                f"{r['items']:,} ({r['groups']:,})",
                f"{r['streaming']['seconds']:.1f} s ({r['streaming']['bins']:,} bins)",
                f"{offline['seconds']:.1f} s: {offline['bins']:,} / {offline['lower_bound']:,}"
                f" = {offline['ratio']:.4f}",
                baseline,
            ]
        )
    header = [
        "items (groups)",
        "streaming `bin_pack`",
        "offline `plan_offline`: bins / lower bound",
        "driver first fit (baseline)",
    ]
    return table(header, "rrrr", body)


def seed(report: dict) -> list[str]:
    inserts = any("insert_s" in r for r in report["results"])  # --insert-max 0: none
    body = []
    for r in report["results"]:
        cells = [
            f"{r['rows']:,}",
            f"{r['read_dbt_s']:.2f} s / {r['read_adapter_s']:.2f} s",
            f"{r['dataframe_dbt_csv_s']:.2f} s",
            f"{r['dataframe_s']:.2f} s",
        ]
        if inserts:
            cells.append(f"{r['insert_s']:.2f} s" if "insert_s" in r else "-")
        body.append(cells)
    header = [
        "rows",
        "reading the CSV: dbt's / the adapter's",
        "seed, dbt's reading",
        "seed, the adapter's (default)",
    ]
    if inserts:
        header.append("seed, INSERT batches")
    return table(header, "r" * len(header), body)


def sweep(report: dict) -> list[str]:
    """A row a benchmark of `make bench`: each curve's seconds by size."""
    body = []
    for name, bench in report["benchmarks"].items():
        sizes = " / ".join(f"{size:,}" for size in bench["sizes"])
        for series_name, series in bench["series"].items():
            points = [
                f"{p['seconds']:.1f}" if p["finished"] else "did not finish"
                for p in series["points"]
            ]
            slope = "-" if series.get("slope") is None else f"{series['slope']:.2f}"
            body.append([name.replace("_", " "), sizes, series_name, " / ".join(points), slope])
    header = ["benchmark", "sizes", "curve", "seconds", "slope"]
    return table(header, "lrlrr", body)


SLOWEST = 5  # tests the suite's table lists


def suite(report: dict) -> list[str]:
    """A fresh clone's `make test`: totals, what dbt cost, the slowest tests."""
    r = report["results"]
    tests = ", ".join(f"{n:,} {kind}" for kind, n in r["tests"].items())
    cores = report["machine"]["cores"]
    capacity = cores * r["wall_s"]
    busy = "-" if r["busy_cpu_s"] is None else f"{r['busy_cpu_s']:,.0f} of {capacity:,.0f}"
    lines = table(
        ["fresh clone of", "tests", "pytest", "with the install", f"busy CPU-s of {cores} cores"],
        "lrrrr",
        [
            [
                f"`{r['commit'][:7]}`",
                tests,
                f"{r['pytest_s']:,.0f} s",
                f"{r['wall_s']:,.0f} s ({r['wall_s'] / 60:.0f} min)",
                busy,
            ]
        ],
    )
    dbt = r.get("dbt")
    if dbt:
        lines += [
            "",
            *table(
                [
                    "dbt commands in the test processes",
                    "manifest loads",
                    "of which full parses",
                    "why full",
                ],
                "rrrl",
                [
                    [
                        f"{dbt['commands']:,} in {dbt['command_s']:,} s",
                        f"{dbt['loads']:,} in {dbt['load_s']:,} s",
                        f"{dbt['full_parses']:,} in {dbt['full_parse_s']:,} s",
                        (r["full_parse_reasons"] or "-")
                        .replace("vars_changed", "a changed `--vars`")
                        .replace("no saved manifest (the project's first parse)", "a first parse"),
                    ]
                ],
            ),
        ]
    slowest = [
        [f"`{t['test']}` ({t['phase']})", f"{t['seconds']:.0f} s"] for t in r["slowest"][:SLOWEST]
    ]
    return [*lines, "", *table(["slowest tests", "seconds"], "lr", slowest)]


def sweep_points(report: dict, name: str) -> list[str]:
    """One benchmark of `make bench`: a row a size, each curve's seconds and shuffle."""
    bench = report["benchmarks"][name]
    series = bench["series"]
    body = []
    for i, size in enumerate(bench["sizes"]):
        cells = [f"{size:,}"]
        for curve in series.values():
            point = curve["points"][i]
            shown = f"{point['seconds']:.1f} s"
            if not point["finished"]:
                shown = f"did not finish in {bench['baseline_cap_s']:.0f} s"
            method = f" ({point['method']})" if point.get("method") else ""
            cells += [shown + method, mib(point.get("shuffle_bytes"))]
        body.append(cells)
    header = [bench["x_label"]]
    for curve_name in series:
        header += [curve_name, "shuffle written"]
    extra = SWEEP_EXTRA.get(name)
    if extra:  # one more column from the benchmark's rows (one row a size)
        header.append(extra[0])
        for cells, row in zip(body, bench["rows"], strict=True):
            cells.append(extra[1](row))
    return table(header, "r" * len(header), body)


# columns the sweep's curves do not hold, from its rows: (header, row -> cell)
SWEEP_EXTRA: dict[str, tuple[str, Callable[[dict], str]]] = {
    "entity_merge": (
        "edges / components / merged nodes",
        lambda row: (
            " / ".join(
                f"{row['dbt_merge']['nodes_s'][node]:.1f}"
                for node in ("people_edges", "people_components", "people")
            )
            + " s"
        ),
    ),
    "bin_packing": ("offline bins ÷ lower bound", lambda row: f"{row['offline']['ratio']:.4f}"),
}


def summary(report: dict) -> list[str]:
    """The README's table: each benchmark of `make bench` at its largest size, dbt_merge
    (its other method in brackets) against its baseline, and the dates of the runs."""

    def point(bench: str, curve: str) -> str:
        found = report["benchmarks"][bench]["series"][curve]["points"][-1]
        if found["finished"]:
            return f"{found['seconds']:.1f} s"
        return f"did not finish in {report['benchmarks'][bench]['baseline_cap_s']:.0f} s"

    body = []
    for bench, what, unit, main, other, base, base_name in SUMMARY:
        size = report["benchmarks"][bench]["sizes"][-1]
        body.append(
            [
                what,
                f"{size / 1e6:g}M {unit}",
                f"{point(bench, main)} ({other[0]} {point(bench, other[1])})"
                if other
                else point(bench, main),
                f"{base_name}: {point(bench, base)}",
            ]
        )
    dates = sorted(
        {b.get("generated", report["generated"])[:10] for b in report["benchmarks"].values()}
    )
    return [
        f"From `make bench` of {' and '.join(dates)}: {machine_text(report, loop=False)}.",
        "",
        *table(["benchmark", "size", "dbt_merge", "baseline"], "lrrr", body),
    ]


# the README's rows: benchmark, what, unit of its size, dbt_merge's curve, (its other
# method's name, curve) or None, the baseline's curve and name (the upsert's row comes
# from `make bench-upsert`, against Hudi: upsert_summary)
SUMMARY = (
    (
        "closure",
        "transitive closure, random graph",
        "edges",
        "dbt_merge, default",
        ("distributed method", "dbt_merge, distributed (forced)"),
        "naive min-label propagation",
        "naive min-label",
    ),
    (
        "entity_merge",
        "entity merge, whole `dbt run`",
        "records",
        "dbt_merge: dbt run",
        None,
        "hand-written Spark job",
        "hand-written job",
    ),
    (
        "bin_packing",
        "bin packing, 1,000 groups",
        "items",
        "bin_pack (streaming)",
        ("offline plan", "plan_offline (first fit decreasing)"),
        "driver first fit",
        "driver first fit",
    ),
)


def upsert_summary(report: dict) -> list[str]:
    """The README's upsert figures: each size of a `make bench-upsert` run with Hudi,
    dbt_merge's upsert against Apache Hudi's and against the same-work `merge`."""
    rows = [
        [
            f"{r['table_rows']:,} / {r['batch_rows']:,}",
            f"{seconds(r['upsert_s'])} ({seconds(r['upsert_mor_s'])})",
            f"{seconds(r['hudi_cow_s'])} ({seconds(r['hudi_mor_s'])})",
            seconds(r["merge_same_work_s"]),
        ]
        for r in report["results"]
    ]
    header = [
        "upsert: stored / batch rows",
        "dbt_merge copy-on-write (merge-on-read)",
        "Apache Hudi 1.0.2 copy-on-write (merge-on-read)",
        "dbt-spark `merge` doing the same work",
    ]
    return [
        f"From `make bench-upsert` of {report['generated'][:10]}: {machine_text(report)};"
        " the same rows checked in the three tables.",
        "",
        *table(header, "lrrr", rows),
    ]


RENDERERS: dict[str, Callable[[dict], list[str]]] = {
    "suite": suite,
    "results": sweep,
    "closure": closure,
    "entity_merge_incremental": entity_merge_incremental,
    "upsert": upsert,
    "bin_packing": bin_packing,
    "seed": seed,
}


def renderer(file: str) -> Callable[[dict], list[str]]:
    """The renderer of a results file: the longest name its stem starts with."""
    stem = Path(file).stem
    names = sorted((n for n in RENDERERS if stem.startswith(n)), key=len, reverse=True)
    if not names:
        raise ValueError(f"no renderer for {file}: its name starts with none of {list(RENDERERS)}")
    return RENDERERS[names[0]]


def render(spec: str, published: Path = PUBLISHED) -> str:
    """The block of ``spec``: a results file, or ``results.json#<benchmark>``."""
    file, _, part = spec.partition("#")
    report = json.loads((published / file).read_text())
    if part == "summary":  # the README's tables: no command, the runs' dates
        lines = upsert_summary(report) if renderer(file) is upsert else summary(report)
        return "\n".join(lines) + "\n"
    figures = sweep_points(report, part) if part else renderer(file)(report)
    bench = report["benchmarks"][part] if part else {}
    if "generated" in bench:  # a benchmark of the sweep dated by its own run
        report = dict(
            report,
            generated=bench["generated"],
            command=bench["command"],
            machine=bench.get("machine", report["machine"]),
        )
    if part and "generated" not in bench:  # --only may have left its figures older
        # the command that made every benchmark of the file, not its last --only
        report = dict(report, command="bench/sweep.py")
        line = (
            f"{part.replace('_', ' ').capitalize()} as of the sweep's file of"
            f" {report['generated'][:10]}, from that run or an earlier one (the sweep dates"
            f" each benchmark from 2026-11-30 on); the machine: {machine_text(report)}."
        )
    else:
        line = run_line(report)
    lines = ["```sh", command(report), "```", line, "", *figures]
    return "\n".join(lines) + "\n"


def render_page(text: str, published: Path = PUBLISHED) -> str:
    """The page with every figures block generated again from its file."""
    return BLOCK.sub(lambda m: m.group(1) + render(m.group("file"), published) + m.group(4), text)


def blocks(text: str) -> list[tuple[str, str]]:
    """(file, body) of each figures block of a page."""
    return [(m.group("file"), m.group("body")) for m in BLOCK.finditer(text)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", help="results files of bench/out/ to publish")
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args()
    if args.check:
        stale = [
            f"{page.relative_to(ROOT)}: {file}"
            for page in PAGES
            for file, body in blocks(page.read_text())
            if body != render(file)
        ]
        for line in stale:
            print(f"differs from its results file: {line}", file=sys.stderr)
        return 1 if stale else 0
    for file in args.files:
        source = OUT / file
        if not source.is_file():
            parser.error(f"{source} is missing: run its benchmark first")
        renderer(file)  # a file no block could show is refused before anything is copied
        shutil.copy(source, PUBLISHED / file)
        if file == "results.json":
            (PUBLISHED / "plots").mkdir(exist_ok=True)
            for plot in (OUT / "plots").glob("*.png"):
                shutil.copy(plot, PUBLISHED / "plots" / plot.name)
    for page in PAGES:
        page.write_text(render_page(page.read_text()))
        print(f"rendered {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
