"""dbt_merge.bin_packing's Spark entry points on the shared SparkSession.

The pure engines are tested in tests/unit/test_bin_packing.py; here the Spark glue
must give the same bins, honour ``previous`` and validate before packing.
"""

from __future__ import annotations

import random
import sys
from datetime import datetime, timedelta

import pytest

from dbt_merge.bin_packing.defragmenter import (
    CONFLICTING_FRAGMENT_COUNT,
    DUPLICATE_FRAGMENT_INDEX,
    INVALID_FRAGMENT_INDEX,
)
from dbt_merge.bin_packing.frames import BIN_SCHEMA, DEFRAGMENT_SCHEMA, OFFLINE_SCHEMA
from dbt_merge.bin_packing.offline import plan_offline_items
from dbt_merge.bin_packing.packer import Item, pack_items
from dbt_merge.bin_packing.settings import (
    BIN_MANAGER_FULL,
    MAX_ENTRIES_THRESHOLD_REACHED,
    BinPackingError,
    BinPackingSettings,
)
from dbt_merge.bin_packing.spark import bin_pack, defragment, offline_report, plan_offline

pytestmark = pytest.mark.spark

T0 = datetime(2024, 1, 1)
ITEM_DDL = "id string, size long, arrived_at timestamp, corr string, fmt string"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture(scope="module")
def session(spark):
    """The shared session. Its Python workers must run this interpreter, which has
    dbt_merge, pandas and pyarrow: the adapter sets PYSPARK_PYTHON to it (PySpark's
    default is whatever ``python3`` comes first on PATH)."""
    assert spark.sparkContext.pythonExec == sys.executable
    return spark


def random_items(seed: int, n: int) -> list[tuple]:
    rng = random.Random(seed)
    return [
        (
            f"i{k:03d}",
            rng.choice([0, 1, 3, 5, 8, 12]),
            at(rng.randint(0, 40)),
            rng.choice([None, "x", "y"]),
            rng.choice([None, "v1"]),
        )
        for k in range(n)
    ]


def engine_rows(rows, settings, now, pending=()):
    result = pack_items(
        [Item(i, s, t, c, f) for i, s, t, c, f in rows], settings, now=now, pending=pending
    )
    return result, {b.bin_id: b.as_dict() for b in result.changed}


def spark_rows(df):
    return {r["bin_id"]: r.asDict() for r in df.collect()}


def pack(session, rows, **options):
    items = session.createDataFrame(rows, ITEM_DDL)
    return bin_pack(
        items,
        id_column="id",
        size_column="size",
        arrival_column="arrived_at",
        correlation_column="corr",
        schema_column="fmt",
        **options,
    )


@pytest.mark.parametrize(
    "options",
    [
        {"max_bytes": 10, "max_entries": 3, "min_entries": 2},
        {"max_bytes": 10, "max_bins": 2, "max_bin_age": timedelta(seconds=15), "min_bytes": 4},
    ],
    ids=["per group in parallel", "global max_bins in one task"],
)
def test_bin_pack_equals_the_engine(session, options):
    rows = random_items(1, 40)
    now = at(50)
    out = pack(session, rows, now=now, **options)
    assert out.schema == BIN_SCHEMA
    _, expected = engine_rows(rows, BinPackingSettings(**options), now)
    assert spark_rows(out) == expected


def test_two_runs_with_previous_emit_each_item_once(session):
    options = {"max_bytes": 10, "min_entries": 3, "max_entries": 4}
    settings = BinPackingSettings(**options)
    first, second = random_items(2, 30), random_items(3, 30)
    second = [(f"j{r[0][1:]}", *r[1:3], r[3], r[4]) for r in second]

    run1 = spark_rows(pack(session, first, now=at(50), **options))
    engine1, expected1 = engine_rows(first, settings, at(50))
    assert run1 == expected1
    assert engine1.pending, "some bins wait for the next run"

    # the stored table after run 1, then run 2 sees every item again plus new ones
    table = dict(run1)
    previous = session.createDataFrame(list(table.values()), BIN_SCHEMA)
    out = pack(session, first + second, now=at(60), previous=previous, **options)
    run2 = spark_rows(out)
    _, expected2 = engine_rows(second, settings, at(60), pending=engine1.pending)
    assert run2 == expected2, "old items skipped, pending bins resumed"
    resumed = [b for b in run2 if b in table]
    assert resumed and all(table[b]["status"] == "pending" for b in resumed)

    table.update(run2)
    members = [m for row in table.values() for m in row["members"]]
    assert sorted(members) == sorted(r[0] for r in first + second), "each item exactly once"


def test_a_group_with_nothing_new_returns_no_rows(session):
    """A group whose pending bin gets no new item changes nothing: its task returns an
    empty frame, which must still convert to the output schema (an empty list is
    float64 to pandas, which Arrow could not turn into strings)."""
    options = {"min_entries": 3}
    first = [("a1", 1, at(0), "a", None), ("b1", 1, at(1), "b", None)]
    stored = pack(session, first, now=at(5), **options).collect()
    assert sorted(r.status for r in stored) == ["pending", "pending"]
    previous = session.createDataFrame(stored, BIN_SCHEMA)
    second = [*first, ("b2", 1, at(6), "b", None)]
    changed = pack(session, second, now=at(7), previous=previous, **options).collect()
    assert [(r.correlation_value, list(r.members), r.status) for r in changed] == [
        ("b", ["b1", "b2"], "pending")
    ], "group a had nothing new: no row for it"


def test_global_max_bins_couples_the_groups(session):
    rows = [("a1", 1, at(0), "a", None), ("b1", 1, at(1), "b", None), ("c1", 1, at(2), "c", None)]
    coupled = pack(session, rows, max_bins=2, min_entries=10, now=at(5)).collect()
    assert sorted((r.members[0], r.status, r.merge_reason) for r in coupled) == [
        ("a1", "merged", BIN_MANAGER_FULL),
        ("b1", "pending", None),
        ("c1", "pending", None),
    ]
    apart = pack(
        session, rows, max_bins=2, min_entries=10, max_bins_scope="group", now=at(5)
    ).collect()
    assert sorted((r.members[0], r.status) for r in apart) == [
        ("a1", "pending"),
        ("b1", "pending"),
        ("c1", "pending"),
    ]


def test_plan_offline_and_its_report(session):
    rows = [("a", 6, "g"), ("b", 4, "g"), ("c", 5, "g"), ("d", 5, "g"), ("big", 15, "g")] + [
        ("e", 2, "h"),
        ("f", 4, "h"),
        ("k", 5, "h"),
        ("m", 2, "h"),
        ("n", 4, "h"),
        ("o", 3, "h"),
    ]
    items = session.createDataFrame(rows, "file string, bytes int, part string")
    bins = plan_offline(
        items, id_column="file", size_column="bytes", correlation_column="part", max_bytes=10
    )
    assert bins.schema == OFFLINE_SCHEMA
    plan = plan_offline_items(rows, max_bytes=10)
    got = sorted((r.members, r.bytes, r.is_oversized) for r in bins.collect())
    assert got == sorted((b.members, b.bytes, b.is_oversized) for b in plan.bins)
    report = {
        (r.level, r.correlation_value): (r.items, r.bytes, r.oversized, r.bins, r.lower_bound)
        for r in offline_report(bins, max_bytes=10).collect()
    }
    assert report == {
        ("group", "g"): (5, 35, 1, 3, 3),
        ("group", "h"): (6, 20, 0, 3, 2),
        ("total", None): (11, 55, 1, 6, 5),
    }
    assert [(g.bins, g.lower_bound) for g in plan.report.groups] == [(3, 3), (3, 2)]


def test_defragment_statuses_and_resume(session):
    rows = [
        ("d", "1", 4, 4, at(0)),
        ("b", "1", 4, 2, at(1)),
        ("a", "1", 4, 1, at(2)),
        ("c", "1", 4, 3, at(3)),
        ("b-copy", "1", 4, 2, at(2)),
        ("p1", "2", 3, 1, at(4)),
        ("x1", "3", 2, 1, at(5)),
        ("x2", "3", 3, 2, at(6)),
        ("bad", "4", 2, None, at(7)),
    ]
    ddl = "id string, ident string, cnt int, idx int, arrived_at timestamp"
    items = session.createDataFrame(rows, ddl)
    options = {
        "id_column": "id",
        "arrival_column": "arrived_at",
        "identifier_column": "ident",
        "count_column": "cnt",
        "index_column": "idx",
    }
    out = defragment(items, now=at(10), **options)
    assert out.schema == DEFRAGMENT_SCHEMA
    got = sorted(
        (r.members, r.member_indexes, r.status, r.merge_reason or r.failure_reason)
        for r in out.collect()
    )
    assert got == [
        (["a", "b", "c", "d"], [1, 2, 3, 4], "merged", MAX_ENTRIES_THRESHOLD_REACHED),
        (["b-copy"], [2], "failed", DUPLICATE_FRAGMENT_INDEX),
        (["bad"], [None], "failed", INVALID_FRAGMENT_INDEX),
        (["p1"], [1], "pending", None),
        (["x1", "x2"], [1, 2], "failed", CONFLICTING_FRAGMENT_COUNT),
    ]

    previous = session.createDataFrame(out.collect(), DEFRAGMENT_SCHEMA)
    more = session.createDataFrame(
        rows + [("p3", "2", None, 3, at(11)), ("p2", "2", None, 2, at(12))], ddl
    )
    again = defragment(more, now=at(20), previous=previous, **options).collect()
    pending_id = next(r.bin_id for r in previous.collect() if r.status == "pending")
    assert [(r.bin_id, r.members, r.status) for r in again] == [
        (pending_id, ["p1", "p2", "p3"], "merged")
    ]


def test_validation_happens_when_called(session):
    rows = [("a", 1, at(0), None, None)]
    items = session.createDataFrame(rows, ITEM_DDL)
    base = {"id_column": "id", "size_column": "size", "arrival_column": "arrived_at"}
    tracker = session.sparkContext.statusTracker()
    session.sparkContext.setJobGroup("bin_packing_validation", "schema checks only")
    try:
        with pytest.raises(BinPackingError) as caught:
            bin_pack(items, **{**base, "size_column": "bytes"}, model_name="stg_files")
        assert str(caught.value) == (
            "dbt_merge bin packing in model stg_files, setting 'size_column': no such column in "
            "the items, which have columns ['id', 'size', 'arrived_at', 'corr', 'fmt'] "
            "(got 'bytes')"
        )
        with pytest.raises(BinPackingError, match=r"setting 'correlation_column': no such"):
            bin_pack(items, **base, correlation_column="tenant")
        with pytest.raises(BinPackingError) as caught:
            bin_pack(items, **{**base, "size_column": "fmt"}, model_name="m")
        assert str(caught.value) == (
            "dbt_merge bin packing in model m, setting 'size_column': column 'fmt' must be an "
            "integer, it is string (got 'fmt')"
        )
        with pytest.raises(BinPackingError, match=r"setting 'max_bins': must be > 0 \(got 0\)"):
            bin_pack(items, **base, max_bins=0)
        frags = session.createDataFrame(
            [("f", "1", 2, "1", at(0))],
            "id string, fragment_identifier string, "
            "fragment_count int, fragment_index string, arrived_at timestamp",
        )
        with pytest.raises(BinPackingError) as caught:
            defragment(frags, id_column="id", arrival_column="arrived_at", model_name="parts")
        assert str(caught.value) == (
            "dbt_merge defragment in model parts, setting 'index_column': column "
            "'fragment_index' must be an integer, it is string (got 'fragment_index')"
        )
        with pytest.raises(BinPackingError, match=r"setting 'count_column': no such column"):
            defragment(frags.drop("fragment_count"), id_column="id", arrival_column="arrived_at")
        assert tracker.getJobIdsForGroup("bin_packing_validation") == [], "no Spark job ran"
    finally:
        session.sparkContext.setJobGroup(None, None)

    bad = session.createDataFrame(
        [("a", None, at(0), None, None), ("b", -1, at(0), None, None), ("c", 2, at(0), None, None)],
        ITEM_DDL,
    )
    with pytest.raises(BinPackingError) as caught:
        bin_pack(bad, **base, model_name="m")
    assert str(caught.value) == (
        "dbt_merge bin packing in model m, setting 'size_column': 1 item(s) have a null size "
        "(got 'size')"
    )
    with pytest.raises(BinPackingError, match=r"1 item\(s\) have a negative size \(got 'size'\)"):
        bin_pack(bad.where("size is not null"), **base)
