"""How `make test` shares the suite between pytest-xdist workers (``-n 2``).

Each worker is a process of its own, so it has its own SparkSession (a JVM), warehouse,
Derby metastore and dbt project copies: tests/conftest.py makes its run folder with
``mkdtemp``, and ports are taken free per test (the cluster test). What two workers
must not split is a costly fixture, so the unit of work is

* the group of files that share a session fixture (SHARED: the demo's build, which the
  demo tests and the cluster test go on from);
* else the test's file: a file's classes share their module fixtures and dbt projects.

Units go out largest first (longest processing time first: the property test must not
start last), by the seconds each unit took in a recorded run, tests/durations.json. A
unit that file does not know yet goes after the known ones, in collection order.
``DBT_MERGE_TEST_DURATIONS=write`` makes a run record its units' seconds there (a
whole suite run, then commit the file).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

# files whose tests share a session fixture, and so a worker: file -> their unit. (Not
# xdist_group marks: xdist 3.8's loadgroup puts the group into a test's node id in a way
# pytest 9 no longer reads, so marked tests were scheduled by file.)
SHARED = {
    # demo_build: the run's one local demo build, which they go on from or compare with
    "tests/project/test_demo_project.py": "demo",
    "tests/cluster/test_cluster.py": "demo",
    "tests/project/test_delta_demo.py": "demo",
    "tests/functional/test_thrift.py": "demo",
    "tests/peer/test_peer_thrift.py": "demo",  # thrift_server, with test_thrift.py
}
# files whose tests are units of their own (they share nothing and must run apart)
ALONE = {"tests/project/worker_probe.py"}
DURATIONS = Path(__file__).with_name("durations.json")
RECORD_ENV = "DBT_MERGE_TEST_DURATIONS"


def unit_of(nodeid: str) -> str:
    """The unit a test runs in (see SHARED and ALONE), by default its file."""
    file = nodeid.split("::", 1)[0]
    if file in ALONE:
        return nodeid
    return SHARED.get(file, file)


def recorded_seconds() -> dict[str, float]:
    return json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "load":
        return None  # another mode asked for by name (each, loadscope, worksteal...)
    from xdist.scheduler.loadscope import LoadScopeScheduling

    seconds = recorded_seconds()

    class LargestUnitFirst(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            # the largest known unit left goes next (max keeps the first of equals, so
            # unknown units keep their collection order)
            scope = max(self.workqueue, key=lambda unit: seconds.get(unit, -1.0))
            self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return LargestUnitFirst(config, log)


def pytest_configure(config):
    if os.environ.get(RECORD_ENV) == "write" and not hasattr(config, "workerinput"):
        config.pluginmanager.register(DurationRecorder(), "dbt_merge_durations")


class DurationRecorder:
    """Adds up setup, call and teardown seconds per unit on the controller and writes
    them to tests/durations.json at the end of the run."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[unit_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session) -> None:
        ranked = sorted(self.seconds.items(), key=lambda item: -item[1])
        DURATIONS.write_text(json.dumps({k: round(v, 1) for k, v in ranked}, indent=1) + "\n")
