"""dbt-spark over Thrift, as a user reaches Spark on EMR, Dataproc or a self-managed
server: a real Spark Thrift Server (scripts/thrift_server.py, the venv's PySpark) and a
project on `type: spark, method: thrift` that installs dbt_merge, routes the upsert
strategy through dbt-spark's two macros (docs/upserts.md) and wraps its selects in
`dbt_merge.precombined()`. dbt runs as its own process (a Thrift client: no JVM).

The repository's demo on the `thrift` target (its default selector there leaves out the
Python models and what needs them), compared table for table with the run's
`spark_session` build of it (`demo_build`). Upserts in two batches (event time with a
delete column and a delete without an ordering value; commit time with Hudi's
`_hoodie_is_deleted`; partial updates); Sesam's entity merge with its components from
the SQL closure (`materialized='entity_components'`) and its generic tests, the golden
records equal to the `spark_session` build's (test_entity_merge.py); a changed locked
setting, provenance and a Python model refused by name, and nothing left running after
the server is stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from dbt_merge.core.sql import string_literal
from tests.conftest import DBT, ROOT
from tests.demo import (
    Build,
    beside_the_demo_build,
    copy_project,
    read_tables,
    stored_tables,
    table_differences,
)
from tests.functional.test_entity_merge import (
    SESAM_A,
    SESAM_B,
    SESAM_C,
    SESAM_GOLDEN,
    SESAM_MERGE,
)

pytestmark = pytest.mark.thrift

SCHEMA = "thrift_consumer"
# the file docs/upserts.md tells a project on dbt-spark to add (it shows it from the repository)
ROUTING = (ROOT / "macros" / "upsert" / "dbt_merge_on_dbt_spark.sql").read_text()
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
    # merge-on-read: the second batch writes position deletes, which the compaction
    # run-operation rewrites away
    "ups_mor.sql": _model(
        "unique_key='id', precombine_key='ts', delete_column='gone', table_type='merge_on_read'"
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
EXPECTED["ups_mor"] = EXPECTED["ups_event"]


@pytest.fixture(scope="module")
def server(thrift_server) -> dict:
    """The run's Thrift server (tests/conftest.py): a dbt process's environment."""
    return thrift_server


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


@contextlib.contextmanager
def _cursor(env: dict):
    """A PyHive cursor on the server of ``env``, closed with its connection after."""
    from pyhive import hive

    connection = hive.connect(host="127.0.0.1", port=int(env["DBT_MERGE_THRIFT_PORT"]))
    try:
        yield connection.cursor()
    finally:
        connection.close()


def run(env: dict, sql: str) -> None:
    """A statement over Thrift whose result is not read (PyHive cannot fetch it)."""
    with _cursor(env) as cursor:
        cursor.execute(sql)


def rows(env: dict, sql: str) -> set[tuple]:
    with _cursor(env) as cursor:
        cursor.execute(sql)
        return set(cursor.fetchall())


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


def test_merge_on_read_compaction_over_thrift(project, server, first_build):
    """The merge-on-read model's second batch left position deletes; the compaction
    run-operation's dry run changes nothing, its run rewrites them away with the rows
    unchanged and records the rewrite in auto_merge_provenance."""
    assert first_build.returncode == 0, first_build.stdout[-3000:]
    second = dbt(project, server, "run", "-s", "ups_mor", batch=2)
    assert second.returncode == 0, second.stdout[-3000:]
    table = f"{SCHEMA}.ups_mor"
    assert rows(server, f"select id, v, w, ts from {table}") == EXPECTED["ups_mor"]
    ((deletes,),) = rows(server, f"select count(*) from {table}.position_deletes")
    assert deletes > 0, "the second batch wrote no position delete"

    def compaction(execute: bool) -> subprocess.CompletedProcess:
        args = f"{{model: ups_mor, execute: {str(execute).lower()}}}"
        op = "dbt_merge.execute_upsert_compaction"
        result = dbt(project, server, "run-operation", op, "--args", args)
        assert result.returncode == 0, result.stdout[-3000:]
        return result

    dry = compaction(False)
    assert "upsert compaction dry run" in dry.stdout and "nothing was changed" in dry.stdout
    assert rows(server, f"select count(*) from {table}.position_deletes") == {(deletes,)}
    compaction(True)
    assert rows(server, f"select count(*) from {table}.position_deletes") == {(0,)}
    assert rows(server, f"select id, v, w, ts from {table}") == EXPECTED["ups_mor"]
    events = rows(server, f"select table_name, event_type from {SCHEMA}.auto_merge_provenance")
    assert (f"{SCHEMA}.ups_mor", "JOIN") in events, events


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


def test_the_next_scheduled_build_over_thrift(project, server, first_build):
    """The next `dbt build` of what the first built, as a scheduled job runs it: the
    parquet seed sesam_c is dropped and loaded again (its folder goes with it: the
    routing's spark__drop_relation purges a table that is not Iceberg, which Iceberg's
    Hive catalog drops without its folder), and Sesam's merge after it stores what the
    first build stored, its generic tests passing."""
    assert first_build.returncode == 0, first_build.stdout[-3000:]
    before = {name: rows(server, f"select * from {SCHEMA}.{name}") for name in ("sesam_c", "sesam")}
    again = dbt(project, server, "build", "--select", "sesam_c+", batch=1)
    assert again.returncode == 0, again.stdout[-3000:]
    assert "PASS dbt_merge_identity_is_deterministic_sesam" in again.stdout
    for name, stored in before.items():
        assert rows(server, f"select * from {SCHEMA}.{name}") == stored, name


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


def _sql_literal(value, sql_type: str) -> str:
    """A typed Spark SQL literal of a plan row's value (as plan_files gives it)."""
    if value is None:
        return f"cast(null as {sql_type})"
    if sql_type.startswith("array"):
        return f"cast(array({', '.join(_sql_literal(v, 'string') for v in value)}) as {sql_type})"
    if sql_type == "timestamp":
        return f"timestamp'{value.isoformat(sep=' ')}'"
    if sql_type == "string":
        return string_literal(str(value))
    return f"cast({value} as {sql_type})"


def test_auto_merge_of_an_existing_plan_over_thrift(project, server):
    """An Iceberg table of four small files, planned by the package's planner
    (dbt_merge.auto_merge.files.plan_files, from the table's data_files read over
    Thrift, as plan_table reads them) into a table model of the consumer project;
    `dbt run-operation dbt_merge.execute_auto_merge` over Thrift: the dry run changes
    nothing, the run merges the four files into one with the rows unchanged and records
    the merge in auto_merge_provenance; the same plan naming a Delta table is refused by
    name before anything runs (Delta's file list needs the spark_session adapter)."""
    from dbt_merge.auto_merge.files import DataFile, plan_files
    from dbt_merge.auto_merge.layout import PLAN_COLUMNS, TableLayout
    from dbt_merge.auto_merge.options import read_options

    table = f"{SCHEMA}.am_events"
    run(server, f"create schema if not exists {SCHEMA}")
    run(server, f"drop table if exists {table}")
    run(server, f"create table {table} (id int, v string) using iceberg")
    for key in (1, 2, 3, 4):  # a file each
        run(server, f"insert into {table} values ({key}, 'v{key}')")
    before = rows(server, f"select id, v from {table}")
    listed = rows(
        server,
        "select file_path, file_size_in_bytes, record_count, readable_metrics.id.lower_bound,"
        " readable_metrics.id.upper_bound from " + table + ".data_files",
    )
    assert len(listed) == 4, listed
    files = [
        DataFile(path, size, count, low, high, str(low), str(high))
        for path, size, count, low, high in listed
    ]
    options = read_options({"sort_column": "id"}, {}, model_name="am_plan")
    layout = TableLayout("spark_catalog", table, sort_column_type="int")
    plan = plan_files(files, options, layout, model_name="am_plan")
    assert [r["action"] for r in plan] == ["merge"] * 4, plan
    values = ",\n".join(
        "(" + ", ".join(_sql_literal(r[n], t) for n, t in PLAN_COLUMNS) + ")" for r in plan
    )
    names = ", ".join(f"`{n}`" for n, _ in PLAN_COLUMNS)
    (project / "models" / "am_plan.sql").write_text(
        "{{ config(materialized='table') }}\n"
        f"select * from values\n{values}\nas plan({names})\n"
    )
    try:
        built = dbt(project, server, "run", "-s", "am_plan")
        assert built.returncode == 0, built.stdout[-3000:]
        op = ["run-operation", "dbt_merge.execute_auto_merge", "--args"]
        dry = dbt(project, server, *op, "{plan: am_plan}")
        assert dry.returncode == 0, dry.stdout[-3000:]
        assert "1 merge(s) would run, rewriting 4 files" in dry.stdout, dry.stdout[-3000:]
        assert len(rows(server, f"select file_path from {table}.data_files")) == 4
        done = dbt(project, server, *op, "{plan: am_plan, execute: true}")
        assert done.returncode == 0, done.stdout[-3000:]
        assert "1 merge(s) executed, 4 files -> 1" in done.stdout, done.stdout[-3000:]
        # the same plan naming a Delta table (a model configured file_format delta, not
        # built): refused by name before anything runs, as dbt-spark cannot read
        # Delta's file list
        (project / "models" / "am_delta.sql").write_text(
            "{{ config(materialized='table', file_format='delta') }}\nselect 1 as id\n"
        )
        delta_values = values.replace(string_literal(table), string_literal(f"{SCHEMA}.am_delta"))
        assert delta_values != values
        (project / "models" / "am_plan_delta.sql").write_text(
            "{{ config(materialized='table') }}\n"
            f"select * from values\n{delta_values}\nas plan({names})\n"
        )
        built = dbt(project, server, "run", "-s", "am_plan_delta")
        assert built.returncode == 0, built.stdout[-3000:]
        refused = dbt(project, server, *op, "{plan: am_plan_delta, execute: true}")
        said = " ".join(refused.stdout.split())
        assert refused.returncode != 0, said[-3000:]
        assert (
            f"table spark_catalog.{SCHEMA}.am_delta has file_format delta (the config of model"
            " am_delta), whose plans are executed through the spark_session adapter only"
        ) in said, said[-3000:]
        assert "not on spark; on Databricks, compact with OPTIMIZE" in said
    finally:
        for name in ("am_plan.sql", "am_delta.sql", "am_plan_delta.sql"):
            if (project / "models" / name).exists():
                os.remove(project / "models" / name)
    assert len(rows(server, f"select file_path from {table}.data_files")) == 1
    assert rows(server, f"select id, v from {table}") == before
    events = rows(
        server,
        f"select event_type, plan_model, size(parent_ids), size(child_ids)"
        f" from {SCHEMA}.auto_merge_provenance where table_name = 'spark_catalog.{table}'",
    )
    assert events == {("JOIN", "am_plan", 4, 1)}, events


# the demo's tables a dbt-spark build stores (selectors.yml: the default there): every
# seed, and the SQL models that need no Python model and no spark_session step
DEMO_ON_DBT_SPARK = {
    "billing_accounts",
    "crm_customer_changes",
    "crm_customers",
    "demo_events",
    "message_events",
    "order_changes",
    "sesam_a",
    "sesam_b",
    "sesam_c",
    "sesam_expected",
    "support_contacts",
    "upload_fragments",
    "demo_event_log",
    "orders",
    "orders_commit_time",
    "sesam_edges",
}


@pytest.fixture(scope="module")
def demo_on_thrift(request, server, spark, tmp_path_factory):
    """`dbt build --target thrift` of the repository's demo (a process of its own, a
    Thrift client), the tables of the run's spark_session build, and the server's tables
    read here by path."""
    root = tmp_path_factory.mktemp("thrift_demo")
    build = Build(
        "thrift",
        copy_project(root / "project"),
        root / "run",
        {**server, "DBT_MERGE_DEMO": "1"},
        50,
    )
    local = beside_the_demo_build(request, build)
    warehouse = Path(server["DBT_MERGE_THRIFT_DIR"]) / "warehouse"
    return warehouse, local, read_tables(spark, warehouse)


def test_the_demo_on_thrift_stores_what_the_spark_session_build_stores(demo_on_thrift):
    warehouse, local, on_thrift = demo_on_thrift
    formats = {name: fmt for name, (_, fmt) in stored_tables(warehouse).items()}
    # sesam_c: a parquet seed by config (Iceberg reserves its column _deleted)
    assert formats.pop("sesam_c") == "parquet"
    assert set(formats.values()) == {"iceberg"}, formats
    assert set(on_thrift) == DEMO_ON_DBT_SPARK
    differences, row_count = table_differences(
        {name: local[name] for name in DEMO_ON_DBT_SPARK},
        on_thrift,
        "on spark_session",
        "on thrift",
    )
    assert differences == [], "\n".join(differences)
    assert row_count > 1000, "the demo's tables are not empty"
