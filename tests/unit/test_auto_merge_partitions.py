"""Iceberg partitions as ranges, and the plan of a table's partitions."""

from __future__ import annotations

from dataclasses import replace as _replace
from datetime import timedelta

import pytest

from dbt_merge.auto_merge.errors import AutoMergeError
from dbt_merge.auto_merge.layout import TableLayout
from dbt_merge.auto_merge.options import read_options
from dbt_merge.auto_merge.partitions import plan_partitions, ranges_from_partitions
from dbt_merge.auto_merge.planner import plan_auto_merge
from dbt_merge.auto_merge.settings import AutoMergeSettings
from tests.unit.auto_merge_fixtures import A, T, merged_ids

# -- ranges from the partitions metadata table --------------------------------------------


def partition_row(day, size, files, records=100, updated=T, **extra):
    return {
        "partition": {"day": day, **extra},
        "spec_id": 0,
        "record_count": records,
        "file_count": files,
        "total_data_file_size_in_bytes": size,
        "last_updated_at": updated,
    }


def test_partitions_become_ranges_in_key_order():
    rows = [
        partition_row("2024-01-03", 30, 3),
        partition_row("2024-01-01", 10, 1),
        partition_row(None, 5, 1),  # null partition values sort first
        partition_row("2024-01-02", 20, 2),
    ]
    ranges = ranges_from_partitions(rows, model_name="m")
    assert [r.range_id for r in ranges] == [
        "day=null",
        "day=2024-01-01",
        "day=2024-01-02",
        "day=2024-01-03",
    ]
    assert [r.key_range for r in ranges] == [
        "(-inf,null]",
        "(null,2024-01-01]",
        "(2024-01-01,2024-01-02]",
        "(2024-01-02,2024-01-03]",
    ], "each partition covers (previous, itself]"
    assert [(r.size_bytes, r.file_count, r.record_count) for r in ranges][1] == (10, 1, 100)
    assert {r.mergeability for r in ranges} == {A}, "partitions are system-made: ALWAYS"

    plan = plan_auto_merge(ranges, AutoMergeSettings(split_threshold=200), T, "m")
    assert merged_ids(plan) == [["day=null", "day=2024-01-01", "day=2024-01-02"]], "limit 50"
    assert plan.merges[0].record_count == 300


def test_partition_delay_counts_from_the_last_update():
    rows = [
        partition_row("a", 1, 1, updated=T),
        partition_row("b", 1, 1, updated=T - timedelta(days=2)),
        partition_row("c", 1, 1, updated=T - timedelta(days=2)),
    ]
    ranges = ranges_from_partitions(rows, model_name="m", mergeability="DELAY:1d")
    plan = plan_auto_merge(ranges, AutoMergeSettings(), T + timedelta(hours=1), "m")
    assert merged_ids(plan) == [["day=b", "day=c"]], "'a' was written an hour ago"
    assert plan.decision("day=a").due_at == T + timedelta(days=1)


def test_partition_mergeability_per_row():
    rows = [partition_row(d, 1, 1) for d in ("a", "b", "c", "d")]
    ranges = ranges_from_partitions(
        rows,
        model_name="m",
        mergeability=lambda row: "NEVER" if row["partition"]["day"] == "c" else None,
    )
    assert [str(r.mergeability) for r in ranges] == ["ALWAYS", "ALWAYS", "NEVER", "ALWAYS"]


def test_multi_field_and_unpartitioned_tables():
    rows = [partition_row(2, 1, 1, hour=None), partition_row(1, 1, 1, hour=5)]
    ranges = ranges_from_partitions(rows, model_name="m")
    assert [r.range_id for r in ranges] == ["day=1/hour=5", "day=2/hour=null"]
    assert ranges[1].key_range == "(1/5,2/null]"

    unpartitioned = {k: v for k, v in partition_row("x", 7, 3).items() if k != "partition"}
    (only,) = ranges_from_partitions([unpartitioned], model_name="m")
    assert (only.range_id, only.key_range, only.size_bytes) == ("(unpartitioned)", "(-inf,+inf)", 7)


@pytest.mark.parametrize(
    "rows, message",
    [
        (
            [{"partition": {"day": 1}, "file_count": 1}],
            "each row needs the column(s) record_count, total_data_file_size_in_bytes "
            "(got ['file_count', 'partition'])",
        ),
        (
            [partition_row(1, 1, 1), partition_row(1, 2, 2)],
            "each partition must appear once (got day=1)",
        ),
        (
            [partition_row(1, 1, -1)],
            "file_count of partition day=1 must be a whole number >= 0 (got -1)",
        ),
        (
            [partition_row(1, 1, 1), partition_row("x", 1, 1)],
            "partition values must be comparable (got values of types int, str)",
        ),
        (
            [partition_row(1, 1, 1), {**partition_row(2, 1, 1), "partition": None}],
            "a row without partition values must be the only row (an unpartitioned table) "
            "(got 2 rows)",
        ),
        (
            [{**partition_row(1, 1, 1), "partition": "day=1"}],
            "partition must be a struct (dict) or a tuple of field values (got 'day=1')",
        ),
    ],
)
def test_bad_partition_rows_are_refused(rows, message):
    with pytest.raises(AutoMergeError) as info:
        ranges_from_partitions(rows, model_name="orders")
    assert (
        str(info.value) == f"dbt_merge auto-merge in model orders, setting 'partitions': {message}"
    )


def test_partition_delay_without_last_updated_at_is_refused():
    row = {**partition_row(1, 1, 1), "last_updated_at": None}
    with pytest.raises(AutoMergeError, match=r"DELAY needs the time it was marked"):
        ranges_from_partitions([row], model_name="m", mergeability="DELAY:1h")


# -- the plan of a table's partitions ----------------------------------------------------------


def partitions_row(value, files=2, size=10, updated=T):
    return {
        "partition": {"region": value},
        "partition_text": {"region": value},
        "record_count": files,
        "file_count": files,
        "total_data_file_size_in_bytes": size,
        "last_updated_at": updated,
        "file_paths": [f"/wh/{value}/{i}.parquet" for i in range(files)],
    }


def test_partitions_plan_and_where_clauses():
    layout = TableLayout("c", "db.t", None, {"region": "region"}, {"region": "string"})
    typed = _replace(
        read_options(
            {"source": "partitions", "mergeability": [{"from": "c", "to": "c"}]},
            None,
            model_name="m",
        ),
    )
    typed = _replace(typed, rules=(_replace(typed.rules[0], lower=("c",), upper=("c",)),))
    rows = plan_partitions([partitions_row(v) for v in "edcba"], typed, layout, model_name="m")
    assert [(r["range_id"], r["reason"]) for r in rows] == [
        ("region=a", "merged"),
        ("region=b", "merged"),
        ("region=c", "never"),
        ("region=d", "merged"),
        ("region=e", "merged"),
    ]
    assert rows[0]["merge_where"] == "(`region` = 'a') or (`region` = 'b')"
    assert (
        rows[0]["merge_files_where"] == "(partition.`region` = 'a') or (partition.`region` = 'b')"
    )
    assert rows[0]["file_paths"] == ["/wh/a/0.parquet", "/wh/a/1.parquet"]
    assert (rows[0]["merge_file_count"], rows[0]["min_key"]) == (4, "a")


def test_partitions_of_a_transform_have_no_where_clause():
    layout = TableLayout("c", "db.t", None, {}, {"region": "string"})
    rows = plan_partitions(
        [partitions_row(v) for v in "ab"],
        read_options({"source": "partitions"}, None, model_name="m"),
        layout,
        model_name="m",
    )
    assert rows[0]["merge_where"] is None
    assert (
        "not executable: a where clause can only select identity partitions"
        in rows[0]["explanation"]
    )
