"""Mergeability as dbt config or a table property writes it: NEVER, ALWAYS, DELAY."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from dbt_merge.auto_merge.errors import AutoMergeError
from dbt_merge.auto_merge.mergeability import (
    ALWAYS,
    DELAY,
    NEVER,
    Mergeability,
    format_duration,
    parse_mergeability,
)
from tests.unit.auto_merge_fixtures import A, N, T


@pytest.mark.parametrize(
    "value, expected",
    [
        ("NEVER", N),
        (" always ", A),
        ("DELAY:1h", Mergeability.after(timedelta(hours=1), T)),
        ("DELAY 3600s", Mergeability.after(timedelta(hours=1), T)),
        ("delay: 1h30m", Mergeability.after(timedelta(minutes=90), T)),
        ("DELAY:250ms", Mergeability.after(timedelta(milliseconds=250), T)),
        ("DELAY:2d", Mergeability.after(timedelta(days=2), T)),
        ({"mode": "never"}, N),
        ({"mode": "DELAY", "delay": 90}, Mergeability.after(timedelta(seconds=90), T)),
        ({"mode": "DELAY", "delay": "5m"}, Mergeability.after(timedelta(minutes=5), T)),
        (
            {"mode": "DELAY", "delay": timedelta(hours=2), "marked_at": "2024-01-01T00:00:00"},
            Mergeability.after(timedelta(hours=2), datetime(2024, 1, 1)),
        ),
        (
            Mergeability.after(timedelta(1), T - timedelta(1)),
            Mergeability.after(timedelta(1), T - timedelta(1)),
        ),
    ],
)
def test_mergeability_forms(value, expected):
    assert parse_mergeability(value, "user", model_name="m", marked_at=T) == expected, value


def test_mergeability_renders_in_the_parsed_format():
    assert [str(m) for m in (N, A)] == [NEVER, ALWAYS]
    delay = parse_mergeability("DELAY:1d2h3m4s5ms", model_name="m", marked_at=T)
    assert (delay.mode, str(delay)) == (DELAY, "DELAY:1d2h3m4s5ms")
    assert format_duration(timedelta(0)) == "0s"


@pytest.mark.parametrize(
    "value, message",
    [
        (
            "SOMETIMES",
            "unknown mergeability, expected NEVER, ALWAYS or DELAY:<duration> (got 'SOMETIMES')",
        ),
        (
            "NEVER:1h",
            "unknown mergeability, expected NEVER, ALWAYS or DELAY:<duration> (got 'NEVER:1h')",
        ),
        (
            {"mode": "SOMETIMES"},
            "unknown mergeability mode, expected NEVER, ALWAYS or DELAY "
            "(got {'mode': 'SOMETIMES'})",
        ),
        ({}, "unknown mergeability mode, expected NEVER, ALWAYS or DELAY (got {})"),
        ("DELAY", "DELAY needs a duration, e.g. DELAY:1h or DELAY 3600s (got 'DELAY')"),
        ("DELAY:", "DELAY needs a duration, e.g. DELAY:1h or DELAY 3600s (got 'DELAY:')"),
        (
            {"mode": "DELAY"},
            "DELAY needs a duration, e.g. DELAY:1h or DELAY 3600s (got {'mode': 'DELAY'})",
        ),
        (
            "DELAY:1 hour",
            "a delay must be a duration such as 90s, 1h or 1h30m (units ms, s, m, h, d), "
            "a number of seconds or a timedelta (got '1 hour')",
        ),
        (
            "DELAY:3600",
            "a delay must be a duration such as 90s, 1h or 1h30m (units ms, s, m, h, d), "
            "a number of seconds or a timedelta (got '3600')",
        ),
        ({"mode": "DELAY", "delay": -1}, "a delay must be >= 0 (got -1)"),
        (
            {"mode": "ALWAYS", "delay": "1h"},
            "ALWAYS takes no delay or marked_at (got {'mode': 'ALWAYS', 'delay': '1h'})",
        ),
        (
            {"mode": "DELAY", "delay": "1h", "when": "now"},
            "unknown keys [when], supported: mode, delay, marked_at "
            "(got {'mode': 'DELAY', 'delay': '1h', 'when': 'now'})",
        ),
        (
            {"mode": "DELAY", "delay": "1h", "marked_at": "yesterday"},
            "marked_at must be a datetime or an ISO-8601 timestamp (got 'yesterday')",
        ),
        (
            42,
            "must be a string such as 'NEVER', 'ALWAYS' or 'DELAY:1h', or a dict (got 42)",
        ),
    ],
)
def test_bad_mergeability_is_refused(value, message):
    with pytest.raises(AutoMergeError) as info:
        parse_mergeability(value, model_name="orders", marked_at=T)
    assert str(info.value) == (
        f"dbt_merge auto-merge in model orders, setting 'mergeability': {message}"
    )


def test_delay_needs_the_time_it_was_marked():
    with pytest.raises(AutoMergeError) as info:
        parse_mergeability("DELAY:1h", model_name="orders")
    assert str(info.value) == (
        "dbt_merge auto-merge in model orders, setting 'mergeability': DELAY needs the time it "
        "was marked (marked_at) to know when it is due (got 'DELAY:1h')"
    )


def test_unknown_creator_is_refused():
    with pytest.raises(AutoMergeError) as info:
        parse_mergeability(None, "robot", model_name="orders")
    assert str(info.value) == (
        "dbt_merge auto-merge in model orders, setting 'created_by': must be 'system' or 'user' "
        "(got 'robot')"
    )
