"""The package as users install it for Python models: a built wheel, not an editable
install. The wheel goes into a fresh venv with nothing of this checkout on its path,
and a separate project runs an upsert model (the adapter's materialization and the
strategy lookup come from the wheel) and a Python model importing dbt_merge."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.project.installing import SHORT_JVM, write_installing_project

pytestmark = pytest.mark.wheel

BATCHES = {
    1: "(1, 1, 'a', false), (1, 2, 'b', false), (2, 1, 'c', false)",
    2: "(1, 1, 'late', false), (2, 3, 'd', true), (3, 1, 'e', false)",
}
MODELS = {
    "batch.sql": """
        {{ config(materialized='view') }}
        {% set rows = {1: "BATCH_1", 2: "BATCH_2"} %}
        select cast(id as int) as id, cast(ts as int) as ts, name, is_deleted
        from values {{ rows[var('batch')] }} as t(id, ts, name, is_deleted)
    """.replace("BATCH_1", BATCHES[1]).replace("BATCH_2", BATCHES[2]),
    "orders.sql": """
        {{ config(materialized='incremental', incremental_strategy='upsert',
                  unique_key='id', precombine_key='ts', delete_column='is_deleted') }}
        select * from {{ ref('batch') }}
    """,
    "components.py": """
        import dbt_merge
        from dbt_merge.closure import connected_components


        def model(dbt, session):
            dbt.config(materialized="table")
            pairs = [("a", "b"), ("c", "b"), ("x", "y")]
            edges = session.createDataFrame(pairs, "src string, dst string")
            labels = connected_components(edges, "src", "dst")
            origin = f"'{dbt_merge.__file__}' as imported_from"
            return labels.selectExpr("node", "component", origin)
    """,
}
# singular tests: each returns the rows that are wrong
TESTS = {
    "orders_after_two_batches.sql": """
        select * from {{ ref('orders') }}
        where not ((id = 1 and ts = 2 and name = 'b') or (id = 3 and ts = 1 and name = 'e'))
        union all
        select null, null, 'row count', null from {{ ref('orders') }} having count(*) != 2
    """,
    "components_labels.sql": """
        select * from {{ ref('components') }}
        where component != case when node in ('a', 'b', 'c') then 'a' else 'x' end
        union all
        select 'row count', null, null from {{ ref('components') }} having count(*) != 5
    """,
    "imported_from_the_wheel.sql": """
        select * from {{ ref('components') }}
        where imported_from not like '%site-packages/dbt_merge/__init__.py'
    """,
}


# runs the dbt commands of argv[1] (a JSON list) one after the other in this process,
# printing BETWEEN_RUNS between them; exits 1 at the first that fails
BETWEEN_RUNS = "==== the next dbt command ===="
TWO_RUNS = f"""
import json, sys
from dbt.cli.main import dbtRunner

for number, args in enumerate(json.loads(sys.argv[1])):
    if number:
        print({BETWEEN_RUNS!r}, flush=True)
    if not dbtRunner().invoke(args).success:
        sys.exit(1)
"""


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 900) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout[-4000:]}\n{done.stderr}"
    return done.stdout


def _project(path: Path, warehouse: Path) -> None:
    spark = {"spark.master": "local[1]", "spark.driver.memory": "1g"}
    spark["spark.sql.shuffle.partitions"] = "1"
    spark.update(SHORT_JVM)
    write_installing_project(path, "shop", warehouse, server_side_parameters=spark)
    (path / "tests").mkdir()
    for name, text in MODELS.items():
        (path / "models" / name).write_text(textwrap.dedent(text).lstrip())
    for name, text in TESTS.items():
        (path / "tests" / name).write_text(textwrap.dedent(text).lstrip())


def test_the_wheel_runs_an_upsert_and_a_python_model(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    # built from a copy of the checkout's files: setuptools reuses an in-tree build/
    source = tmp_path / "source"
    listed = _run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], ROOT, env)
    for name in listed.splitlines():
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", "dist", str(source)],
        tmp_path,
        env,
    )
    wheels = list((tmp_path / "dist").glob("dbt_merge-*.whl"))
    assert len(wheels) == 1, wheels

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    constraints = ROOT / "requirements" / "constraints.txt"
    _run(
        [str(venv / "bin" / "pip"), "install", "-q", "-c", str(constraints), str(wheels[0])],
        tmp_path,
        env,
    )
    probe = _run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import dbt_merge, dbt.include.spark_session as inc; print(dbt_merge.__file__); "
            "print(inc.__file__)",
        ],
        tmp_path,
        env,
    )
    assert str(ROOT) not in probe, f"the fresh venv must not see this checkout: {probe}"

    shop = tmp_path / "shop"
    _project(shop, tmp_path / "warehouse")
    dbt = [str(venv / "bin" / "dbt")]
    common = ["--project-dir", str(shop), "--profiles-dir", str(shop)]
    _run([*dbt, "deps", *common], shop, env)
    # the two runs in one process of the venv (dbt's Python API, as `dbt` itself calls
    # it): one JVM start, not two
    runs = [["run", *common, "--vars", "{batch: 1}"], ["build", *common, "--vars", "{batch: 2}"]]
    out = _run([str(venv / "bin" / "python"), "-c", TWO_RUNS, json.dumps(runs)], shop, env)
    first, _, second = out.partition(BETWEEN_RUNS)
    assert second, f"the first run failed:\n{first[-3000:]}"
    assert "PASS=6" in second and "ERROR=0" in second, second[-3000:]
    # no `dbt-merge-jars` was run: the first session fetched Iceberg's jar into the venv
    fetched = sorted(p.name for p in (venv / "share" / "dbt_merge" / "jars").iterdir())
    assert fetched == ["iceberg-spark-runtime-3.5_2.12-1.10.2.jar"], fetched
