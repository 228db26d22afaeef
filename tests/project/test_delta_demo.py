"""The demo on Delta Lake tables (issue #55), against the same demo on Iceberg.

`dbt build --target delta` (profiles.yml: the spark_session adapter with
`table_format: delta`, so seeds and models default to `file_format: delta`; every seed,
model and data test but dbt's own generic tests) runs in a process of its own, from a
snapshot of the project, with its own warehouse, while this process makes the run's
Iceberg build (`demo_build` in tests/conftest.py, which the demo tests and the cluster
test share). Then every table the Delta build stored is read here by path and compared
with the Iceberg build's, row for row.

What differs between the two by nature, and only that, is left out of the comparison:
the byte sizes of data files, which each format's writer lays out in its own way, and
so the auto-merge and compaction plans' sizes and the merges and bins they make
(FILE_SIZE_DEPENDENT; their files, keys and record counts are compared), and the
edges' own snapshot that the change-following merge's digest is stamped with (an
Iceberg snapshot id, a Delta version).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import process_env
from tests.demo import (
    Build,
    beside_the_demo_build,
    copy_project,
    read_tables,
    stored_tables,
    table_differences,
)

pytestmark = pytest.mark.delta

# dbt's own generic tests, left out of the Delta build: they check columns of tables
# that are compared row for row with the Iceberg build's (where they run). The package's
# generic tests and the demo's singular test run on Delta.
DBT_TESTS = ("not_null", "unique", "accepted_values")
# the demo's seeds and models (38), its package generic tests (4) and singular test (1)
NODES = 43

# tables only the Iceberg build has, and why
# per table: the columns that differ by format (the plans': from the data files' byte sizes)
FILE_SIZE_DEPENDENT = {
    "daily_events_merge_plan": {
        "size_bytes",
        "action",
        "reason",
        "explanation",
        "merge_index",
        "merge_min_key",
        "merge_max_key",
        "merge_file_count",
        "merge_size_bytes",
        "merge_where",
        "merge_files_where",
    },
    # the digest's stamp: the edges' snapshot id on Iceberg, their version on Delta
    "customers_edges__dbt_merge_digest": {"edges_snapshot"},
    # bins of files by bytes, and a report of them: checked on their own below
    "daily_events_compaction_plan": None,
    "daily_events_compaction_report": None,
}


@pytest.fixture(scope="module")
def builds(request, tmp_path_factory, spark):
    """The Delta build (a process of its own), the tables of the run's Iceberg build and
    those of the Delta build (read by `read_tables`)."""
    root = tmp_path_factory.mktemp("delta_vs_iceberg")
    build = Build(
        "delta",
        copy_project(root / "project"),
        root / "on_delta",
        process_env(DBT_MERGE_DEMO="1"),
        nodes=NODES,
        args=("--exclude", *(f"test_name:{name}" for name in DBT_TESTS)),
    )
    iceberg = beside_the_demo_build(request, build)
    return build, iceberg, read_tables(spark, build.warehouse)


def test_every_table_of_the_delta_build_is_a_delta_table(builds):
    build, _, _ = builds
    formats = {name: fmt for name, (_, fmt) in stored_tables(build.warehouse).items()}
    # sesam_c: a parquet seed by config (Iceberg reserves its column _deleted)
    assert formats.pop("sesam_c") == "parquet"
    assert set(formats.values()) == {"delta"}, formats
    assert len(formats) > 25, sorted(formats)


def test_the_delta_build_stores_what_the_iceberg_build_stores(builds):
    _, iceberg, on_delta = builds
    assert sorted(on_delta) == sorted(iceberg)
    differences, row_count = table_differences(
        iceberg,
        on_delta,
        "on Iceberg",
        "on Delta",
        FILE_SIZE_DEPENDENT,
    )
    assert differences == [], "\n".join(differences)
    assert row_count > 5000, "the demo's tables are not empty"


def test_the_plans_on_delta_cover_the_same_files_with_their_own_sizes(spark, builds):
    """The file-size-dependent part: 60 files of one day each on both, planned in the
    same key order; the Delta plan's sizes are Delta's files' sizes (its snapshot's
    ``size``), and its compaction report bounds its own plan."""
    build, iceberg, on_delta = builds
    plans = {}
    for fmt, tables in (("iceberg", iceberg), ("delta", on_delta)):
        rows = [json.loads(r) for r in tables["daily_events_merge_plan"][1]]
        plans[fmt] = sorted(rows, key=lambda r: r["range_index"])
    assert len(plans["delta"]) == len(plans["iceberg"]) == 60
    for column in ("range_index", "min_key", "max_key", "record_count", "mergeability"):
        assert [r[column] for r in plans["delta"]] == [r[column] for r in plans["iceberg"]]
    delta_files = spark.read.format("delta").load(
        str(stored_tables(build.warehouse)["daily_events"][0])
    )
    assert delta_files.inputFiles() and len(delta_files.inputFiles()) == 60
    bins = [json.loads(r) for r in on_delta["daily_events_compaction_plan"][1]]
    assert sum(b["entries"] for b in bins) == 60
    assert all(b["bytes"] <= 64 * 1024 for b in bins), bins
    report = [json.loads(r) for r in on_delta["daily_events_compaction_report"][1]]
    total = [r for r in report if r["level"] == "total"]
    assert total and total[0]["bins"] == len(bins) >= total[0]["lower_bound"], report
    assert total[0]["bytes"] == sum(b["bytes"] for b in bins)
