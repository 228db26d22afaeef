"""A short soak (bench/soak.py, issue #74): six deliveries to every family, two of them
with a run killed (kill -9 of dbt and its JVM) at a random moment, every table compared
with a twin that never failed. `make test-long` only: it starts some thirty dbt
processes, one after the other (about ten minutes); `make soak` runs the long one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests import sampling
from tests.conftest import ROOT, process_env

pytestmark = pytest.mark.skipif(
    not sampling.LONG,
    reason="make test-long only (DBT_MERGE_TEST_PROFILE=long): some thirty dbt processes",
)

DELIVERIES = 6


def test_a_short_soak_ends_equal_to_its_twin():
    seed = sampling.seed(74)
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "soak.py"),
            "--format",
            "iceberg",
            "--deliveries",
            str(DELIVERIES),
            "--seed",
            str(seed),
        ],
        capture_output=True,
        text=True,
        env=process_env(),
        timeout=3600,
    )
    output = done.stdout + done.stderr
    summaries = [
        json.loads(line.removeprefix("soak: "))
        for line in done.stdout.splitlines()
        if line.startswith("soak: {")
    ]
    assert done.returncode == 0, output[-6000:]
    assert summaries, output[-6000:]
    summary = summaries[-1]
    assert summary["passed"] and summary["deliveries"] == DELIVERIES, summary
    assert summary["differences"] == 0 and summary["findings"] == 0, summary
    assert summary["kills"] >= 2, f"two deliveries with a run killed: {summary}"
