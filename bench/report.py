"""What every benchmark writes beside its figures: the run's date, its command and the
machine it ran on, including how fast that machine was during the run.

The machines are shared, so a run records the seconds of a fixed Python loop (30M
additions) before and after it: the figure by which this project compares one machine's
moments (docs/benchmarks.md). ``bench/publish.py`` renders docs/benchmarks.md's tables
from these files.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

LOOP_ITERATIONS = 30_000_000


def loop_seconds() -> float:
    """Seconds of ``s=0; for i in range(30_000_000): s+=i`` in this process."""
    started = time.perf_counter()
    total = 0
    for i in range(LOOP_ITERATIONS):
        total += i
    return round(time.perf_counter() - started, 2)


def machine(master: str = "local[2]", loop: list[float] | None = None) -> dict:
    """Cores, memory, versions, the Spark master and the loop's seconds (now, unless
    given)."""
    import pyspark

    memory = None
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / 1024**2:.0f} GiB"
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    return {
        "cores": os.cpu_count(),
        "memory": memory,
        "os": platform.platform(),
        "python": platform.python_version(),
        "spark": pyspark.__version__,
        "java": java.splitlines()[0] if java else None,
        "master": master,
        "loop_s": loop if loop is not None else [loop_seconds()],
    }


class Run:
    """One benchmark run: its machine, measured when it starts, and its results file,
    written with the date, the command and the loop's seconds at the end as well.
    ``command`` and ``loop`` (before, after) describe a run measured elsewhere."""

    def __init__(
        self, master: str = "local[2]", command: str | None = None, loop: list | None = None
    ) -> None:
        self.started = datetime.now(UTC)
        self.machine = machine(master, loop)
        self.loop_given = loop is not None
        self.command = command or " ".join(["bench/" + Path(sys.argv[0]).name, *sys.argv[1:]])

    def write(self, path: Path | str, results: list | dict, **extra) -> None:
        loop = (
            self.machine["loop_s"] if self.loop_given else [*self.machine["loop_s"], loop_seconds()]
        )
        machine_now = dict(self.machine, loop_s=loop)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "generated": self.started.isoformat(timespec="seconds"),
            "command": self.command,
            "machine": machine_now,
            **extra,
            "results": results,
        }
        path.write_text(json.dumps(report, indent=2) + "\n")
        print(f"# results written to {path}", flush=True)
