"""Auto-merge planner (no Spark): Accumulo 4.x auto-merge behaviours D1-D12 of SEMANTICS.md.

D12 (re-check a merge just before it runs) is the runner's: execute_auto_merge skips a
merge whose files changed since the plan (tests/functional/test_auto_merge_dbt.py). D13
(the first scan waits one interval) is about scheduling, not planning: no test here.
"""

from __future__ import annotations

import random
from datetime import UTC, timedelta

import pytest

from dbt_merge.auto_merge.errors import AutoMergeError
from dbt_merge.auto_merge.mergeability import Mergeability, parse_mergeability
from dbt_merge.auto_merge.planner import plan_auto_merge
from dbt_merge.auto_merge.ranges import Range
from dbt_merge.auto_merge.settings import AutoMergeSettings
from tests import sampling
from tests.unit.auto_merge_fixtures import LIMIT_100, A, N, T, from_splits, merged_ids, sized

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


@pytest.mark.parametrize("seed", sampling.seeds(range(40), fresh=400))
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


def test_now_must_be_a_datetime():
    with pytest.raises(AutoMergeError) as info:
        plan_auto_merge([], AutoMergeSettings(), "2024-05-01", "orders")
    assert str(info.value) == (
        "dbt_merge auto-merge in model orders, setting 'now': must be a datetime (got '2024-05-01')"
    )
