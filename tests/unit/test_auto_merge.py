"""Auto-merge planner (no Spark): Accumulo 4.x auto-merge behaviours D1-D12 of SEMANTICS.md.

D12 (re-check a merge just before it runs) is the runner's: execute_auto_merge skips a
merge whose files changed since the plan (tests/functional/test_auto_merge_dbt.py). D13
(the first scan waits one interval) is about scheduling, not planning: no test here.
"""

from __future__ import annotations

import random
from dataclasses import replace as _replace
from datetime import UTC, date, datetime, timedelta

import pytest

from dbt_merge.auto_merge.errors import AutoMergeError
from dbt_merge.auto_merge.files import DataFile, plan_files
from dbt_merge.auto_merge.layout import TableLayout
from dbt_merge.auto_merge.mergeability import (
    ALWAYS,
    DELAY,
    NEVER,
    SYSTEM,
    USER,
    Mergeability,
    format_duration,
    parse_mergeability,
)
from dbt_merge.auto_merge.options import read_options
from dbt_merge.auto_merge.partitions import plan_partitions, ranges_from_partitions
from dbt_merge.auto_merge.planner import plan_auto_merge
from dbt_merge.auto_merge.ranges import Range
from dbt_merge.auto_merge.rules import MergeabilityRule, parse_rules, resolve_mergeability
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


# -- D1 and the SPEC worked example ----------------------------------------------------------


def test_spec_example_merges_around_a_never_range():
    ranges = from_splits((333, A), (555, A), (666, N), (999, A), (None, A))
    plan = plan_auto_merge(ranges, AutoMergeSettings(), T, "m")

    assert [m.key_range for m in plan.merges] == ["(-inf,555]", "(666,+inf)"], "two merges"
    first, second = plan.merges
    assert (first.first_range_id, first.last_range_id) == ("333", "555"), "first run's ends"
    assert (first.lower, first.upper) == (None, 555), "lower of the first, upper of the last"
    assert second.range_ids == ("999", "default"), "second run's members in key order"
    assert plan.decision("666").reason == "never", "the NEVER range is left alone"
    assert plan.decision("666").action == "leave"
    assert ranges[2].key_range == "(555,666]", "and keeps its own range"
    assert "the next range '666' is NEVER" in first.reason, "the first run stops at NEVER"
    assert "it is the last range" in second.reason, "the second run stops at the end"
    assert [d.plan_index for d in plan.decisions] == [0, 0, None, 1, 1], "one decision a range"


# -- D2: size threshold over many ranges -------------------------------------------------------


def test_only_runs_of_small_ranges_merge():
    big, small = 20_000, 1_000
    sizes = [big, small, small, small, big, small, small, small, big, small]
    points = [(k * 10_000, A) for k in range(1, 10)] + [(None, A)]
    ranges = from_splits(*points, sizes=sizes)
    settings = AutoMergeSettings(threshold=0.5, split_threshold=32 * 1024)
    assert settings.max_total_size == 16 * 1024, "half of 32K"

    plan = plan_auto_merge(ranges, settings, T, "m")

    assert [m.key_range for m in plan.merges] == ["(10000,40000]", "(50000,80000]"]
    assert [plan.decision(i).reason for i in ("10000", "50000", "90000")] == ["too_big"] * 3
    assert plan.decision("default").reason == "run_of_one", "the last small range is alone"


# -- D3, D4: limits are inclusive (code), not "less than" (docs) -------------------------------


@pytest.mark.parametrize(
    "sizes, merged",
    [
        ((60, 40), [["r0", "r1"]]),  # 100 = limit: allowed
        ((60, 41), []),  # 101: one over
        ((100, 0), [["r0", "r1"]]),  # a range exactly at the limit still merges
    ],
)
def test_size_limit_is_inclusive(sizes, merged):
    plan = plan_auto_merge(sized(*sizes), LIMIT_100, T, "m")
    assert merged_ids(plan) == merged, f"sizes {sizes} against a limit of 100"


@pytest.mark.parametrize(
    "files, merged",
    [
        ((6, 4), [["r0", "r1"]]),  # 10 = file_max: allowed
        ((6, 5), []),  # 11: one over
    ],
)
def test_file_limit_is_inclusive(files, merged):
    settings = AutoMergeSettings(file_max=10)
    plan = plan_auto_merge(sized(0, 0, files=list(files)), settings, T, "m")
    assert merged_ids(plan) == merged, f"files {files} against file_max 10"


def test_size_limit_is_threshold_times_split_threshold_truncated():
    assert AutoMergeSettings(threshold=0.5, split_threshold=201).max_total_size == 100
    assert AutoMergeSettings().max_total_size == 268_435_456, "1 GiB x .25"


# -- D5, D6: greedy restart, oversized barrier -------------------------------------------------


def test_a_range_that_does_not_fit_starts_the_next_run():
    plan = plan_auto_merge(sized(60, 50, 40), LIMIT_100, T, "m")
    assert merged_ids(plan) == [["r1", "r2"]], "greedy: [60] then [50, 40]"
    alone = plan.decision("r0")
    assert alone.reason == "run_of_one"
    assert alone.explanation == (
        "eligible and within the limits, but no neighbour can join it: it is the first range; "
        "adding range 'r1' would make 110 bytes, over the size limit 100"
    )


def test_file_limit_also_restarts_the_run():
    settings = AutoMergeSettings(file_max=10)
    plan = plan_auto_merge(sized(0, 0, 0, files=[6, 5, 5]), settings, T, "m")
    assert merged_ids(plan) == [["r1", "r2"]], "[6] then [5, 5]"
    assert "would make 11 files, over file_max 10" in plan.decision("r0").explanation


def test_an_oversized_range_is_a_barrier():
    plan = plan_auto_merge(sized(10, 10, 150, 10, 10), LIMIT_100, T, "m")
    assert merged_ids(plan) == [["r0", "r1"], ["r3", "r4"]], "each side merges on its own"
    big = plan.decision("r2")
    assert (big.action, big.reason) == ("leave", "too_big")
    assert big.explanation == "it alone has 150 bytes, over the size limit 100"
    lone = plan_auto_merge(sized(10, 150, 10), LIMIT_100, T, "m").decision("r2")
    assert lone.explanation == (
        "eligible and within the limits, but no neighbour can join it: the previous range 'r1' "
        "is too big; it is the last range"
    )


def test_too_many_files_is_checked_before_size():
    settings = AutoMergeSettings(split_threshold=400, file_max=10)
    plan = plan_auto_merge(sized(10, 500, 10, files=[1, 11, 1]), settings, T, "m")
    assert plan.decision("r1").reason == "too_many_files", "Accumulo checks files first"
    assert plan.decision("r1").explanation == "it alone has 11 files, over file_max 10"


# -- D7: a run of one is not a merge -----------------------------------------------------------


def test_single_eligible_range_between_never_ranges_stays():
    ranges = from_splits((1, N), (2, A), (None, N))
    plan = plan_auto_merge(ranges, AutoMergeSettings(), T, "m")
    assert plan.merges == (), "fewer than two ranges"
    assert plan.decision("2").reason == "run_of_one"
    assert plan.decision("2").explanation == (
        "eligible and within the limits, but no neighbour can join it: the previous range '1' "
        "is NEVER; the next range 'default' is NEVER"
    )


def test_a_single_range_table_has_nothing_to_merge():
    plan = plan_auto_merge([Range("only", None, None)], AutoMergeSettings(), T, "m")
    assert plan.merges == ()
    assert plan.decision("only").reason == "run_of_one"


def test_no_ranges_no_plan():
    plan = plan_auto_merge([], AutoMergeSettings(), T, "m")
    assert (plan.merges, plan.decisions) == ((), ())


# -- contiguity --------------------------------------------------------------------------------


def test_a_gap_between_ranges_breaks_the_run():
    ranges = [
        Range("a", None, 1),
        Range("b", 1, 2),
        Range("c", 3, 4),  # gap (2, 3]
        Range("d", 4, 5),
        Range("e", 6, 7),  # gap (5, 6]
    ]
    plan = plan_auto_merge(ranges, AutoMergeSettings(), T, "m")
    assert [m.key_range for m in plan.merges] == ["(-inf,2]", "(3,5]"], "no merge across a gap"
    assert "there is a gap before range 'c' at (3,4]" in plan.merges[0].reason
    assert plan.decision("e").explanation == (
        "eligible and within the limits, but no neighbour can join it: there is a gap after "
        "range 'd'; it is the last range"
    )


# -- eligibility and D8 (DELAY is due at exactly marked_at + delay) ------------------------------


@pytest.mark.parametrize(
    "now, merged",
    [
        (T + timedelta(seconds=4.999), False),
        (T + timedelta(seconds=5), True),  # >=, as TabletMergeabilityUtil.isMergeable
        (T + timedelta(seconds=6), True),
    ],
)
def test_delay_becomes_eligible_exactly_when_due(now, merged):
    delay = Mergeability.after(timedelta(seconds=5), T)
    ranges = from_splits((1, delay), (None, delay))
    plan = plan_auto_merge(ranges, AutoMergeSettings(), now, "m")
    assert bool(plan.merges) is merged, f"scan at {now}"


def test_a_delay_not_yet_due_says_when_it_will_be():
    delay = Mergeability.after(timedelta(hours=1), T)
    ranges = from_splits((1, A), (2, delay), (None, A))
    plan = plan_auto_merge(ranges, AutoMergeSettings(), T + timedelta(minutes=30), "m")
    waiting = plan.decision("2")
    assert (waiting.reason, waiting.due_at) == ("delay_not_due", T + timedelta(hours=1))
    assert waiting.explanation == (
        "mergeability DELAY:1h marked at 2024-05-01 12:00:00 is due at 2024-05-01 13:00:00, "
        "after now (2024-05-01 12:30:00)"
    )
    assert plan.merges == (), "it splits the table into two runs of one"
    assert "range '2' is DELAY, due at 2024-05-01 13:00:00" in plan.decision("1").explanation


def test_delay_zero_is_due_when_marked():
    zero = Mergeability.after(timedelta(0), T)
    plan = plan_auto_merge(from_splits((1, zero), (None, zero)), AutoMergeSettings(), T, "m")
    assert len(plan.merges) == 1


def test_time_zones_must_match():
    aware = Mergeability.after(timedelta(seconds=1), T.replace(tzinfo=UTC))
    with pytest.raises(AutoMergeError) as info:
        plan_auto_merge(from_splits((1, aware), (None, A)), AutoMergeSettings(), T, "m")
    assert str(info.value) == (
        "dbt_merge auto-merge in model m, setting 'now': cannot be compared with marked_at of "
        "range '1'; use time zones on both or on neither (got now datetime.datetime(2024, 5, "
        "1, 12, 0), marked_at datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.timezone.utc))"
    )


# -- D9: threshold 0 (Accumulo skips the table; here it is an error) ---------------------------


def test_threshold_zero_is_refused_instead_of_disabling():
    with pytest.raises(AutoMergeError, match=r"setting 'threshold': must be > 0 and <= 1"):
        plan_auto_merge(sized(1, 1), AutoMergeSettings(threshold=0), T, "m")


# -- D10: the merged range keeps the last range's mergeability ----------------------------------


def test_merged_range_inherits_the_last_ranges_mergeability():
    last = Mergeability.after(timedelta(hours=1), T - timedelta(hours=2))
    plan = plan_auto_merge(from_splits((1, A), (None, last)), AutoMergeSettings(), T, "m")
    assert plan.merges[0].mergeability == last, "after(1h) with its old stamp"


# -- D11: defaults -----------------------------------------------------------------------------


def test_settings_defaults():
    settings = AutoMergeSettings()
    assert (settings.threshold, settings.split_threshold, settings.file_max) == (
        0.25,
        1024**3,
        10_000,
    )


def test_system_ranges_default_to_always_and_user_ranges_to_never():
    ranges = [
        Range("s1", None, 1, created_by="system"),
        Range("s2", 1, 2),  # system is the default creator
        Range("u1", 2, 3, created_by="user"),
        Range("u2", 3, None, created_by="user"),
    ]
    plan = plan_auto_merge(ranges, AutoMergeSettings(), T, "m")
    assert merged_ids(plan) == [["s1", "s2"]]
    assert plan.decision("u1").explanation == (
        "mergeability is NEVER (the default for user-created ranges)"
    )
    assert parse_mergeability(None, "system", model_name="m") == A
    assert parse_mergeability(None, "user", model_name="m") == N


def test_an_explicit_mergeability_wins_over_the_creator_default():
    ranges = [Range("u1", None, 1, created_by="user", mergeability=A), Range("s", 1, None)]
    assert merged_ids(plan_auto_merge(ranges, AutoMergeSettings(), T, "m")) == [["u1", "s"]]


# -- every range gets one decision; random tables keep the invariants ------------------------------


@pytest.mark.parametrize("seed", range(40))
def test_random_tables_keep_the_planner_invariants(seed):
    rng = random.Random(seed)
    count = rng.randint(0, 12)
    modes = [
        rng.choice([A, A, A, N, Mergeability.after(timedelta(seconds=rng.randint(0, 9)), T)])
        for _ in range(count)
    ]
    ranges = sized(
        *[rng.choice([0, 10, 30, 60, 101]) for _ in range(count)],
        files=[rng.randint(0, 6) for _ in range(count)],
        mergeability=modes,
    )
    settings = AutoMergeSettings(split_threshold=400, file_max=10)
    now = T + timedelta(seconds=5)
    plan = plan_auto_merge(ranges, settings, now, "m")
    by_id = {r.range_id: (i, r) for i, r in enumerate(ranges)}

    assert [d.range_id for d in plan.decisions] == [r.range_id for r in ranges]
    for index, merge in enumerate(plan.merges):
        members = [by_id[i] for i in merge.range_ids]
        positions = [p for p, _ in members]
        assert len(members) >= 2, "a merge has at least two ranges"
        assert positions == list(range(positions[0], positions[0] + len(members))), "adjacent"
        assert all(r.mergeability.is_eligible(now) for _, r in members), "all eligible"
        assert merge.size_bytes == sum(r.size_bytes for _, r in members) <= 100
        assert merge.file_count == sum(r.file_count for _, r in members) <= 10
        assert all(plan.decision(i).plan_index == index for i in merge.range_ids)
        after = positions[-1] + 1
        if after < len(ranges):
            nxt = ranges[after]
            assert (
                not nxt.mergeability.is_eligible(now)
                or merge.size_bytes + nxt.size_bytes > 100
                or merge.file_count + nxt.file_count > 10
            ), "greedy: the next range could not have joined"
    in_merges = {i for m in plan.merges for i in m.range_ids}
    assert {d.range_id for d in plan.decisions if d.action == "merge"} == in_merges


# -- settings errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            AutoMergeSettings(threshold=0),
            "setting 'threshold': must be > 0 and <= 1 (got 0)",
        ),
        (
            AutoMergeSettings(threshold=1.01),
            "setting 'threshold': must be > 0 and <= 1 (got 1.01)",
        ),
        (
            AutoMergeSettings(threshold=-0.5),
            "setting 'threshold': must be > 0 and <= 1 (got -0.5)",
        ),
        (
            AutoMergeSettings(threshold="0.25"),
            "setting 'threshold': must be a number (got '0.25')",
        ),
        (
            AutoMergeSettings(threshold=True),
            "setting 'threshold': must be a number (got True)",
        ),
        (
            AutoMergeSettings(split_threshold=0),
            "setting 'split_threshold': must be > 0 (got 0)",
        ),
        (
            AutoMergeSettings(split_threshold=-1),
            "setting 'split_threshold': must be > 0 (got -1)",
        ),
        (
            AutoMergeSettings(split_threshold=1.5),
            "setting 'split_threshold': must be a whole number (got 1.5)",
        ),
        (AutoMergeSettings(file_max=0), "setting 'file_max': must be > 0 (got 0)"),
        (AutoMergeSettings(file_max=-3), "setting 'file_max': must be > 0 (got -3)"),
    ],
)
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(AutoMergeError) as info:
        settings.validate("orders")
    assert str(info.value) == f"dbt_merge auto-merge in model orders, {message}"


def test_threshold_one_is_allowed():
    assert AutoMergeSettings(threshold=1, split_threshold=100).validate("m").max_total_size == 100


def test_the_auto_merge_config_is_a_dict_of_known_options():
    with pytest.raises(AutoMergeError) as info:
        read_options({"treshold": 0.5}, None, model_name="m")
    assert str(info.value) == (
        "dbt_merge auto-merge in model m, setting 'auto_merge': unknown options [treshold], "
        "supported: source, sort_column, threshold, split_threshold, file_max, mergeability, "
        "created_by, now (got {'treshold': 0.5})"
    )
    with pytest.raises(AutoMergeError) as info:
        read_options("fast", None, model_name="m")
    assert str(info.value) == (
        "dbt_merge auto-merge in model m, setting 'auto_merge': must be a dict of options "
        "(got 'fast')"
    )


# -- mergeability parsing --------------------------------------------------------------------------


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


# -- range errors ----------------------------------------------------------------------------------


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


def test_now_must_be_a_datetime():
    with pytest.raises(AutoMergeError) as info:
        plan_auto_merge([], AutoMergeSettings(), "2024-05-01", "orders")
    assert str(info.value) == (
        "dbt_merge auto-merge in model orders, setting 'now': must be a datetime (got '2024-05-01')"
    )


# -- Iceberg partitions metadata table -------------------------------------------------------


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


# -- planning an Iceberg table (the pure steps of plan_table) -------------------------------

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


def options(config=None, properties=None):
    return read_options({"sort_column": "day", **(config or {})}, properties, model_name="m")


def planned(rows):
    """{merge_index: [range ids]} of plan rows."""
    found = {}
    for row in rows:
        if row["merge_index"] is not None:
            found.setdefault(row["merge_index"], []).append(row["range_id"])
    return [found[i] for i in sorted(found)]


def test_options_default_then_table_property_then_config():
    got = read_options(None, None, model_name="m")
    assert (got.source, got.sort_column, got.created_by, got.rules) == ("files", None, "system", ())
    assert got.settings == AutoMergeSettings(), "threshold .25, split 1 GiB, file_max 10000"

    properties = {
        "dbt_merge.auto_merge.threshold": "0.5",
        "dbt_merge.auto_merge.file_max": "7",
        "dbt_merge.auto_merge.mergeability": '[{"to": "2024-01-03", "mergeability": "NEVER"}]',
        "write.format.default": "parquet",  # other properties are ignored
    }
    got = read_options({"file_max": 3}, properties, model_name="m")
    assert got.settings == AutoMergeSettings(threshold=0.5, file_max=3), "config wins"
    assert got.origins["threshold"] == "table property" and got.origins["file_max"] == "config"
    assert got.rules == (MergeabilityRule(1, None, "2024-01-03", "NEVER"),), "JSON property"
    assert (
        read_options(None, {"dbt_merge.auto_merge.mergeability": "NEVER"}, model_name="m")
        .rules[0]
        .mergeability
        == "NEVER"
    ), "a bare mergeability needs no JSON quotes"


def test_numbers_rendered_to_text_by_dbt_are_read():
    got = read_options(
        {"threshold": "1", "split_threshold": "4000", "file_max": " 9 "}, None, model_name="m"
    )
    assert got.settings == AutoMergeSettings(threshold=1.0, split_threshold=4000, file_max=9)


def test_now_is_utc():
    assert options({"now": "2024-03-01T00:00:00"}).now == datetime(2024, 3, 1)
    assert options({"now": "2024-03-01T02:00:00+02:00"}).now == datetime(2024, 3, 1), "converted"
    before = datetime.now(UTC).replace(tzinfo=None)
    assert options({"now": ""}).now >= before, "empty: the current time"


@pytest.mark.parametrize(
    "config, properties, message",
    [
        ({"treshold": 0.5}, None, "setting 'auto_merge': unknown options [treshold], supported: "),
        (
            {"source": "tablets"},
            None,
            "setting 'source': must be one of files, partitions (got 'tablets')",
        ),
        (
            {"created_by": "admin"},
            None,
            "setting 'created_by': must be 'system' or 'user' (got 'admin')",
        ),
        ({"threshold": 0}, None, "setting 'threshold': must be > 0 and <= 1 (got 0)"),
        ({"threshold": "lots"}, None, "setting 'threshold': must be a number (got 'lots')"),
        ({"now": "yesterday"}, None, "setting 'now': must be an ISO-8601 timestamp"),
        (
            None,
            {"dbt_merge.auto_merge.threshold": "2"},
            "setting 'dbt_merge.auto_merge.threshold': must be > 0 and <= 1 (got 2.0)",
        ),
        (
            None,
            {"dbt_merge.auto_merge.split_threshold": "1G"},
            "setting 'dbt_merge.auto_merge.split_threshold': must be a whole number (got '1G')",
        ),
        (
            None,
            {"dbt_merge.auto_merge.file_max": "0"},
            "setting 'dbt_merge.auto_merge.file_max': must be > 0 (got 0)",
        ),
        (
            None,
            {"dbt_merge.auto_merge.treshold": "0.5"},
            "setting 'dbt_merge.auto_merge.treshold': unknown table property of db.t, supported: ",
        ),
        (
            None,
            {"dbt_merge.auto_merge.mergeability": "SOMETIMES"},
            "setting 'dbt_merge.auto_merge.mergeability (the single value)': unknown mergeability, "
            "expected NEVER, "
            "ALWAYS or DELAY:<duration> (got 'SOMETIMES')",
        ),
    ],
)
def test_bad_options_are_refused(config, properties, message):
    with pytest.raises(AutoMergeError) as info:
        read_options(config, properties, model_name="orders_plan", table_name="db.t")
    assert str(info.value).startswith(f"dbt_merge auto-merge in model orders_plan, {message}")


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


def _typed(opts):
    """Rules with date bounds, as plan_table types them with Spark's try_cast."""

    def day(value):
        return None if value is None else D.fromisoformat(value)

    return _replace(
        opts, rules=tuple(_replace(r, lower=day(r.lower), upper=day(r.upper)) for r in opts.rules)
    )
