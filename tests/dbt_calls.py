"""What dbt costs the suite: every dbt command the test processes run (dbtRunner, which
dbt-tests-adapter's run_dbt calls too), the seconds it spends loading the manifest
(ManifestLoader.get_full_manifest) and, of those loads, the full parses and why dbt
could not reuse the saved manifest (its partial parse), per test file.

The end of a run prints the totals, the reasons for full parses and the files that parse
most, so that a change that makes the suite parse more shows in CI's log. dbt processes
that tests start (the CLI, kill, wheel and cluster tests) are not counted.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict

import pytest
from dbt.cli.main import dbtRunner
from dbt.parser.manifest import ManifestLoader

SHOWN = 8  # files listed at the end
# figures kept per file, in this order
COMMANDS, COMMAND_SECONDS, LOADS, LOAD_SECONDS, FULL, FULL_SECONDS = range(6)
# why a load parsed everything where dbt's reason is not asked (no saved manifest)
NO_SAVED_MANIFEST = "no saved manifest (the project's first parse)"


class DbtCalls:
    def __init__(self) -> None:
        self.file = "(no test)"
        self.files: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0, 0.0, 0, 0.0])
        # (file, why) -> full parses
        self.reasons: Counter[tuple[str, str]] = Counter()
        self.loading = False  # inside get_full_manifest
        self.reason: str | None = None  # why the load in progress parses everything

    def add(self, other: dict) -> None:
        for file, figures in other["files"].items():
            self.files[file] = [a + b for a, b in zip(self.files[file], figures, strict=True)]
        for file, why, count in other["reasons"]:
            self.reasons[file, why] += count

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

    def loads(self, get_full_manifest):
        """get_full_manifest, timed, and counted as a full parse when dbt read no saved
        manifest it could reuse (read_manifest_for_partial_parse returned None)."""
        calls = self

        def wrapper(*args, **kwargs):
            calls.loading, calls.reason = True, None
            start = time.perf_counter()
            try:
                return get_full_manifest(*args, **kwargs)
            finally:
                seconds = time.perf_counter() - start
                figures = calls.files[calls.file]
                figures[LOADS] += 1
                figures[LOAD_SECONDS] += seconds
                if calls.reason is not None:
                    figures[FULL] += 1
                    figures[FULL_SECONDS] += seconds
                    calls.reasons[calls.file, calls.reason] += 1
                calls.loading = False

        return wrapper

    def reads(self, read_manifest_for_partial_parse):
        calls = self

        def wrapper(loader):
            saved = read_manifest_for_partial_parse(loader)
            if calls.loading and saved is None and calls.reason is None:
                calls.reason = NO_SAVED_MANIFEST
            return saved

        return wrapper

    def checks(self, is_partial_parsable):
        calls = self

        def wrapper(loader, manifest):
            valid, reason = is_partial_parsable(loader, manifest)
            if calls.loading and not valid:
                calls.reason = getattr(reason, "name", str(reason))
            return valid, reason

        return wrapper

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item):
        self.file = item.nodeid.split("::", 1)[0]
        return (yield)

    def pytest_sessionfinish(self, session) -> None:
        if hasattr(session.config, "workeroutput"):
            session.config.workeroutput["dbt_calls"] = json.dumps(
                {
                    "files": self.files,
                    "reasons": [[f, why, n] for (f, why), n in self.reasons.items()],
                }
            )

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        output = getattr(node, "workeroutput", {}).get("dbt_calls")
        if output:
            self.add(json.loads(output))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.files:
            return
        totals = [sum(f[i] for f in self.files.values()) for i in range(6)]
        write = terminalreporter.write_line
        terminalreporter.section("dbt in the test processes")
        write(
            f"{totals[COMMANDS]:.0f} dbt commands, {totals[COMMAND_SECONDS]:.0f} s; of that, "
            f"{totals[LOADS]:.0f} manifest loads, {totals[LOAD_SECONDS]:.0f} s, of which "
            f"{totals[FULL]:.0f} full parses, {totals[FULL_SECONDS]:.0f} s"
        )
        why = Counter()
        for (_, reason), count in self.reasons.items():
            why[reason] += count
        reasons = ", ".join(f"{reason} {count}" for reason, count in why.most_common())
        write(f"full parses, by dbt's reason: {reasons}")
        ranked = sorted(self.files.items(), key=lambda item: -item[1][LOAD_SECONDS])[:SHOWN]
        for file, f in ranked:
            write(
                f"  {f[LOAD_SECONDS]:7.1f} s parsing in {f[LOADS]:3.0f} of {f[COMMANDS]:3.0f} "
                f"commands ({f[COMMAND_SECONDS]:6.1f} s; {f[FULL]:.0f} full, "
                f"{f[FULL_SECONDS]:.0f} s): {file}"
            )


def pytest_configure(config) -> None:
    calls = DbtCalls()
    dbtRunner.invoke = calls.timed(dbtRunner.invoke, COMMANDS)
    ManifestLoader.get_full_manifest = classmethod(
        calls.loads(ManifestLoader.get_full_manifest.__func__)
    )
    ManifestLoader.read_manifest_for_partial_parse = calls.reads(
        ManifestLoader.read_manifest_for_partial_parse
    )
    ManifestLoader.is_partial_parsable = calls.checks(ManifestLoader.is_partial_parsable)
    config.pluginmanager.register(calls, "dbt_merge_dbt_calls")
