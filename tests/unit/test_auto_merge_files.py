"""The plan of a table's data files ordered by a sort column (the pure steps of
plan_table: no Spark)."""

from __future__ import annotations

from dataclasses import replace as _replace
from datetime import date, datetime

import pytest

from dbt_merge.auto_merge.errors import AutoMergeError
from dbt_merge.auto_merge.files import DataFile, plan_files
from dbt_merge.auto_merge.layout import TableLayout
from tests.unit.auto_merge_fixtures import options

D = date  # keys of the file tests are dates, like readable_metrics of a date column
LAYOUT = TableLayout("spark_catalog", "db.events", sort_column_type="date")


def data_file(name, low, high, size=10, partition=(), added_at=None):
    """A data file holding keys [low, high] (days of January 2024 as ints)."""
    low_key = None if low is None else D(2024, 1, low)
    high_key = None if high is None else D(2024, 1, high)
    return DataFile(
        path=f"/wh/db/events/data/{name}.parquet",
        size_bytes=size,
        record_count=size * 2,
        min_key=low_key,
        max_key=high_key,
        min_key_text=None if low_key is None else str(low_key),
        max_key_text=None if high_key is None else str(high_key),
        partition=partition,
        added_at=added_at,
    )


def planned(rows):
    """{merge_index: [range ids]} of plan rows."""
    found = {}
    for row in rows:
        if row["merge_index"] is not None:
            found.setdefault(row["merge_index"], []).append(row["range_id"])
    return [found[i] for i in sorted(found)]


def _typed(opts):
    """Rules with date bounds, as plan_table types them with Spark's try_cast."""

    def day(value):
        return None if value is None else D.fromisoformat(value)

    return _replace(
        opts, rules=tuple(_replace(r, lower=day(r.lower), upper=day(r.upper)) for r in opts.rules)
    )


def test_files_merge_around_a_never_rule_and_a_delay():
    files = [data_file(f"f{d}", d, d) for d in range(1, 9)]
    config = {
        "split_threshold": 400,  # limit 100 bytes: ten files of 10
        "now": "2024-01-20T00:00:00",
        "mergeability": [
            {"from": "2024-01-04", "to": "2024-01-04", "mergeability": "NEVER"},
            {"from": "2024-01-07", "mergeability": "DELAY:1d", "marked_at": "2024-01-20T00:00:00"},
        ],
    }
    typed = _typed(options(config))
    rows = plan_files(list(reversed(files)), typed, LAYOUT, model_name="m")
    assert [r["range_id"] for r in rows] == [f"2024-01-0{d}" for d in range(1, 9)], "key order"
    assert planned(rows) == [
        ["2024-01-01", "2024-01-02", "2024-01-03"],
        ["2024-01-05", "2024-01-06"],
    ]
    assert [r["reason"] for r in rows][3::3] == ["never", "delay_not_due"]
    assert rows[6]["due_at"] == datetime(2024, 1, 21) and rows[6]["mergeability_rule"] == 2
    assert rows[0]["mergeability"] == "ALWAYS" and rows[0]["mergeability_rule"] is None

    due = plan_files(
        files, _typed(options({**config, "now": "2024-01-21T00:00:00"})), LAYOUT, model_name="m"
    )
    assert planned(due)[-1] == ["2024-01-05", "2024-01-06", "2024-01-07", "2024-01-08"], "due"


def test_file_limits_are_inclusive():
    files = [
        data_file(f"f{d}", d, d, size=s) for d, s in zip(range(1, 5), (60, 40, 1, 1), strict=True)
    ]
    rows = plan_files(files, options({"split_threshold": 400}), LAYOUT, model_name="m")
    assert planned(rows) == [["2024-01-01", "2024-01-02"], ["2024-01-03", "2024-01-04"]], (
        "60+40=100"
    )
    files[1] = data_file("f2", 2, 2, size=41)
    rows = plan_files(files, options({"split_threshold": 400}), LAYOUT, model_name="m")
    assert planned(rows) == [["2024-01-02", "2024-01-03", "2024-01-04"]], "60+41 > 100"
    rows = plan_files(files, options({"file_max": 2}), LAYOUT, model_name="m")
    assert planned(rows) == [["2024-01-01", "2024-01-02"], ["2024-01-03", "2024-01-04"]]


def test_files_of_different_partitions_are_never_contiguous():
    eu = (("region", "eu", "eu"),)
    us = (("region", "us", "us"),)
    files = [
        data_file("us1", 1, 2, partition=us),
        data_file("eu1", 1, 1, partition=eu),
        data_file("eu2", 2, 3, partition=eu),
        data_file("us2", 3, 3, partition=us),
        data_file("eu3", 5, 5, partition=eu),
    ]
    layout = TableLayout(
        "spark_catalog", "db.events", "date", {"region": "region"}, {"region": "string"}
    )
    rows = plan_files(files, options(), layout, model_name="m")
    assert [r["range_id"] for r in rows] == [
        "region=eu:2024-01-01",
        "region=eu:2024-01-02..2024-01-03",
        "region=eu:2024-01-05",
        "region=us:2024-01-01..2024-01-02",
        "region=us:2024-01-03",
    ]
    assert [r["merge_index"] for r in rows] == [1, 1, 1, 2, 2], "numbered across partitions"
    us_merge = rows[3]
    assert us_merge["partition"] == "region=us"
    assert us_merge["merge_where"] == (
        "`day` >= cast('2024-01-01' as date) and `day` <= cast('2024-01-03' as date) "
        "and `region` = 'us'"
    )
    assert us_merge["merge_files_where"] == (
        "readable_metrics.`day`.upper_bound >= cast('2024-01-01' as date) and "
        "readable_metrics.`day`.lower_bound <= cast('2024-01-03' as date) and "
        "partition.`region` = 'us'"
    )
    assert us_merge["file_paths"] == ["/wh/db/events/data/us1.parquet"]
    # on Delta the files check is over DeltaTableFiles.listing (min_key, max_key and the
    # partition struct), the merge's own where clause the same
    delta = plan_files(files, options(), _replace(layout, format="delta"), model_name="m")[3]
    assert delta["merge_where"] == us_merge["merge_where"]
    assert delta["merge_files_where"] == (
        "max_key >= cast('2024-01-01' as date) and min_key <= cast('2024-01-03' as date) and "
        "partition.`region` = 'us'"
    )


def test_a_transform_partition_is_left_to_the_executors_check():
    day = (("ts_day", D(2024, 1, 1), "2024-01-01"),)
    layout = TableLayout("c", "db.t", "date", {}, {"ts_day": "date"})
    rows = plan_files(
        [data_file("a", 1, 1, partition=day), data_file("b", 2, 2, partition=day)],
        options(),
        layout,
        model_name="m",
    )
    assert "ts_day" not in rows[0]["merge_where"], "no column selects a days() partition"


def test_files_without_key_bounds_are_left_alone():
    files = [data_file("a", 1, 1), data_file("nulls", None, None), data_file("b", 2, 2)]
    rows = plan_files(files, options(), LAYOUT, model_name="m")
    assert [(r["range_id"], r["reason"]) for r in rows] == [
        ("/wh/db/events/data/nulls.parquet", "no_key_bounds"),
        ("2024-01-01", "merged"),
        ("2024-01-02", "merged"),
    ]
    assert rows[0]["mergeability"] is None


@pytest.mark.parametrize(
    "bounds",
    [[(1, 3), (2, 4)], [(1, 3), (3, 4)], [(1, 9), (2, 3), (4, 5)], [(2, 2), (2, 2)]],
    ids=["overlap", "touching", "inside", "same key"],
)
def test_overlapping_files_are_refused(bounds):
    files = [data_file(f"f{i}", low, high) for i, (low, high) in enumerate(bounds)]
    with pytest.raises(AutoMergeError) as info:
        plan_files(files, options(), LAYOUT, model_name="events_plan")
    text = str(info.value)
    assert text.startswith(
        "dbt_merge auto-merge in model events_plan, setting 'sort_column': the data files of "
        "db.events overlap on day, so they are not ranges of the key: /wh/db/events/data/f0.parquet"
    )
    assert text.endswith("or plan with source 'partitions' (got 'day')")


def test_empty_table_has_an_empty_plan():
    assert plan_files([], options(), LAYOUT, model_name="m") == []
