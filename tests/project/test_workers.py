"""The suite's workers are isolated (tests/scheduling.py): two workers that build the
same model name in the same schema at the same time each see their own table, kept in
their own warehouse."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT
from tests.conftest import process_env as _env


def test_two_workers_build_the_same_model_apart(tmp_path):
    probe = ROOT / "tests" / "project" / "worker_probe.py"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-o", "python_files=worker_probe.py"]
        + ["-q", "--basetemp", str(tmp_path / "base"), str(probe)],
        cwd=ROOT,
        env=_env(DBT_MERGE_PROBE_DIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "2 passed" in output, output[-4000:]
    # each worker built into a warehouse of its own
    warehouses = {path.stem: path.read_text() for path in tmp_path.glob("*.built")}
    assert sorted(warehouses) == ["gw0", "gw1"], warehouses
    assert warehouses["gw0"] != warehouses["gw1"], warehouses
