"""dbt_merge.bin_packing's pure-Python engines: no Spark.

Cases mirror NiFi MergeContent's behaviour (research/SEMANTICS.md C1-C14) where it
applies; random runs are checked against a plain linear-scan reference packer.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from datetime import datetime, timedelta

import pytest

from dbt_merge.bin_packing.defragmenter import (
    CONFLICTING_FRAGMENT_COUNT,
    DUPLICATE_FRAGMENT_INDEX,
    FRAGMENT_INDEX_OUT_OF_RANGE,
    INCOMPLETE_AFTER_MAX_BIN_AGE,
    INVALID_FRAGMENT_COUNT,
    INVALID_FRAGMENT_IDENTIFIER,
    INVALID_FRAGMENT_INDEX,
    defragment_items,
)
from dbt_merge.bin_packing.first_fit import _FirstFitIndex
from dbt_merge.bin_packing.offline import plan_offline_items
from dbt_merge.bin_packing.packer import Bin, BinPacker, Item, pack_items
from dbt_merge.bin_packing.settings import (
    BIN_MANAGER_FULL,
    FAILED,
    MAX_BYTES_THRESHOLD_REACHED,
    MAX_ENTRIES_THRESHOLD_REACHED,
    MERGED,
    MIN_THRESHOLDS_REACHED,
    PENDING,
    TIMEOUT,
    BinPackingError,
    BinPackingSettings,
)
from tests import sampling

T0 = datetime(2024, 1, 1)
NOW = T0 + timedelta(hours=1)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def items_at(*specs) -> list[Item]:
    """``(id, size, seconds[, correlation[, schema]])`` -> Items."""
    return [Item(s[0], s[1], at(s[2]), *s[3:]) for s in specs]


def summary(bins):
    return [(b.members, b.merge_reason) for b in bins]


# ---------------------------------------------------------------------------------------
# settings validation: every message verbatim

ERRORS = [
    ({"max_entries": 0}, "setting 'max_entries': must be > 0 (got 0)"),
    ({"min_entries": 0}, "setting 'min_entries': must be > 0 (got 0)"),
    ({"min_bytes": -1}, "setting 'min_bytes': must be >= 0 (got -1)"),
    ({"max_bytes": 0}, "setting 'max_bytes': must be > 0 (got 0)"),
    ({"max_bins": 0}, "setting 'max_bins': must be > 0 (got 0)"),
    ({"max_entries": "10"}, "setting 'max_entries': must be an integer (got '10')"),
    ({"max_bytes": True}, "setting 'max_bytes': must be an integer or None (got True)"),
    ({"max_bins": 2.5}, "setting 'max_bins': must be an integer or None (got 2.5)"),
    (
        {"max_bin_age": timedelta(0)},
        "setting 'max_bin_age': must be > 0 (got datetime.timedelta(0))",
    ),
    ({"max_bin_age": 5}, "setting 'max_bin_age': must be a datetime.timedelta or None (got 5)"),
    (
        {"max_bins_scope": "tenant"},
        "setting 'max_bins_scope': must be one of 'global', 'group' (got 'tenant')",
    ),
    (
        {"min_entries": 10, "max_entries": 5},
        "setting 'min_entries': must be <= 'max_entries' (5), "
        "a bin is merged when it reaches max_entries (got 10)",
    ),
    (
        {"min_bytes": 100, "max_bytes": 50},
        "setting 'min_bytes': must be <= 'max_bytes' (50), "
        "a bin is merged when it reaches max_bytes (got 100)",
    ),
]


@pytest.mark.parametrize("options, message", ERRORS, ids=[m for _, m in ERRORS])
def test_settings_errors_name_model_setting_and_value(options, message):
    with pytest.raises(BinPackingError) as caught:
        BinPackingSettings(**options).validate("stg_files")
    assert str(caught.value) == f"dbt_merge bin packing in model stg_files, {message}"
    assert isinstance(caught.value, ValueError), "a BinPackingError is a ValueError"


def test_defaults_are_valid_and_documented():
    s = BinPackingSettings()
    s.validate("m")
    assert (s.min_entries, s.max_entries, s.min_bytes, s.max_bytes) == (1, 1000, 0, None)
    assert (s.max_bin_age, s.max_bins, s.max_bins_scope) == (None, None, "global")


def test_the_engine_validates_its_settings():
    with pytest.raises(BinPackingError, match="in model m2, setting 'max_entries'"):
        BinPacker(BinPackingSettings(max_entries=-3), model_name="m2")


def test_bad_item_sizes_and_repeated_ids_are_errors():
    packer = BinPacker(model_name="m")
    with pytest.raises(BinPackingError) as caught:
        packer.add(Item("a", -1, T0))
    assert str(caught.value) == (
        "dbt_merge bin packing in model m, setting 'size': item 'a' needs a size >= 0 in bytes "
        "(got -1)"
    )
    with pytest.raises(BinPackingError, match=r"needs a size >= 0 in bytes \(got None\)"):
        packer.add(Item("b", None, T0))
    packer.add(Item("c", 1, T0))
    with pytest.raises(BinPackingError) as caught:
        packer.add(Item("c", 1, T0))
    assert str(caught.value) == (
        "dbt_merge bin packing in model m, setting 'id': item ids must be unique; "
        "this one came twice (got 'c')"
    )


def test_an_item_of_a_pending_bin_cannot_come_again():
    stored = Bin(None, None, None, T0, ["a"], 1)
    with pytest.raises(BinPackingError, match=r"came twice \(got 'a'\)"):
        pack_items(items_at(("a", 1, 5)), now=NOW, pending=[stored])


# ---------------------------------------------------------------------------------------
# merge reasons (NiFi C1-C8)


def test_c1_defaults_merge_everything_at_the_end_of_the_input():
    result = pack_items(items_at(("a", 10, 0), ("b", 20, 1), ("c", 30, 2)), now=NOW)
    assert summary(result.merged) == [(["a", "b", "c"], MIN_THRESHOLDS_REACHED)]
    b = result.merged[0]
    assert (b.entries, b.bytes, b.opened_at, b.merged_at) == (3, 60, at(0), NOW)
    assert result.pending == []


def test_c2_full_bins_merge_the_rest_waits():
    settings = BinPackingSettings(min_entries=5, max_entries=5, max_bins=3)
    items = items_at(*[(f"f{i:02d}", 1, i) for i in range(17)])
    result = pack_items(items, settings, now=NOW)
    assert summary(result.merged) == [
        ([f"f{i:02d}" for i in range(0, 5)], MAX_ENTRIES_THRESHOLD_REACHED),
        ([f"f{i:02d}" for i in range(5, 10)], MAX_ENTRIES_THRESHOLD_REACHED),
        ([f"f{i:02d}" for i in range(10, 15)], MAX_ENTRIES_THRESHOLD_REACHED),
    ]
    assert [b.merged_at for b in result.merged] == [at(4), at(9), at(14)], "merged on the 5th"
    assert [b.members for b in result.pending] == [["f15", "f16"]]
    assert result.pending[0].status == PENDING and result.pending[0].merged_at is None


def test_c3_an_oversized_item_is_a_bin_of_its_own():
    settings = BinPackingSettings(max_bytes=5 * 1024, min_entries=2)
    result = pack_items(items_at(("small", 1026, 0), ("big", 6144, 1)), settings, now=NOW)
    assert summary(result.merged) == [(["big"], MAX_BYTES_THRESHOLD_REACHED)]
    assert (result.merged[0].bytes, result.merged[0].merged_at) == (6144, at(1))
    assert [b.members for b in result.pending] == [["small"]]


def test_c4_first_fit_goes_back_to_an_earlier_bin():
    settings = BinPackingSettings(max_bytes=5 * 1024, min_entries=2)
    items = items_at(("4k", 4096, 0), ("2k", 2048, 1), ("1k", 1024, 2))
    result = pack_items(items, settings, now=NOW)
    assert summary(result.merged) == [(["4k", "1k"], MAX_BYTES_THRESHOLD_REACHED)]
    assert (result.merged[0].bytes, result.merged[0].merged_at) == (5120, at(2))
    assert [b.members for b in result.pending] == [["2k"]], "the 2 KB item did not fit: own bin"


def test_c5_max_bytes_wins_over_max_entries():
    settings = BinPackingSettings(max_bytes=10, max_entries=2)
    both = pack_items(items_at(("a", 4, 0), ("b", 6, 1)), settings, now=NOW)
    assert summary(both.merged) == [(["a", "b"], MAX_BYTES_THRESHOLD_REACHED)]
    entries_only = pack_items(items_at(("a", 3, 0), ("b", 3, 1)), settings, now=NOW)
    assert summary(entries_only.merged) == [(["a", "b"], MAX_ENTRIES_THRESHOLD_REACHED)]


def test_c6_timeout_at_the_end_of_the_input_is_strictly_after_max_bin_age():
    settings = BinPackingSettings(max_bin_age=timedelta(seconds=2), min_entries=500)
    items = items_at(*[(f"f{i:02d}", 1, i / 100) for i in range(50)])
    young = pack_items(items, settings, now=at(1))
    assert young.merged == [] and young.pending[0].entries == 50
    exactly = pack_items(items, settings, now=at(2))
    assert exactly.merged == [], "an age equal to max_bin_age is not a timeout"
    old = pack_items(items, settings, now=at(3))
    assert summary(old.merged) == [([f"f{i:02d}" for i in range(50)], TIMEOUT)]
    assert old.merged[0].merged_at == at(3)


def test_timeout_before_an_item_is_placed():
    settings = BinPackingSettings(max_bin_age=timedelta(seconds=2), min_entries=10)
    result = pack_items(
        items_at(("a", 1, 0), ("b", 1, 2), ("c", 1, 2.5), ("d", 1, 3)), settings, now=at(3)
    )
    assert summary(result.merged) == [(["a", "b"], TIMEOUT)], "age 2.5 > 2 when c arrives"
    assert result.merged[0].merged_at == at(2.5)
    assert [b.members for b in result.pending] == [["c", "d"]]


def test_timeout_wins_over_min_thresholds_at_the_end():
    settings = BinPackingSettings(max_bin_age=timedelta(seconds=2))
    result = pack_items(items_at(("a", 1, 0), ("b", 1, 5)), settings, now=at(5.5))
    assert summary(result.merged) == [(["a"], TIMEOUT), (["b"], MIN_THRESHOLDS_REACHED)]


def test_c7_bin_manager_full_evicts_the_oldest_bin_of_any_group():
    settings = BinPackingSettings(max_bins=2, min_entries=10)
    items = items_at(("a1", 1, 0, "a"), ("b1", 1, 1, "b"), ("c1", 1, 2, "c"))
    result = pack_items(items, settings, now=NOW)
    assert summary(result.merged) == [(["a1"], BIN_MANAGER_FULL)]
    assert result.merged[0].merged_at == at(2), "evicted when c needed a bin"
    assert [b.members for b in result.pending] == [["b1"], ["c1"]]


def test_max_bins_per_group_keeps_groups_independent():
    settings = BinPackingSettings(max_bins=2, min_entries=10, max_bins_scope="group")
    items = items_at(("a1", 1, 0, "a"), ("b1", 1, 1, "b"), ("c1", 1, 2, "c"))
    assert pack_items(items, settings, now=NOW).merged == [], "one bin per group: room for all"
    settings = BinPackingSettings(max_bins=1, max_bytes=10, min_entries=10, max_bins_scope="group")
    items = items_at(("a1", 6, 0, "a"), ("b1", 6, 1, "b"), ("a2", 6, 2, "a"))
    result = pack_items(items, settings, now=NOW)
    assert summary(result.merged) == [(["a1"], BIN_MANAGER_FULL)], "b's bin is older but safe"
    assert [b.members for b in result.pending] == [["b1"], ["a2"]]


def test_eviction_takes_the_earliest_opened_bin_ties_by_creation_order():
    settings = BinPackingSettings(max_bins=2, max_bytes=10, min_entries=10)
    items = items_at(("x", 6, 0), ("y", 6, 0), ("z", 6, 1))
    result = pack_items(items, settings, now=NOW)
    assert summary(result.merged) == [(["x"], BIN_MANAGER_FULL)]
    items = items_at(("a1", 6, 0, "a"), ("b1", 6, 1, "b"), ("a2", 1, 2, "a"), ("c1", 6, 3, "c"))
    result = pack_items(items, settings, now=NOW)
    assert summary(result.merged) == [(["a1", "a2"], BIN_MANAGER_FULL)], "growing keeps its age"


def test_an_oversized_item_is_not_an_open_bin():
    settings = BinPackingSettings(max_bins=1, max_bytes=10, min_entries=10)
    items = items_at(("a", 5, 0), ("huge", 50, 1), ("c", 3, 2))
    result = pack_items(items, settings, now=NOW)
    assert summary(result.merged) == [(["huge"], MAX_BYTES_THRESHOLD_REACHED)]
    assert [b.members for b in result.pending] == [["a", "c"]], "no BIN_MANAGER_FULL"


def test_c8_correlation_and_schema_separate_bins_null_is_a_group():
    settings = BinPackingSettings(max_entries=3)
    items = items_at(
        ("1", 1, 1, "b"),
        ("2", 1, 2, "b"),
        ("3", 1, 3, "c"),
        ("4", 1, 4, "b"),
        ("5", 1, 5, None),
        ("6", 1, 6, None),
        ("7", 1, 7, "None"),
        ("8", 1, 8, "b", "v2"),
    )
    result = pack_items(items, settings, now=NOW)
    assert summary(result.merged) == [
        (["1", "2", "4"], MAX_ENTRIES_THRESHOLD_REACHED),
        (["3"], MIN_THRESHOLDS_REACHED),
        (["5", "6"], MIN_THRESHOLDS_REACHED),
        (["7"], MIN_THRESHOLDS_REACHED),
        (["8"], MIN_THRESHOLDS_REACHED),
    ]
    assert [(b.schema, b.correlation) for b in result.merged] == [
        (None, "b"),
        (None, "c"),
        (None, None),
        (None, "None"),
        ("v2", "b"),
    ]


def test_arrival_order_with_ties_by_id_not_input_order():
    settings = BinPackingSettings(max_entries=2)
    items = items_at(("c", 1, 1), ("b", 1, 0), ("a", 1, 1))
    result = pack_items(items, settings, now=NOW)
    assert summary(result.merged) == [
        (["b", "a"], MAX_ENTRIES_THRESHOLD_REACHED),
        (["c"], MIN_THRESHOLDS_REACHED),
    ]


def test_zero_size_items_fill_a_bin_to_max_entries():
    settings = BinPackingSettings(max_bytes=10, max_entries=3)
    result = pack_items(
        items_at(("a", 10, 0), ("b", 0, 1), ("c", 0, 2), ("d", 0, 3)), settings, now=NOW
    )
    assert summary(result.merged) == [
        (["a"], MAX_BYTES_THRESHOLD_REACHED),
        (["b", "c", "d"], MAX_ENTRIES_THRESHOLD_REACHED),
    ]


# ---------------------------------------------------------------------------------------
# bin ids and runs


def test_bin_id_is_sha256_of_group_and_first_member():
    result = pack_items(items_at(("a", 1, 0, "corr", "schema")), now=NOW)
    expected = hashlib.sha256(repr(("bin", "schema", "corr", "a")).encode()).hexdigest()[:32]
    assert result.merged[0].bin_id == expected


def test_pending_bins_resume_keep_their_id_and_emit_each_item_once():
    settings = BinPackingSettings(min_entries=3, max_entries=3)
    run1 = pack_items(items_at(("a", 1, 0), ("b", 1, 1)), settings, now=at(2))
    assert run1.merged == [] and [b.members for b in run1.pending] == [["a", "b"]]
    assert [b.members for b in run1.changed] == [["a", "b"]], "a new pending bin is written"
    pending_id = run1.pending[0].bin_id

    run2 = pack_items(items_at(("c", 1, 3), ("d", 1, 4)), settings, now=at(5), pending=run1.pending)
    assert summary(run2.merged) == [(["a", "b", "c"], MAX_ENTRIES_THRESHOLD_REACHED)]
    assert run2.merged[0].bin_id == pending_id, "merged under the pending bin's id"
    assert run2.merged[0].opened_at == at(0)
    assert [b.members for b in run2.pending] == [["d"]]

    run3 = pack_items([], settings, now=at(6), pending=run2.pending)
    assert run3.merged == [] and run3.changed == [], "nothing new: nothing to write"
    emitted = [m for b in run1.merged + run2.merged + run3.merged + run3.pending for m in b.members]
    assert sorted(emitted) == ["a", "b", "c", "d"], "every item exactly once"


def test_resumed_bins_count_for_max_bins_and_time_out():
    settings = BinPackingSettings(
        max_bins=1, min_entries=5, max_bytes=10, max_bin_age=timedelta(seconds=10)
    )
    stored = Bin("kept-id", None, None, at(0), ["a"], 8)
    run = pack_items(items_at(("b", 5, 1)), settings, now=at(5), pending=[stored])
    assert summary(run.merged) == [(["a"], BIN_MANAGER_FULL)]
    assert run.merged[0].bin_id == "kept-id"
    later = pack_items([], settings, now=at(12), pending=run.pending)
    assert summary(later.merged) == [(["b"], TIMEOUT)]


# ---------------------------------------------------------------------------------------
# random runs against a linear-scan reference


def reference_pack(items, s, now, pending):
    """The rules, written plainly: lists and linear scans."""
    open_bins = [dict(b) for b in pending]  # creation order
    merged = []
    cap = s.max_bytes

    def emit(b, reason, when):
        open_bins.remove(b)
        merged.append((b["members"], reason, when))

    for iid, size, t, corr, schema in sorted(items, key=lambda i: (i[2], i[0])):
        group = (schema, corr)
        if s.max_bin_age is not None:
            for b in sorted(open_bins, key=lambda b: (b["opened"], b["n"])):
                if t - b["opened"] > s.max_bin_age:
                    emit(b, TIMEOUT, t)
        if cap is not None and size > cap:
            merged.append(([iid], MAX_BYTES_THRESHOLD_REACHED, t))
            continue
        fits = [
            b
            for b in open_bins
            if b["group"] == group and (cap is None or b["bytes"] + size <= cap)
        ]
        if fits:
            b = fits[0]
        else:
            if s.max_bins is not None:
                while True:
                    scope = [
                        b for b in open_bins if s.max_bins_scope == "global" or b["group"] == group
                    ]
                    if len(scope) < s.max_bins:
                        break
                    emit(min(scope, key=lambda b: (b["opened"], b["n"])), BIN_MANAGER_FULL, t)
            b = {"group": group, "opened": t, "members": [], "bytes": 0, "n": next(COUNTER)}
            open_bins.append(b)
        b["members"].append(iid)
        b["bytes"] += size
        if cap is not None and b["bytes"] >= cap:
            emit(b, MAX_BYTES_THRESHOLD_REACHED, t)
        elif len(b["members"]) >= s.max_entries:
            emit(b, MAX_ENTRIES_THRESHOLD_REACHED, t)
    still = []
    for b in list(open_bins):
        if s.max_bin_age is not None and now - b["opened"] > s.max_bin_age:
            emit(b, TIMEOUT, now)
        elif b["bytes"] >= s.min_bytes and len(b["members"]) >= s.min_entries:
            emit(b, MIN_THRESHOLDS_REACHED, now)
        else:
            still.append(b)
    return merged, still


COUNTER = itertools.count()


def random_settings(rng):
    max_entries = rng.randint(1, 6)
    max_bytes = rng.choice([None, 10, 25])
    return BinPackingSettings(
        min_entries=rng.randint(1, max_entries),
        max_entries=max_entries,
        min_bytes=rng.choice([0, 5]) if max_bytes is None or max_bytes >= 5 else 0,
        max_bytes=max_bytes,
        max_bin_age=rng.choice([None, timedelta(seconds=rng.randint(1, 8))]),
        max_bins=rng.choice([None, 1, 2, 3]),
        max_bins_scope=rng.choice(["global", "group"]),
    )


@pytest.mark.parametrize("seed", sampling.seeds(range(40), fresh=400))
def test_random_runs_match_the_reference_and_emit_each_item_once(seed):
    rng = random.Random(seed)
    settings = random_settings(rng)
    items = [
        Item(
            f"i{n:03d}",
            rng.choice([0, 1, 2, 3, 5, 8, 13, 30]),
            at(rng.randint(0, 30)),
            rng.choice([None, "x", "y"]),
            rng.choice([None, "s1"]),
        )
        for n in range(rng.randint(1, 80))
    ]
    items.sort(key=lambda i: (i.arrival_at, i.item_id))
    cuts = sorted(rng.sample(range(len(items) + 1), 2))
    runs = [items[: cuts[0]], items[cuts[0] : cuts[1]], items[cuts[1] :]]
    pending, ref_pending, everything = [], [], []
    for number, run_items in enumerate(runs):
        now = at(10 * number + 12)
        result = pack_items(run_items, settings, now=now, pending=pending)
        ref_merged, ref_pending = reference_pack(run_items, settings, now, ref_pending)
        got = [(b.members, b.merge_reason, b.merged_at) for b in result.merged]
        assert got == ref_merged, f"run {number} with {settings}"
        assert [b.members for b in result.pending] == [b["members"] for b in ref_pending]
        for b in result.merged:
            assert b.entries == len(b.members) <= settings.max_entries or b.entries == 1
            assert b.bytes == sum(i.size for i in items if i.item_id in b.members)
            if settings.max_bytes is not None and b.entries > 1:
                assert b.bytes <= settings.max_bytes, "only a lone item exceeds max_bytes"
        everything += [m for b in result.merged for m in b.members]
        pending = result.pending
    everything += [m for b in pending for m in b.members]
    assert sorted(everything) == sorted(i.item_id for i in items), "each item exactly once"


def test_first_fit_index_finds_the_leftmost_slot_with_room():
    rng = random.Random(7)
    index, values = _FirstFitIndex(), []
    for _ in range(3000):
        if not values or rng.random() < 0.3:
            values.append(rng.randint(-1, 100))
            assert index.append(values[-1]) == len(values) - 1
        else:
            slot = rng.randrange(len(values))
            values[slot] = rng.randint(-1, 100)
            index.set(slot, values[slot])
        x = rng.randint(0, 100)
        expected = next((i for i, v in enumerate(values) if v >= x), -1)
        assert index.first_at_least(x) == expected


# ---------------------------------------------------------------------------------------
# offline planning


def test_offline_hand_instance_meets_the_lower_bound():
    sizes = {"a": 6, "b": 4, "c": 5, "d": 5, "e": 7, "f": 3, "g": 2, "h": 8}
    plan = plan_offline_items(list(sizes.items()), max_bytes=10)
    assert [b.members for b in plan.bins] == [["h", "g"], ["e", "f"], ["a", "b"], ["c", "d"]]
    assert [b.bytes for b in plan.bins] == [10, 10, 10, 10]
    (group,) = plan.report.groups
    assert (group.items, group.bytes, group.bins, group.lower_bound) == (8, 40, 4, 4)
    assert plan.report.ratio == 1.0


def test_offline_first_fit_decreasing_is_not_always_optimal():
    # optimum is 2 bins: {5, 3, 2} and {4, 4, 2}; FFD puts 5 and 4 together
    items = [("a", 2), ("b", 4), ("c", 5), ("d", 2), ("e", 4), ("f", 3)]
    plan = plan_offline_items(items, max_bytes=10)
    assert [b.members for b in plan.bins] == [["c", "b"], ["e", "f", "a"], ["d"]]
    assert (plan.report.bins, plan.report.lower_bound, plan.report.ratio) == (3, 2, 1.5)


def test_offline_best_fit_takes_the_fullest_bin_with_room():
    items = [("a", 3), ("b", 4), ("c", 3), ("d", 1), ("e", 5), ("f", 8)]
    first = plan_offline_items(items, max_bytes=10)
    best = plan_offline_items(items, max_bytes=10, strategy="best_fit_decreasing")
    assert [b.members for b in first.bins] == [["f", "d"], ["e", "b"], ["a", "c"]]
    assert [b.members for b in best.bins] == [["f"], ["e", "b", "d"], ["a", "c"]]


def test_offline_oversized_items_and_max_entries_in_the_bound():
    items = [("big", 150, "g"), ("x", 60, "g"), ("y", 50, "g")] + [
        (f"t{i}", 1, "h") for i in range(6)
    ]
    plan = plan_offline_items(items, max_bytes=100, max_entries=2)
    assert [(b.members, b.is_oversized) for b in plan.bins] == [
        (["big"], True),
        (["x"], False),
        (["y"], False),
        (["t0", "t1"], False),
        (["t2", "t3"], False),
        (["t4", "t5"], False),
    ]
    g, h = plan.report.groups
    assert (g.correlation, g.items, g.bytes, g.oversized, g.bins, g.lower_bound) == (
        "g",
        3,
        260,
        1,
        3,
        3,
    ), "1 oversized + ceil(110 / 100)"
    assert (h.bins, h.lower_bound) == (3, 3), "ceil(6 items / 2 per bin)"
    assert (plan.report.bins, plan.report.lower_bound) == (6, 6)


@pytest.mark.parametrize("strategy", ["first_fit_decreasing", "best_fit_decreasing"])
def test_offline_random_small_items_within_two_percent(strategy):
    rng = random.Random(11)
    max_bytes = 128 * 2**20
    items = [
        (f"{g}-{i}", rng.randint(1, max_bytes // 4), g)
        for g in ("a", "b", "c")
        for i in range(1000)
    ]
    plan = plan_offline_items(items, max_bytes=max_bytes, strategy=strategy)
    for group in plan.report.groups:
        assert group.items == 1000
        assert group.ratio <= 1.02, f"{group.bins} bins, lower bound {group.lower_bound}"
    assert sorted(m for b in plan.bins for m in b.members) == sorted(i[0] for i in items)
    assert all(b.bytes <= max_bytes for b in plan.bins)


def test_offline_errors():
    with pytest.raises(BinPackingError) as caught:
        plan_offline_items([("a", 1)], max_bytes=None, model_name="files_plan")
    assert str(caught.value) == (
        "dbt_merge bin packing in model files_plan, setting 'max_bytes': "
        "must be set for offline planning (got None)"
    )
    with pytest.raises(BinPackingError) as caught:
        plan_offline_items([("a", 1)], max_bytes=10, strategy="worst_fit", model_name="p")
    assert str(caught.value) == (
        "dbt_merge bin packing in model p, setting 'strategy': must be one of "
        "'first_fit_decreasing', 'best_fit_decreasing' (got 'worst_fit')"
    )
    with pytest.raises(BinPackingError, match=r"'max_entries': must be an integer > 0 or None"):
        plan_offline_items([("a", 1)], max_bytes=10, max_entries=0)


# ---------------------------------------------------------------------------------------
# defragment (NiFi C9-C14)


def frags(*specs):
    """``(id, identifier, count, index, seconds)`` -> fragment tuples."""
    return [(s[0], s[1], s[2], s[3], at(s[4])) for s in specs]


def outcome(bins):
    return [(b.members, b.status, b.merge_reason or b.failure_reason) for b in bins]


def test_c9_a_complete_set_merges_in_index_order():
    result = defragment_items(
        frags(("d", "1", 4, 4, 0), ("b", "1", 4, 2, 1), ("a", "1", 4, 1, 2), ("c", "1", 4, 3, 3)),
        now=NOW,
    )
    assert outcome(result.done) == [(["a", "b", "c", "d"], MERGED, MAX_ENTRIES_THRESHOLD_REACHED)]
    b = result.done[0]
    assert (b.indexes, b.count, b.opened_at, b.merged_at) == ([1, 2, 3, 4], 4, at(0), at(3))
    assert result.pending == []


def test_c10_the_count_on_one_fragment_is_enough():
    result = defragment_items(
        frags(("a", "1", None, 1, 0), ("b", "1", None, 2, 1), ("c", "1", 3, 3, 2)), now=NOW
    )
    assert outcome(result.done) == [(["a", "b", "c"], MERGED, MAX_ENTRIES_THRESHOLD_REACHED)]


def test_c11_conflicting_counts_fail_every_fragment_of_the_identifier():
    result = defragment_items(
        frags(
            ("a", "1", 4, 1, 0),
            ("b", "1", 5, 2, 1),
            ("c", "1", 4, 3, 2),
            ("d", "1", 4, 4, 3),
            ("x", "2", 1, 1, 4),
        ),
        now=NOW,
    )
    assert outcome(result.done) == [
        (["x"], MERGED, MAX_ENTRIES_THRESHOLD_REACHED),
        (["a", "b", "c", "d"], FAILED, CONFLICTING_FRAGMENT_COUNT),
    ]
    assert result.done[1].count is None and result.done[1].merged_at == at(3)


def test_c12_an_incomplete_set_fails_after_max_bin_age():
    fragments = frags(*[(f"f{i}", "1", 5, i, i / 10) for i in (1, 2, 3, 4)])
    waiting = defragment_items(fragments, now=at(1), max_bin_age=timedelta(seconds=2))
    assert outcome(waiting.pending) == [(["f1", "f2", "f3", "f4"], PENDING, None)]
    late = defragment_items(fragments, now=at(3), max_bin_age=timedelta(seconds=2))
    assert outcome(late.done) == [(["f1", "f2", "f3", "f4"], FAILED, INCOMPLETE_AFTER_MAX_BIN_AGE)]
    assert late.done[0].merged_at == at(3)
    forever = defragment_items(fragments, now=at(10**6))
    assert forever.done == [], "without max_bin_age an incomplete set waits"


def test_c13_a_duplicate_index_fails_and_the_set_still_merges():
    result = defragment_items(
        frags(
            ("a", "1", 4, 1, 0),
            ("b", "1", 4, 2, 1),
            ("b2", "1", 4, 2, 2),
            ("c", "1", 4, 3, 3),
            ("d", "1", 4, 4, 4),
        ),
        now=NOW,
    )
    assert outcome(result.done) == [
        (["b2"], FAILED, DUPLICATE_FRAGMENT_INDEX),
        (["a", "b", "c", "d"], MERGED, MAX_ENTRIES_THRESHOLD_REACHED),
    ]


@pytest.mark.parametrize("index", [None, 0, -1, "2", 2.0, True])
def test_c14_a_missing_or_bad_index_fails_alone(index):
    result = defragment_items(frags(("a", "1", 2, 1, 0), ("bad", "1", 2, index, 1)), now=NOW)
    assert outcome(result.done) == [(["bad"], FAILED, INVALID_FRAGMENT_INDEX)]
    assert result.done[0].indexes == [index]
    assert outcome(result.pending) == [(["a"], PENDING, None)]


@pytest.mark.parametrize("count", [0, -4, "4", 4.5])
def test_a_bad_count_fails_alone(count):
    result = defragment_items(frags(("a", "1", 2, 1, 0), ("bad", "1", count, 2, 1)), now=NOW)
    assert outcome(result.done) == [(["bad"], FAILED, INVALID_FRAGMENT_COUNT)]


def test_an_index_above_the_count_is_out_of_range():
    result = defragment_items(
        frags(("five", "1", None, 5, 0), ("a", "1", 2, 1, 1), ("six", "1", None, 6, 2)),
        now=NOW,
    )
    assert outcome(result.done) == [
        (["five"], FAILED, FRAGMENT_INDEX_OUT_OF_RANGE),
        (["six"], FAILED, FRAGMENT_INDEX_OUT_OF_RANGE),
    ]
    assert result.done[0].merged_at == at(1), "failed when the count became known"
    assert outcome(result.pending) == [(["a"], PENDING, None)]
    assert result.pending[0].count == 2


def test_a_null_identifier_fails_alone():
    result = defragment_items(frags(("a", None, 1, 1, 0), ("b", None, 1, 1, 1)), now=NOW)
    assert outcome(result.done) == [
        (["a"], FAILED, INVALID_FRAGMENT_IDENTIFIER),
        (["b"], FAILED, INVALID_FRAGMENT_IDENTIFIER),
    ]


def test_defragment_resumes_pending_sets_across_runs():
    run1 = defragment_items(frags(("a", "1", 3, 1, 0), ("b", "1", None, 2, 1)), now=at(2))
    assert outcome(run1.changed) == [(["a", "b"], PENDING, None)]
    set_id = run1.pending[0].bin_id
    run2 = defragment_items(frags(("c", "1", None, 3, 3)), now=at(4), pending=run1.pending)
    assert outcome(run2.done) == [(["a", "b", "c"], MERGED, MAX_ENTRIES_THRESHOLD_REACHED)]
    assert (run2.done[0].bin_id, run2.done[0].opened_at) == (set_id, at(0))
    # a copy arriving after the set merged opens a new set, which times out (NiFi C13)
    run3 = defragment_items(
        frags(("c-again", "1", 3, 3, 5)), now=at(20), max_bin_age=timedelta(seconds=10)
    )
    assert outcome(run3.done) == [(["c-again"], FAILED, INCOMPLETE_AFTER_MAX_BIN_AGE)]
    assert run3.done[0].bin_id != set_id


def test_defragment_errors():
    with pytest.raises(BinPackingError) as caught:
        defragment_items([], now=NOW, max_bin_age=timedelta(seconds=-1), model_name="parts")
    assert str(caught.value) == (
        "dbt_merge defragment in model parts, setting 'max_bin_age': must be > 0 "
        "(got datetime.timedelta(days=-1, seconds=86399))"
    )
    with pytest.raises(BinPackingError, match=r"came twice \(got 'a'\)"):
        defragment_items(frags(("a", "1", 2, 1, 0), ("a", "1", 2, 2, 1)), now=NOW)


# fragment_index_base: NiFi MergeContent numbers fragments 1..count, the record
# processors (for MergeRecord) 0..count-1


def test_zero_based_sets_merge_with_fragment_index_base_0():
    result = defragment_items(
        frags(("c", "1", 3, 2, 0), ("a", "1", 3, 0, 1), ("b", "1", 3, 1, 2)),
        now=NOW,
        fragment_index_base=0,
    )
    assert outcome(result.done) == [(["a", "b", "c"], MERGED, MAX_ENTRIES_THRESHOLD_REACHED)]
    assert result.done[0].indexes == [0, 1, 2], "the indexes as given, in order"


def test_a_set_numbered_from_the_other_base_never_merges():
    zero_based = frags(("a", "1", 3, 0, 0), ("b", "1", 3, 1, 1), ("c", "1", 3, 2, 2))
    result = defragment_items(zero_based, now=NOW)
    assert outcome(result.done) == [(["a"], FAILED, INVALID_FRAGMENT_INDEX)], (
        "index 0 is below the default base 1"
    )
    assert outcome(result.pending) == [(["b", "c"], PENDING, None)], "incomplete, not merged"
    one_based = frags(("a", "1", 3, 1, 0), ("b", "1", 3, 2, 1), ("c", "1", 3, 3, 2))
    result = defragment_items(one_based, now=NOW, fragment_index_base=0)
    assert outcome(result.done) == [(["c"], FAILED, FRAGMENT_INDEX_OUT_OF_RANGE)], (
        "with base 0 the last index of a set of 3 is 2"
    )
    assert outcome(result.pending) == [(["a", "b"], PENDING, None)]


def test_mixed_numbering_in_one_set_fails_by_name():
    # 0..2 and 3 in a set of 3 with base 0: the 3 is out of range, the set still merges
    result = defragment_items(
        frags(("a", "1", 3, 0, 0), ("b", "1", 3, 1, 1), ("x", "1", 3, 3, 2), ("c", "1", 3, 2, 3)),
        now=NOW,
        fragment_index_base=0,
    )
    assert outcome(result.done) == [
        (["x"], FAILED, FRAGMENT_INDEX_OUT_OF_RANGE),
        (["a", "b", "c"], MERGED, MAX_ENTRIES_THRESHOLD_REACHED),
    ]
    # a member above the range, seen before the count: fails when the count arrives
    result = defragment_items(
        frags(("x", "1", None, 2, 0), ("a", "1", 2, 0, 1)), now=NOW, fragment_index_base=0
    )
    assert outcome(result.done) == [(["x"], FAILED, FRAGMENT_INDEX_OUT_OF_RANGE)]
    assert outcome(result.pending) == [(["a"], PENDING, None)]


@pytest.mark.parametrize("base", [2, -1, True, "0", 0.0, None])
def test_a_bad_fragment_index_base_is_refused(base):
    with pytest.raises(BinPackingError) as caught:
        defragment_items([], now=NOW, model_name="parts", fragment_index_base=base)
    assert str(caught.value) == (
        "dbt_merge defragment in model parts, setting 'fragment_index_base': must be 1 "
        "(indexes 1..count, NiFi MergeContent) or 0 (indexes 0..count-1, NiFi MergeRecord) "
        f"(got {base!r})"
    )
