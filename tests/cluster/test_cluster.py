"""The demo on a real Spark standalone cluster (issue #7), against the same demo on local Spark.

``scripts/cluster.sh up`` starts a master and two 1-core workers on free ports of
127.0.0.1 (never the defaults of ``make cluster-up``, so a developer's running cluster is
left alone) with its state in a temporary folder. The demo ``dbt build --target cluster``
runs in a process of its own (one SparkSession per process, and this one already has a
local session) against its own warehouse, while the run's first demo build on local
Spark (``demo_build`` in tests/conftest.py, which the demo tests go on from) runs in this
process. The cluster goes down as soon as its build is over (or failed), then every
table the cluster's build stored is read here by path and compared with what the local
build stored.
The cluster's build runs from a snapshot of the project taken at the start (its dbt
files and profiles.yml, verbatim), so an edit in the working tree during the run cannot
make it differ, and its Spark log (logs/ of the copy) stays out of the repository.

Deselect with ``-m "not cluster"``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, free_ports
from tests.conftest import process_env as _env
from tests.demo import Build, copy_project, read_tables, table_differences

pytestmark = pytest.mark.cluster

CLUSTER_SH = ROOT / "scripts" / "cluster.sh"
SCHEMA = "dbt_merge"
# scripts/cluster.sh's defaults (master, master UI, worker UIs): the test's ports differ
DEFAULT_PORTS = {7077, 8980, 8981, 8982}
# the demo's seeds and models (its data tests are left out on the cluster)
NODES = 38
CLUSTER_TIMEOUT = 420  # seconds for `cluster.sh up` (about 15 s; it waits up to 300 s)


def _cluster(command: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(CLUSTER_SH), command],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLUSTER_TIMEOUT,
    )


def _processes_of(folder: Path) -> dict[int, str]:
    """Live processes whose command line names ``folder`` or whose cwd is inside it.

    That covers what the test started: the master and workers (their command lines name
    the cluster's state folder), the executors and their Python workers (they run in the
    workers' work folders) and the dbt drivers (their JVMs get the warehouse by --conf).
    """
    mark = str(folder)
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
        except OSError:  # gone, a zombie, or not ours to read
            continue
        if cmd and (mark in cmd or cwd == mark or cwd.startswith(mark + "/")):
            found[int(entry.name)] = cmd[:300]
    return found


@pytest.fixture(scope="module")
def builds(request, tmp_path_factory):
    """The cluster's build and the run's local one; the cluster is up only while its
    build runs.

    Returns the cluster's build, the tables the local build stored, the cluster's state
    folder and what was still running after teardown (which the teardown also ends, by
    pid).
    """
    root = tmp_path_factory.mktemp("cluster_vs_local")
    cluster_project = copy_project(root / "project_cluster")
    cluster_dir = root / "cluster"
    master_port, ui_port = free_ports(2, DEFAULT_PORTS)
    master = f"spark://127.0.0.1:{master_port}"
    env = _env(DBT_MERGE_DEMO="1")  # the demo's models, as `make run` builds them
    cluster_env = {
        **env,
        "DBT_MERGE_CLUSTER_DIR": str(cluster_dir),
        "DBT_MERGE_CLUSTER_PYTHON": sys.executable,
        "DBT_MERGE_CLUSTER_MASTER_PORT": str(master_port),
        "DBT_MERGE_CLUSTER_MASTER_UI_PORT": str(ui_port),
        "DBT_MERGE_CLUSTER_WORKER_UI_PORT": "0",  # any free port
        "DBT_MERGE_CLUSTER_WORKER_PORT": "0",
    }
    timings: dict[str, float] = {}
    started = time.monotonic()
    cluster = None
    try:
        up = _cluster("up", cluster_env)
        assert up.returncode == 0, f"cluster.sh up failed:\n{up.stdout}\n{up.stderr}"
        timings["cluster up"] = time.monotonic() - started
        # every seed and model the comparison reads, not the data tests: they write
        # nothing, and their queries of equal tables are the local build's
        cluster = Build(
            "cluster",
            cluster_project,
            root / "on_cluster",
            {**env, "DBT_MERGE_SPARK_MASTER": master},
            nodes=NODES,
            args=("--exclude", "resource_type:test"),
        )
        # the local build runs here while the cluster's build runs (unless the run
        # already made it)
        _, local = request.getfixturevalue("demo_build")
        timings["local build done"] = time.monotonic() - started
        cluster.wait()
        timings["cluster build"] = cluster.seconds
    finally:
        if cluster is not None:
            cluster.kill()
        down = _cluster("down", cluster_env)
        left = _processes_of(root)
        for _ in range(50):  # an executor may take a moment after its worker
            if not left:
                break
            time.sleep(0.2)
            left = _processes_of(root)
        for pid, cmd in left.items():  # end what this test started, by pid; fail below
            print(f"\nstill running after the teardown, killed: {pid} {cmd}")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert down.returncode == 0, f"cluster.sh down failed:\n{down.stdout}\n{down.stderr}"
    timings["total"] = time.monotonic() - started
    print("\ncluster test timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
    return {"cluster": cluster, "local": local, "cluster_dir": cluster_dir, "left": left}


def test_nothing_started_is_left_running(builds):
    assert builds["left"] == {}
    assert not list((builds["cluster_dir"] / "pids").glob("*.pid")), "pid files removed"


def test_executors_ran_in_both_worker_jvms(builds):
    """Tasks, Python (pandas UDF) workers included, ran in executors of the two workers."""
    work = builds["cluster_dir"] / "work"
    logs = {worker.name: list(worker.glob("app-*/*/stderr")) for worker in work.iterdir()}
    assert sorted(logs) == ["worker-1", "worker-2"]
    python_runs = 0
    for worker, stderr_files in logs.items():
        assert len(stderr_files) == 1, f"one executor on {worker}: {stderr_files}"
        text = stderr_files[0].read_text(errors="replace")
        assert "CoarseGrainedExecutorBackend" in text
        assert text.count("Executor: Finished task") > 10, f"{worker} ran tasks"
        python_runs += text.count("PythonRunner: Times:")
    assert python_runs > 0, "Python workers ran on the executors (the bin-packing models)"


def test_cluster_build_stores_what_the_local_build_stores(spark, builds):
    on_cluster = read_tables(spark, builds["cluster"].warehouse)
    local = builds["local"]
    assert sorted(on_cluster) == sorted(local)
    assert {"customers", "demo_customer_activity", "message_bundles", "sesam_golden"} <= set(
        local
    ), sorted(local)
    differences, row_count = table_differences(local, on_cluster, "locally", "on the cluster")
    assert differences == [], "\n".join(differences)
    assert row_count > 5000, "the demo's tables are not empty"


@pytest.mark.cluster
def test_a_slow_start_is_waited_for_with_progress_then_named(tmp_path):
    """`up` says what it waits for while it waits, and when its limit passes it names
    what was missing and stops what it started: here a limit of 2 s, which no JVM meets."""
    master_port, ui_port = free_ports(2, DEFAULT_PORTS)
    env = {
        **_env(),
        "DBT_MERGE_CLUSTER_DIR": str(tmp_path / "cluster"),
        "DBT_MERGE_CLUSTER_PYTHON": sys.executable,
        "DBT_MERGE_CLUSTER_MASTER_PORT": str(master_port),
        "DBT_MERGE_CLUSTER_MASTER_UI_PORT": str(ui_port),
        "DBT_MERGE_CLUSTER_WORKER_UI_PORT": "0",
        "DBT_MERGE_CLUSTER_WORKER_PORT": "0",
        "DBT_MERGE_CLUSTER_TIMEOUT": "2",
        "DBT_MERGE_CLUSTER_PROGRESS": "0",
    }
    try:
        up = _cluster("up", env)
        assert up.returncode == 1, f"2 s is too short for a JVM:\n{up.stdout}\n{up.stderr}"
        assert "cluster: waiting " in up.stdout and "of 2s for: " in up.stdout, up.stdout
        assert "cluster: not up after 2s:" in up.stderr, up.stderr
        assert "not registered" in up.stderr, "the missing workers are named"
    finally:
        _cluster("down", env)
    assert _processes_of(tmp_path / "cluster") == {}, "nothing of it is left running"
