"""Mergeability rules by key range, and the mergeability a range gets from them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dbt_merge.auto_merge.errors import AutoMergeError
from dbt_merge.auto_merge.mergeability import SYSTEM, USER, Mergeability
from dbt_merge.auto_merge.rules import parse_rules, resolve_mergeability
from tests.unit.auto_merge_fixtures import A, N, T


@pytest.mark.parametrize(
    "value, message",
    [
        ("SOMETIMES", "setting 'mergeability (the single value)': unknown mergeability"),
        ("DELAY", "setting 'mergeability (the single value)': DELAY needs a duration"),
        (
            [{"from": 1, "mergeability": "DELAY:"}],
            "setting 'mergeability (rule 1)': DELAY needs a duration",
        ),
        (
            [{"from": 1}, {"from": 2, "mergeability": "DELAY:soon"}],
            "setting 'mergeability (rule 2)': a delay must be a duration",
        ),
        ([{"form": 1}], "setting 'mergeability': rule 1 has unknown keys [form]"),
        (["NEVER"], "setting 'mergeability': rule 1 must be a dict"),
        (5, "setting 'mergeability': must be one mergeability"),
        (
            [{"mergeability": "DELAY:1h", "marked_at": "noon"}],
            "setting 'mergeability (rule 1)': marked_at must be a datetime or an ISO-8601 "
            "timestamp",
        ),
    ],
)
def test_bad_rules_are_refused(value, message):
    with pytest.raises(AutoMergeError) as info:
        parse_rules(value, model_name="m")
    assert message in str(info.value)
    assert str(info.value).startswith("dbt_merge auto-merge in model m, ")


def test_a_rule_without_mergeability_is_a_user_range_never():
    rules = parse_rules([{"from": 3, "to": 4}], model_name="m")
    got = resolve_mergeability(
        rules, 4, 6, created_by=SYSTEM, written_at=None, range_id="r", model_name="m"
    )
    assert got == (N, 1), "Accumulo: ranges a user made default to NEVER"


@pytest.mark.parametrize(
    "value, counts",
    [
        ("DELAY:1h", True),  # stamped with each file's commit: plan_table reads them
        ({"mode": "delay", "delay": "1h"}, True),
        (Mergeability.after(timedelta(hours=1), T), True),
        ({"mode": "DELAY", "delay": "1h", "marked_at": "2024-05-01T00:00:00"}, False),
        ("NEVER", False),
        (None, False),
    ],
)
def test_a_delay_rule_without_marked_at_counts_from_the_write(value, counts):
    (rule,) = parse_rules([{"from": 1, "mergeability": value}], model_name="m")
    assert rule.counts_from_write is counts
    stamped = parse_rules(
        [{"from": 1, "mergeability": "DELAY:1h", "marked_at": "2024-05-01T00:00:00"}],
        model_name="m",
    )
    assert not stamped[0].counts_from_write, "a rule's marked_at is its stamp"


@pytest.mark.parametrize(
    "low, high, expected",
    [
        (1, 2, (A, None)),  # meets no rule: the system default
        (2, 3, (N, 1)),  # shares key 3 with rule 1: inclusive bounds
        (4, 4, (N, 1)),
        (5, 5, (Mergeability.after(timedelta(days=2), T), 3)),  # DELAY due last wins
        (6, 9, (Mergeability.after(timedelta(days=2), T), 3)),
        (10, 12, (A, 4)),
    ],
)
def test_the_strictest_rule_a_range_meets_wins(low, high, expected):
    rules = parse_rules(
        [
            {"from": 3, "to": 4, "mergeability": "NEVER"},
            {"from": 4, "to": 9, "mergeability": "DELAY:1d", "marked_at": T.isoformat()},
            {"from": 5, "to": 9, "mergeability": "DELAY:2d", "marked_at": T.isoformat()},
            {"from": 10, "mergeability": "ALWAYS"},
        ],
        model_name="m",
    )
    got = resolve_mergeability(
        rules, low, high, created_by=USER, written_at=None, range_id="r", model_name="m"
    )
    assert got == (expected if expected[1] else (N, None)), "unmatched user ranges are NEVER"


def test_a_delay_without_marked_at_counts_from_the_write():
    rules = parse_rules("DELAY:1h", model_name="m")
    got, rule = resolve_mergeability(
        rules, 1, 1, created_by=SYSTEM, written_at=T, range_id="r", model_name="m"
    )
    assert (got.due_at, rule) == (T + timedelta(hours=1), None)
    with pytest.raises(AutoMergeError, match=r"'mergeability \(the single value, range 'r'\)'"):
        resolve_mergeability(
            rules, 1, 1, created_by=SYSTEM, written_at=None, range_id="r", model_name="m"
        )
