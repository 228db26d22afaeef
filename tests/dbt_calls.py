"""What dbt costs the suite: every dbt command the test processes run (dbtRunner, which
dbt-tests-adapter's run_dbt calls too) and the seconds it spends loading the manifest
(a full or partial parse, ManifestLoader.get_full_manifest), per test file.

The end of a run prints the totals and the files that parse most, so that a change that
makes the suite parse more shows in CI's log. dbt processes that tests start (the CLI,
kill, wheel and cluster tests) are not counted.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict

import pytest
from dbt.cli.main import dbtRunner
from dbt.parser.manifest import ManifestLoader

SHOWN = 8  # files listed at the end


class DbtCalls:
    def __init__(self) -> None:
        self.file = "(no test)"
        # file -> [commands, seconds in commands, manifest loads, seconds loading]
        self.files: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0, 0.0])

    def add(self, other: dict[str, list[float]]) -> None:
        for file, figures in other.items():
            self.files[file] = [a + b for a, b in zip(self.files[file], figures, strict=True)]

    def timed(self, function, first: int):
        """function, adding 1 and its seconds to self.files[file][first:first + 2]."""
        calls = self

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                figures = calls.files[calls.file]
                figures[first] += 1
                figures[first + 1] += time.perf_counter() - start

        return wrapper

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item):
        self.file = item.nodeid.split("::", 1)[0]
        return (yield)

    def pytest_sessionfinish(self, session) -> None:
        if hasattr(session.config, "workeroutput"):
            session.config.workeroutput["dbt_calls"] = json.dumps(self.files)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        self.add(json.loads(getattr(node, "workeroutput", {}).get("dbt_calls", "{}")))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.files:
            return
        commands, seconds, loads, loading = (
            sum(f[i] for f in self.files.values()) for i in range(4)
        )
        write = terminalreporter.write_line
        terminalreporter.section("dbt in the test processes")
        write(
            f"{commands:.0f} dbt commands, {seconds:.0f} s; of that, {loads:.0f} manifest loads "
            f"(parses, full or partial), {loading:.0f} s"
        )
        ranked = sorted(self.files.items(), key=lambda item: -item[1][3])[:SHOWN]
        for file, (n, s, m, p) in ranked:
            write(f"  {p:7.1f} s parsing in {m:3.0f} of {n:3.0f} commands ({s:6.1f} s): {file}")


def pytest_configure(config) -> None:
    calls = DbtCalls()
    dbtRunner.invoke = calls.timed(dbtRunner.invoke, 0)
    ManifestLoader.get_full_manifest = classmethod(
        calls.timed(ManifestLoader.get_full_manifest.__func__, 2)
    )
    config.pluginmanager.register(calls, "dbt_merge_dbt_calls")
