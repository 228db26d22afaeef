"""dbt-tests-adapter's upsert cases (an incremental model with a unique key, dbt-spark's
`merge` strategy: `BaseIncrementalUniqueKey`, `BaseMergeExcludeColumns`) on Delta Lake
tables, through the spark_session adapter with `table_format: delta`, as dbt-spark's own
functional suite runs them on Delta.

The test run's session has Iceberg's catalog as `spark_catalog`, and one process has
one session, so the cases run in a pytest run of their own (one JVM start) whose session
and profile are Delta's (tests/conftest.py, TABLE_FORMAT): the same classes as
test_peer_suite.py's, with their models and seeds in `file_format: delta`. After each
case, every table of its schema is checked to be a Delta table (tests/peer/conftest.py).
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET

from tests.conftest import ROOT, TABLE_FORMAT_ENV, process_env

CASES = "TestIncrementalUniqueKey or TestMergeExcludeColumns"
TIMEOUT = 900  # seconds for the run (about 100 s alone on 2 cores)


def test_the_upsert_cases_pass_on_delta_tables(tmp_path):
    report = tmp_path / "junit.xml"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/peer/test_peer_suite.py",
            "-k",
            CASES,
            f"--junitxml={report}",
            "-q",
        ],
        cwd=ROOT,
        env=process_env(**{TABLE_FORMAT_ENV: "delta"}),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    output = (run.stdout + run.stderr)[-6000:]
    assert run.returncode == 0, output
    cases = list(ET.parse(report).getroot().iter("testcase"))
    outcomes = {
        f"{case.get('classname').rsplit('.', 1)[-1]}::{case.get('name')}": [
            child.tag for child in case if child.tag in ("failure", "error", "skipped")
        ]
        for case in cases
    }
    assert len(outcomes) == 11, outcomes  # 10 unique-key cases and the exclude-columns one
    # an error is also a case whose tables were not all Delta tables (tests/peer/conftest.py)
    assert {name for name, bad in outcomes.items() if bad} == set(), outcomes
