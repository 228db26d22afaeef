"""The test suite's run as a results file, for docs/contributing.md's "How long the suite takes".

A fresh clone's ``CI=true bash .ci/run`` (install included) prints pytest's summary, its
25 slowest tests and what dbt cost (tests/dbt_calls.py). This reads that log and writes
bench/out/suite.json in the form of the benchmarks' results files (bench/report.py):
the date, the command, the machine with the loop's seconds before and after the run,
and the figures. ``bench/publish.py`` renders its table.

Usage:
  .venv/bin/python bench/suite_report.py LOG --commit SHA --wall SECONDS
      --loop BEFORE,AFTER [--busy-cpu SECONDS] [--json bench/out/suite.json]
(--wall: the whole run with the install; --busy-cpu: the machine's busy CPU-seconds
during it, from /proc/stat)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import Run  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
SLOWEST = 10


def figures(log: str) -> dict:
    """Tests passed (and failed), pytest's seconds, the slowest tests, dbt's costs."""
    summary = re.findall(r"=+ (.*?) in ([\d.]+)s(?: \([\d:]+\))? =+$", log, re.M)[-1]
    counts = dict(
        (kind, int(n)) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|error)", summary[0])
    )
    slowest = [
        {"seconds": float(seconds), "phase": phase, "test": test}
        for seconds, phase, test in re.findall(
            r"^([\d.]+)s (setup|call|teardown)\s+(\S+)$", log, re.M
        )
    ][:SLOWEST]
    dbt = re.search(
        r"^(\d+) dbt commands, (\d+) s; of that, (\d+) manifest loads, (\d+) s, of which "
        r"(\d+) full parses, (\d+) s$",
        log,
        re.M,
    )
    reasons = re.search(r"^full parses, by dbt's reason: (.*)$", log, re.M)
    return {
        "tests": counts,
        "pytest_s": float(summary[1]),
        "slowest": slowest,
        "dbt": dict(
            zip(
                ("commands", "command_s", "loads", "load_s", "full_parses", "full_parse_s"),
                (int(x) for x in dbt.groups()),
                strict=True,
            )
        )
        if dbt
        else None,
        "full_parse_reasons": reasons.group(1) if reasons else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--wall", type=float, required=True, help="seconds, install included")
    parser.add_argument("--loop", required=True, help="the loop's seconds: BEFORE,AFTER")
    parser.add_argument("--busy-cpu", type=float, help="busy CPU-seconds of the machine")
    parser.add_argument("--json", type=Path, default=OUT / "suite.json")
    args = parser.parse_args()
    loop = [float(x) for x in args.loop.split(",")]
    run = Run(command="make test", loop=loop)
    result = figures(args.log.read_text())
    result.update(commit=args.commit, wall_s=args.wall, busy_cpu_s=args.busy_cpu)
    run.write(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
