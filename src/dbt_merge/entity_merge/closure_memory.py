"""Whether the closure's driver method fits in the driver's memory.

The driver method (``closure._driver_components``) brings every edge's two names to
the driver and labels them there, so what it needs grows with the edge count and
the width of the names. ``driver_need`` estimates that need from the two numbers
the closure measures anyway (edge rows and the bytes of their names), in two parts:

* **JVM heap** (``spark.driver.memory``): the collected Arrow batches of the edges
  (each name's bytes plus a 4-byte offset) and the result's batches on the way back
  (one row per node: its name twice).
* **Python process**: the collected Arrow batches, both ends as one large-string
  array and its dictionary encoding (the node names and an integer code per end),
  scipy's sparse matrix (COO, then CSR), the per-node arrays of the labelling and the
  result's Arrow table and IPC stream. The closure counts the nodes in
  the pass that counts the edges (HyperLogLog, 2% error); without a count they are
  taken as ``NODES_PER_EDGE`` per edge, the worst case of a sparse graph where every
  edge brings new names.

Each part also has a fixed share (the libraries the first call loads; the tasks'
buffers). Measured with the Arrow method and the node count
(``bench/closure_memory_check.py``; random graphs of 1M and 3M edges, 0.78 nodes an
edge, names of 8 bytes, and the entity benchmark's edges table of 25.5M edges, 15.3M
nodes and 666 MiB of names, each size in a process of its own), with the constants
below: Python 335, 748 and 5,706 MiB estimated against peaks of 250, 604 and 4,022 MiB
(1.34, 1.24 and 1.42 times); JVM 96, 193 and 1,621 MiB against sampled live heaps of 39,
77 and 1,621 MiB (2.5, 2.5 and 1.00; the small sizes' samples are unsteady: 80 and 179
MiB in an earlier run). The estimate stays above every measured peak.

``driver_memory`` reads what the driver has free: the JVM's maximum heap less what it
uses now, and the memory the operating system reports available (Linux
``MemAvailable``; the Python process grows into it). ``decide`` keeps the driver
method when each need is at most ``DRIVER_SHARE`` of what is free, and otherwise
names the need that does not fit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# Python bytes per edge besides the names themselves: the collected batches' offsets,
# their large-string copy and concatenation, the dictionary codes, COO/CSR indices and
# data. Refitted on the Arrow method with the 25M edges measured (closure_memory_check):
# 160 with 3 copies of the names fitted 1M and 3M edges and estimated 25M edges at 1.83
# times its peak; 260 when the method went through pandas
PYTHON_BYTES_PER_EDGE = 110
# what the first call costs whatever the graph: pyarrow.compute and scipy.sparse loaded
PYTHON_FIXED_BYTES = 128 << 20
# the JVM's own share whatever the graph: the tasks' buffers of the collect and of the
# result's read (in local mode the tasks run in the driver's JVM)
JVM_FIXED_BYTES = 48 << 20
# JVM heap bytes per edge besides the names: their offsets and the batches' framing
# (8 fitted 1M and 3M edges and fell short of the 25M edges' live heap by 12%)
JVM_BYTES_PER_EDGE = 16
# Python bytes per node: the names array, labels, ranks, sort order, the result's
# component column and its Arrow conversion (offsets), 8 bytes each
PYTHON_BYTES_PER_NODE = 80
# copies of each name's bytes held at once in Python at the peak (the batches, the
# combined large-string array and the dictionary exist together only in part: fitted
# with the constants above, 3 overestimated the 25M edges)
PYTHON_NAME_COPIES = 2
# a sparse graph brings up to two new names per edge; the estimate assumes the worst
NODES_PER_EDGE = 2
# the driver method may take at most this share of what is free (GC, other work)
DRIVER_SHARE = 0.5


@dataclass(frozen=True)
class DriverMemory:
    """Bytes the driver has free: JVM heap and memory of the machine (Python)."""

    jvm_free: int
    python_free: int


@dataclass(frozen=True)
class DriverNeed:
    """Estimated bytes the driver method needs, by process."""

    jvm: int
    python: int


def driver_need(edges: int, name_bytes: int, nodes: int | None = None) -> DriverNeed:
    """The driver method's estimated need for ``edges`` rows whose names (both ends
    together) take ``name_bytes`` bytes of UTF-8, with ``nodes`` distinct names (when
    not known: ``NODES_PER_EDGE`` a row, the worst case)."""
    nodes = NODES_PER_EDGE * edges if nodes is None else min(nodes, NODES_PER_EDGE * edges)
    mean_name = name_bytes / (2 * edges) if edges else 0.0
    node_name_bytes = int(nodes * mean_name)
    # in: every name with its 4-byte offset; out: (node, component) per node
    jvm = (
        JVM_FIXED_BYTES
        + name_bytes
        + JVM_BYTES_PER_EDGE * edges
        + 2 * (node_name_bytes + 4 * nodes)
    )
    python = (
        PYTHON_FIXED_BYTES
        + PYTHON_BYTES_PER_EDGE * edges
        + PYTHON_NAME_COPIES * name_bytes
        + PYTHON_BYTES_PER_NODE * nodes
        + 2 * node_name_bytes
    )
    return DriverNeed(jvm=int(jvm), python=int(python))


def _available_memory() -> int:
    """Bytes the OS reports available (Linux MemAvailable, else free physical pages)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def driver_memory(spark) -> DriverMemory:
    """What the driver has free now: JVM max heap less used heap, and the machine's
    available memory."""
    runtime = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()
    jvm_free = runtime.maxMemory() - (runtime.totalMemory() - runtime.freeMemory())
    return DriverMemory(jvm_free=int(jvm_free), python_free=_available_memory())


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def decide(
    edges: int, name_bytes: int, free: DriverMemory, nodes: int | None = None
) -> tuple[bool, str]:
    """(driver method fits, why) for ``edges`` rows of ``name_bytes`` name bytes and
    ``nodes`` distinct names (None: not known)."""
    need = driver_need(edges, name_bytes, nodes)
    mean = name_bytes / (2 * edges) if edges else 0.0
    graph = f"{edges:,} edges, names of {mean:.1f} bytes on average"
    if nodes is not None:
        graph = f"{edges:,} edges, about {nodes:,} nodes, names of {mean:.1f} bytes on average"
    for what, needed, available in (
        ("JVM heap (spark.driver.memory)", need.jvm, free.jvm_free),
        ("Python memory", need.python, free.python_free),
    ):
        if needed > DRIVER_SHARE * available:
            return False, (
                f"the driver method would need about {_size(needed)} of driver {what} "
                f"for {graph}, more than {DRIVER_SHARE:.0%} of the {_size(available)} free"
            )
    return True, (
        f"the driver method needs about {_size(need.jvm)} of JVM heap and "
        f"{_size(need.python)} of Python memory for {graph}; the driver has "
        f"{_size(free.jvm_free)} and {_size(free.python_free)} free"
    )


# A run of a merge that follows the change reads its state (one row per node: node and
# component names, a batch number, the previous component) into the driver once
# (``components_driver.closed_in_driver``). On the entity-merge benchmark at 3M records the
# state's Arrow table took 43 to 45 bytes a row (4.6M to 4.7M rows, 188 to 202 MiB,
# names of 9 to 30 bytes, most previous components null). The constants allow about
# three times that in the JVM (its collected batches) and about six times in Python
# (the table, its masks and filtered copies, the affected rows' join); the peak itself
# is not measured yet (bench/closure_memory_check.py measures the closure's).
STATE_JVM_BYTES_PER_ROW = 120
STATE_PYTHON_BYTES_PER_ROW = 240


def state_fits(rows: int, free: DriverMemory) -> tuple[bool, str]:
    """(a state of ``rows`` rows fits in the driver, why), by the constants above and
    ``DRIVER_SHARE`` of what is free."""
    for what, per_row, available in (
        ("JVM heap (spark.driver.memory)", STATE_JVM_BYTES_PER_ROW, free.jvm_free),
        ("Python memory", STATE_PYTHON_BYTES_PER_ROW, free.python_free),
    ):
        if rows * per_row > DRIVER_SHARE * available:
            return False, (
                f"a state of {rows:,} rows would need about {_size(rows * per_row)} of driver"
                f" {what} ({per_row} bytes a row), more than {DRIVER_SHARE:.0%} of the"
                f" {_size(available)} free"
            )
    return True, (
        f"a state of {rows:,} rows needs about {_size(rows * STATE_JVM_BYTES_PER_ROW)} of JVM"
        f" heap and {_size(rows * STATE_PYTHON_BYTES_PER_ROW)} of Python memory"
        f" ({STATE_JVM_BYTES_PER_ROW} and {STATE_PYTHON_BYTES_PER_ROW} bytes a row); the"
        f" driver has {_size(free.jvm_free)} and {_size(free.python_free)} free"
    )
