"""Shared inputs of the auto-merge unit tests: a scan time, ranges laid out like
Accumulo tablets, and plan options read as plan_table reads them."""

from __future__ import annotations

from datetime import datetime

from dbt_merge.auto_merge.mergeability import Mergeability
from dbt_merge.auto_merge.options import read_options
from dbt_merge.auto_merge.ranges import Range
from dbt_merge.auto_merge.settings import AutoMergeSettings

T = datetime(2024, 5, 1, 12, 0, 0)
A = Mergeability.always()
N = Mergeability.never()
# threshold .25 of 400 bytes: runs may hold up to 100 bytes
LIMIT_100 = AutoMergeSettings(split_threshold=400)


def from_splits(*points, sizes=None, files=None):
    """Ranges the way Accumulo lays out tablets: ``(end, mergeability)`` pairs in key
    order, the last end None (the default tablet); range ids are the end rows."""
    ranges = []
    lower = None
    for index, (end, mergeability) in enumerate(points):
        ranges.append(
            Range(
                range_id="default" if end is None else str(end),
                lower=lower,
                upper=end,
                size_bytes=sizes[index] if sizes else 0,
                file_count=files[index] if files else 0,
                mergeability=mergeability,
            )
        )
        lower = end
    return ranges


def sized(*sizes, files=None, mergeability=None):
    """Contiguous ranges r0, r1, ... with the given sizes; keys 1, 2, ... (last +inf)."""
    mergeabilities = mergeability or [A] * len(sizes)
    points = [(i + 1 if i < len(sizes) - 1 else None, m) for i, m in enumerate(mergeabilities)]
    ranges = from_splits(*points, sizes=list(sizes), files=files)
    return [
        Range(f"r{i}", r.lower, r.upper, r.size_bytes, r.file_count, r.mergeability)
        for i, r in enumerate(ranges)
    ]


def merged_ids(plan):
    return [list(m.range_ids) for m in plan.merges]


def options(config=None, properties=None):
    return read_options({"sort_column": "day", **(config or {})}, properties, model_name="m")
