"""Prints the Spark jobs of an event log (spark.eventLog.dir, see bench_project.py):
per job its start (seconds since the application started), its time and what ran it
(the SQL statement's first words or the Python line), longest-running first with --top.

Usage: .venv/bin/python bench/spark_jobs.py <event log file> [--since SECONDS] [--top N]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def jobs(path: Path) -> list[dict]:
    started, ended, app_start = {}, {}, None
    for line in path.read_text().splitlines():
        event = json.loads(line)
        kind = event["Event"]
        if kind == "SparkListenerApplicationStart":
            app_start = event["Timestamp"]
        elif kind == "SparkListenerJobStart":
            properties = event.get("Properties") or {}
            what = properties.get("spark.job.description") or properties.get("callSite.short") or ""
            started[event["Job ID"]] = (event["Submission Time"], " ".join(what.split())[:110])
        elif kind == "SparkListenerJobEnd":
            ended[event["Job ID"]] = event["Completion Time"]
    rows = []
    for job, (start, what) in started.items():
        if job in ended:
            rows.append(
                {
                    "job": job,
                    "start_s": (start - (app_start or start)) / 1000,
                    "seconds": (ended[job] - start) / 1000,
                    "what": what,
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--since", type=float, default=0.0)
    parser.add_argument("--top", type=int, default=0)
    args = parser.parse_args()
    rows = [row for row in jobs(args.path) if row["start_s"] >= args.since]
    if args.top:
        rows = sorted(rows, key=lambda row: -row["seconds"])[: args.top]
    for row in rows:
        print(f"{row['start_s']:8.1f} {row['seconds']:7.2f}  job {row['job']:4}  {row['what']}")


if __name__ == "__main__":
    main()
