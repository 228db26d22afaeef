"""The checks a list of ranges passes before it is planned, each message verbatim."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dbt_merge.auto_merge.errors import AutoMergeError
from dbt_merge.auto_merge.mergeability import DELAY, Mergeability
from dbt_merge.auto_merge.planner import plan_auto_merge
from dbt_merge.auto_merge.ranges import Range
from dbt_merge.auto_merge.settings import AutoMergeSettings
from tests.unit.auto_merge_fixtures import T


@pytest.mark.parametrize(
    "ranges, message",
    [
        (
            [Range("b", 5, 10), Range("a", None, 5)],
            "setting 'ranges': ranges must be ordered by key, but range 'a' ends before range "
            "'b' that precedes it (got (-inf,5] after (5,10])",
        ),
        (
            [Range("a", None, 5), Range("b", 3, 10)],
            "setting 'ranges': ranges must not overlap, but range 'b' starts before range 'a' "
            "ends (got (3,10] after (-inf,5])",
        ),
        (
            [Range("a", None, 5), Range("b", 1, 5)],
            "setting 'ranges': ranges must not overlap, but range 'b' starts before range 'a' "
            "ends (got (1,5] after (-inf,5])",
        ),
        (
            [Range("a", None, None), Range("b", 5, None)],
            "setting 'ranges': ranges must not overlap, but range 'b' starts before range 'a' "
            "ends (got (5,+inf) after (-inf,+inf))",
        ),
        (
            [Range("a", 5, 5)],
            "setting 'ranges': range 'a' must have lower < upper (got lower 5, upper 5)",
        ),
        (
            [Range("a", None, 1), Range("a", 1, 2)],
            "setting 'ranges': range ids must be unique (got 'a' twice)",
        ),
        (
            [Range("a", None, 1), Range("b", 1, "x")],
            "setting 'ranges': range keys must be comparable with each other (got range 'b' (1,x])",
        ),
        (
            [Range("a", None, "x"), Range("b", 1, 2)],
            "setting 'ranges': range keys must be comparable with each other "
            "(got range 'a' (-inf,x] and range 'b' (1,2])",
        ),
        (
            [Range("a", None, 1, size_bytes=-1)],
            "setting 'ranges': size_bytes of range 'a' must be a whole number >= 0 (got -1)",
        ),
        (
            [Range("a", None, 1, created_by="robot")],
            "setting 'created_by': must be 'system' or 'user' (got 'robot')",
        ),
        (
            [Range("a", None, 1, mergeability=Mergeability("SOMETIMES"))],
            "setting 'mergeability': unknown mergeability of range 'a', expected NEVER, ALWAYS "
            "or DELAY (got 'SOMETIMES')",
        ),
        (
            [Range("a", None, 1, mergeability=Mergeability(DELAY, marked_at=T))],
            "setting 'mergeability': DELAY of range 'a' needs a duration, e.g. DELAY:1h or "
            "DELAY 3600s (got None)",
        ),
        (
            [Range("a", None, 1, mergeability=Mergeability(DELAY, timedelta(hours=1)))],
            "setting 'mergeability': DELAY of range 'a' needs the time it was marked (marked_at) "
            "to know when it is due (got None)",
        ),
        (["a"], "setting 'ranges': must be Range objects (got 'a')"),
    ],
)
def test_bad_ranges_are_refused(ranges, message):
    with pytest.raises(AutoMergeError) as info:
        plan_auto_merge(ranges, AutoMergeSettings(), T, "orders")
    assert str(info.value) == f"dbt_merge auto-merge in model orders, {message}"
