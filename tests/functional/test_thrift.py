"""dbt-spark over Thrift, as a user reaches Spark on EMR, Dataproc or a self-managed
server: a real Spark Thrift Server (scripts/thrift_server.py, the venv's PySpark) and a
project on `type: spark, method: thrift` that installs dbt_merge, routes the upsert
strategy through dbt-spark's two macros (docs/upserts.md) and wraps its selects in
`dbt_merge.precombined()`. dbt runs as its own process (a Thrift client: no JVM).

Upserts in two batches (event time with a delete column and a delete without an
ordering value; commit time with Hudi's `_hoodie_is_deleted`; partial updates); Sesam's
entity merge with its components from the SQL closure (`materialized='entity_components'`)
and its generic tests, the golden records equal to the `spark_session` build's
(test_entity_merge.py); a changed locked setting, provenance and a Python model refused
by name, and nothing left running after the server is stopped.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import DBT, ROOT
from tests.conftest import process_env as _env
from tests.functional.test_entity_merge import (
    SESAM_A,
    SESAM_B,
    SESAM_C,
    SESAM_GOLDEN,
    SESAM_MERGE,
)

SERVER = [sys.executable, str(ROOT / "scripts" / "thrift_server.py")]
SCHEMA = "thrift_consumer"
# the file docs/upserts.md tells a project on dbt-spark to add, as it stands there
ROUTING = re.search(
    r"```sql\n(-- macros/dbt_merge_on_dbt_spark\.sql\n.*?)```",
    (ROOT / "docs" / "upserts.md").read_text(),
    flags=re.S,
).group(1)
# every batch of every model: batch number, key, value, ordering value, delete flag
CHANGES = """batch,id,v,w,ts,gone
1,1,a,x,1,false
1,1,b,y,2,false
1,2,c,z,1,false
1,3,d,,1,false
2,1,old,old,0,false
2,2,,,,true
2,3,e,,5,false
2,4,f,q,1,false
"""


def _model(config: str, select: str = "select id, v, w, ts, gone") -> str:
    return (
        f"{{{{ config(materialized='incremental', incremental_strategy='upsert', {config}) }}}}\n"
        "{% call dbt_merge.precombined() %}\n"
        f"    {select} from {{{{ ref('changes') }}}}"
        " where batch = {{ env_var('DBT_MERGE_TEST_BATCH') }}\n"
        "{% endcall %}\n"
    )


MODELS = {
    # event time: batch 2's older version of 1 loses, 2 is deleted without an ordering value
    "ups_event.sql": _model("unique_key='id', precombine_key='ts', delete_column='gone'"),
    # commit time: Hudi's delete column, found by its name
    "ups_commit.sql": _model(
        "unique_key='id', merge_mode='commit_time_ordering', precombine_key='ts'",
        "select id, v, w, ts, gone as _hoodie_is_deleted",
    ),
    # partial updates: a null of the batch keeps the stored value
    "ups_partial.sql": _model(
        "unique_key='id', precombine_key='ts', partial_update=true",
        "select id, v, w, coalesce(ts, 9) as ts",
    ),
    "a_view.sql": "select * from {{ ref('changes') }}",
    # Sesam's example: edges (a view), components in SQL, golden records
    "sesam_edges.sql": "{{ dbt_merge.equality_edges('sesam') }}",
    "sesam_components.sql": (
        "{{ config(materialized='entity_components') }}\nselect * from {{ ref('sesam_edges') }}"
    ),
    "sesam.sql": (
        "{{ config(materialized='table') }}\n"
        "{{ dbt_merge.merge_entities('sesam', ref('sesam_components')) }}"
    ),
    "sesam.yml": """
version: 2
models:
  - name: sesam
    data_tests:
      - dbt_merge.identity_is_deterministic:
          arguments: {merge: sesam, components: "{{ ref('sesam_components') }}"}
      - dbt_merge.deleted_entities_not_merged:
          arguments: {merge: sesam, components: "{{ ref('sesam_components') }}"}
""",
}
EXPECTED = {
    "ups_event": {(1, "b", "y", 2), (3, "e", None, 5), (4, "f", "q", 1)},
    "ups_commit": {(1, "old", "old", 0), (3, "e", None, 5), (4, "f", "q", 1)},
    "ups_partial": {(1, "b", "y", 2), (2, "c", "z", 9), (3, "e", None, 5), (4, "f", "q", 1)},
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A Thrift server on a free port with its state in a temporary folder; stopped at
    the end, and then nothing of it runs."""
    folder = tmp_path_factory.mktemp("thrift")
    env = _env(DBT_MERGE_THRIFT_PORT=str(_free_port()), DBT_MERGE_THRIFT_DIR=str(folder))
    pids = []
    try:
        up = subprocess.run([*SERVER, "up"], env=env, capture_output=True, text=True, timeout=600)
        assert up.returncode == 0, up.stdout + up.stderr
        pids.append(int((folder / "server.pid").read_text()))
        yield env
    finally:  # also after a failed start
        down = subprocess.run([*SERVER, "down"], env=env, capture_output=True, text=True)
    assert down.returncode == 0, down.stdout + down.stderr
    (pid,) = pids
    assert not (folder / "server.pid").exists(), "the pid file is left"
    assert not Path(f"/proc/{pid}").exists(), "the server's JVM still runs"
    status = subprocess.run([*SERVER, "status"], env=env, capture_output=True, text=True)
    assert status.returncode == 1 and "not running" in status.stdout


@pytest.fixture(scope="module")
def project(server, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("consumer")
    for folder in ("models", "macros", "seeds"):
        (path / folder).mkdir()
    project = {
        "name": "consumer",
        "version": "1.0",
        "config-version": 2,
        "profile": "consumer",
        "models": {"consumer": {"+file_format": "iceberg"}},
        "seeds": {
            "consumer": {
                "+file_format": "iceberg",
                "+column_types": {"w": "string"},
                # Iceberg reserves the column name _deleted (see test_entity_merge.py)
                "sesam_c": {"+file_format": "parquet", "+column_types": {"_deleted": "boolean"}},
            }
        },
        "vars": {"dbt_merge": {"entity_merges": {"sesam": SESAM_MERGE}}},
        "flags": {"send_anonymous_usage_stats": False},
    }
    (path / "dbt_project.yml").write_text(yaml.safe_dump(project, sort_keys=False))
    (path / "packages.yml").write_text(f"packages:\n  - local: {ROOT}\n")
    # the target of the repository's profiles.yml, under this project's profile name
    thrift = yaml.safe_load((ROOT / "profiles.yml").read_text())["dbt_merge"]["outputs"]["thrift"]
    thrift.update(schema=SCHEMA)
    profiles = {"consumer": {"target": "thrift", "outputs": {"thrift": thrift}}}
    (path / "profiles.yml").write_text(yaml.safe_dump(profiles, sort_keys=False))
    (path / "macros" / "dbt_merge_on_dbt_spark.sql").write_text(ROUTING)
    (path / "seeds" / "changes.csv").write_text(CHANGES)
    for name, text in (("sesam_a", SESAM_A), ("sesam_b", SESAM_B), ("sesam_c", SESAM_C)):
        (path / "seeds" / f"{name}.csv").write_text(text)
    for name, text in MODELS.items():
        (path / "models" / name).write_text(text)
    assert dbt(path, server, "deps").returncode == 0
    return path


def dbt(path: Path, env: dict, *args: str, batch: int = 1) -> subprocess.CompletedProcess:
    common = ["--project-dir", str(path), "--profiles-dir", str(path)]
    return subprocess.run(
        [DBT, *args, *common],
        env={**env, "DBT_MERGE_TEST_BATCH": str(batch)},
        capture_output=True,
        text=True,
        timeout=600,
    )


def rows(env: dict, sql: str) -> set[tuple]:
    from pyhive import hive

    connection = hive.connect(host="127.0.0.1", port=int(env["DBT_MERGE_THRIFT_PORT"]))
    try:
        cursor = connection.cursor()
        cursor.execute(sql)
        return set(cursor.fetchall())
    finally:
        connection.close()


@pytest.fixture(scope="module")
def first_build(project, server) -> subprocess.CompletedProcess:
    """The project's first `dbt build`: seeds, the upserts' first batch, Sesam's merge
    and its generic tests."""
    return dbt(project, server, "build", batch=1)


def test_upserts_in_two_batches_over_thrift(project, server, first_build):
    assert first_build.returncode == 0, first_build.stdout[-3000:]
    assert rows(server, f"select id, v, w, ts from {SCHEMA}.ups_event") == {
        (1, "b", "y", 2),
        (2, "c", "z", 1),
        (3, "d", None, 1),
    }
    second = dbt(project, server, "run", "-s", "ups_*", batch=2)
    assert second.returncode == 0, second.stdout[-3000:]
    for model, expected in EXPECTED.items():
        stored = rows(server, f"select id, v, w, ts from {SCHEMA}.{model}")
        assert stored == expected, model
    # the settings the first incremental run adopted are the table's lock
    (settings,) = rows(server, f"show tblproperties {SCHEMA}.ups_event ('dbt_merge.upsert')")
    assert '"precombine_key": ["ts"]' in settings[1], settings


def test_an_entity_merge_with_the_sql_closure_over_thrift(project, server, first_build):
    """The first build built Sesam's merge and passed its generic tests; the golden
    records are the spark_session build's, and no scratch table is left."""
    assert first_build.returncode == 0, first_build.stdout[-3000:]
    assert "PASS dbt_merge_identity_is_deterministic_sesam" in first_build.stdout
    assert "PASS dbt_merge_deleted_entities_not_merged_sesam" in first_build.stdout
    stored = rows(
        server,
        f"select `_id`, `$ids`, `$deleted`, `_updated`, `$replaced`, entity from {SCHEMA}.sesam",
    )
    # PyHive returns arrays as JSON text
    golden = {(i, json.dumps(ids, separators=(",", ":")), *rest) for i, ids, *rest in SESAM_GOLDEN}
    assert stored == golden
    tables = rows(server, f"show tables in {SCHEMA}")
    assert not [t for t in tables if "__dbt_merge_closure_" in t[1]], tables


def test_what_cannot_run_over_thrift_is_refused_by_name(project, server):
    models = project / "models"
    # a changed locked setting
    changed = MODELS["ups_event.sql"].replace("precombine_key='ts'", "precombine_key='id'")
    (models / "ups_event.sql").write_text(changed)
    # provenance needs the spark_session adapter's materialization: refused on the
    # first run (dbt-spark's CREATE TABLE AS) already
    (models / "ups_provenance.sql").write_text(
        _model("unique_key='id', precombine_key='ts', delete_column='gone', provenance=true")
    )
    # a Python model with the package's pre-hook, as docs/deployment.md shows it
    (models / "py_model.py").write_text("def model(dbt, session):\n    return session.range(1)\n")
    (models / "py_model.yml").write_text(
        "version: 2\nmodels:\n  - name: py_model\n    config:\n"
        '      pre_hook: "{{ dbt_merge.require_python_models() }}"\n'
    )
    try:
        result = dbt(project, server, "run", "-s", "ups_event", "ups_provenance", "py_model")
    finally:
        (models / "ups_event.sql").write_text(MODELS["ups_event.sql"])
        for name in ("ups_provenance.sql", "py_model.py"):
            os.remove(models / name)
    output = result.stdout
    assert result.returncode == 1, output[-3000:]
    assert "model ups_event, config 'precombine_key'" in output, output[-3000:]
    assert "provenance events need the spark_session adapter" in output, output[-3000:]
    assert "set provenance=false" in output
    assert "Python model py_model cannot run on the spark adapter" in output, output[-3000:]
    # the stored rows are as the last good run left them
    assert rows(server, f"select id, v, w, ts from {SCHEMA}.ups_event") == EXPECTED["ups_event"]
