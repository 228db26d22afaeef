"""Auto-merge planner: which runs of small, adjacent ranges of a table to merge.

A pure planner after Accumulo 4.x tablet auto-merge
(``FindMergeableRangeTask`` in apache/accumulo, read for SEMANTICS.md section D). A
table is an ordered list of key ranges (Iceberg partitions, tablets, files sorted by
key), each with a size, a file count and a mergeability:

* ``NEVER``: never merged automatically (default for ranges a user created);
* ``ALWAYS``: always eligible (default for ranges the system created);
* ``DELAY``: eligible once ``now >= marked_at + delay``.

``plan_auto_merge`` scans the ranges left to right, exactly like Accumulo's
``MergeableRange.add``: a range joins the current run unless (checked in this order)
it does not start where the run ends (a gap), it is not eligible, the run's file
count would go over ``file_max``, or the run's size would go over
``int(split_threshold * threshold)``. Equality is allowed (the code fails only on
``>``; the Accumulo docs say "less than"). When a range cannot join, the current run
is closed and a new run starts *with that range*, which is dropped again if it cannot
stand alone (not eligible, or alone over a limit). Runs of at least two ranges become
merges; a run of one is left alone. The scan is greedy: sizes ``60, 50, 40`` under a
limit of 100 give ``[60]`` (left alone) and ``[50, 40]`` (merged).

Inputs and outputs::

    ranges = [Range("333", None, 333), Range("555", 333, 555),
              Range("666", 555, 666, mergeability=Mergeability.never()),
              Range("999", 666, 999), Range("default", 999, None)]
    plan = plan_auto_merge(ranges, AutoMergeSettings(), now, "my_model")
    [m.key_range for m in plan.merges]        # ['(-inf,555]', '(666,+inf)']
    plan.decision("666").reason               # 'never'

On Iceberg, ``plan_table`` (``iceberg.py``; the only part that needs Spark) reads a
table's own metadata tables and returns the plan as a DataFrame for a dbt Python model;
the macro ``dbt_merge.execute_auto_merge`` carries it out with ``rewrite_data_files``.
The ranges are the table's data files ordered by a sort column, within each partition
(``files.py``), or its partitions (``partitions.py``).

Where this differs from Accumulo, on purpose:

* ``threshold`` must be in ``(0, 1]``; Accumulo skips a table whose threshold is
  ``<= 0`` (a way to turn auto-merge off). Here 0 is an error: to turn auto-merge
  off, do not configure it.
* Time is wall-clock ``datetime`` (Accumulo uses the Manager's steady clock).
* A NEVER range is kept in the input and fails the eligibility check; Accumulo
  filters NEVER tablets out on the server, so its next tablet fails the contiguity
  check instead. Both close the run at the same place, so the plans are the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dbt_merge.auto_merge.errors import setting_error
from dbt_merge.auto_merge.mergeability import DELAY, Mergeability
from dbt_merge.auto_merge.ranges import (
    Range,
    format_key_range,
    lower_bound,
    upper_bound,
    validate_ranges,
)
from dbt_merge.auto_merge.settings import AutoMergeSettings

# Why a range is left alone (RangeDecision.reason), plus "merged" for members of a merge.
MERGED = "merged"
REASON_NEVER = "never"
REASON_DELAY_NOT_DUE = "delay_not_due"
REASON_TOO_MANY_FILES = "too_many_files"
REASON_TOO_BIG = "too_big"
REASON_RUN_OF_ONE = "run_of_one"

# Why a range cannot join the current run (Accumulo's UnmergeableReason, same order).
_NOT_CONTIGUOUS = "not_contiguous"
_NOT_ELIGIBLE = "not_eligible"
_MAX_FILE_COUNT = "max_file_count"
_MAX_TOTAL_SIZE = "max_total_size"


@dataclass(frozen=True)
class MergePlan:
    """One merge: a run of at least two contiguous eligible ranges.

    Attributes:
        first_range_id: first member.
        last_range_id: last member.
        lower: exclusive lower key of the merged range (the first member's).
        upper: inclusive upper key of the merged range (the last member's).
        size_bytes: combined size.
        file_count: combined files.
        record_count: combined rows.
        range_ids: members, in key order.
        mergeability: of the merged range: the last member's, as Accumulo's
            ``MergeTablets`` copies it from the last tablet (SEMANTICS.md D.1, D10).
        reason: why these ranges, and why the run stops where it does.
    """

    first_range_id: str
    last_range_id: str
    lower: Any
    upper: Any
    size_bytes: int
    file_count: int
    record_count: int
    range_ids: tuple[str, ...]
    mergeability: Mergeability
    reason: str

    @property
    def key_range(self) -> str:
        """The merged range as ``(lower,upper]``."""
        return format_key_range(self.lower, self.upper)


@dataclass(frozen=True)
class RangeDecision:
    """What the planner does with one range and why.

    Attributes:
        range_id: the range.
        action: ``merge`` or ``leave``.
        reason: ``merged``, ``never``, ``delay_not_due``, ``too_many_files``,
            ``too_big`` or ``run_of_one``.
        explanation: a sentence with the numbers behind the reason.
        plan_index: index of its merge in ``AutoMergePlan.merges`` when merged.
        due_at: when a DELAY range becomes eligible (``delay_not_due`` only).
    """

    range_id: str
    action: str
    reason: str
    explanation: str
    plan_index: int | None = None
    due_at: datetime | None = None


@dataclass(frozen=True)
class AutoMergePlan:
    """The merges of one scan and a decision for every range, in key order."""

    merges: tuple[MergePlan, ...]
    decisions: tuple[RangeDecision, ...]
    max_total_size: int
    file_max: int

    def decision(self, range_id: str) -> RangeDecision:
        """The decision for ``range_id`` (KeyError if there is no such range)."""
        for decision in self.decisions:
            if decision.range_id == range_id:
                return decision
        raise KeyError(range_id)


@dataclass
class _Run:
    """Accumulo's ``MergeableRange``: the run being built and its totals."""

    max_files: int
    max_size: int
    now: datetime
    model_name: str
    members: list[Range] = field(default_factory=list)
    size: int = 0
    files: int = 0
    records: int = 0

    def check(self, item: Range) -> str | None:
        """Why ``item`` cannot join, in Accumulo's order (``MergeableRange.validate``)."""
        if self.members and lower_bound(item.lower) != upper_bound(self.members[-1].upper):
            return _NOT_CONTIGUOUS
        if not _eligible(item, self.now, self.model_name):
            return _NOT_ELIGIBLE
        # Both limits fail only on ">", so a run may reach them exactly (SEMANTICS.md D.3).
        if self.files + item.file_count > self.max_files:
            return _MAX_FILE_COUNT
        if self.size + item.size_bytes > self.max_size:
            return _MAX_TOTAL_SIZE
        return None

    def add(self, item: Range) -> str | None:
        failure = self.check(item)
        if failure is None:
            self.members.append(item)
            self.size += item.size_bytes
            self.files += item.file_count
            self.records += item.record_count
        return failure

    def reset(self) -> None:
        self.members = []
        self.size = self.files = self.records = 0


def _eligible(item: Range, now: datetime, model_name: str) -> bool:
    mergeability = item.resolved_mergeability
    assert mergeability is not None  # checked by _validate_mergeability
    try:
        return mergeability.is_eligible(now)
    except TypeError:
        raise setting_error(
            model_name,
            "now",
            f"cannot be compared with marked_at of range {item.range_id!r}; use time zones "
            "on both or on neither",
            f"now {now!r}, marked_at {mergeability.marked_at!r}",
        ) from None


def _why_not_eligible(item: Range) -> str:
    mergeability = item.resolved_mergeability
    assert mergeability is not None
    if mergeability.mode == DELAY:
        return f"range {item.range_id!r} is DELAY, due at {mergeability.due_at}"
    return f"range {item.range_id!r} is NEVER"


def _why_stopped(failure: str, item: Range, run: _Run) -> str:
    """Why ``item`` could not join the run (said from the run's side)."""
    if failure == _NOT_CONTIGUOUS:
        return f"there is a gap before range {item.range_id!r} at {item.key_range}"
    if failure == _NOT_ELIGIBLE:
        return f"the next {_why_not_eligible(item)}"
    if failure == _MAX_FILE_COUNT:
        return (
            f"adding range {item.range_id!r} would make {run.files + item.file_count} files, "
            f"over file_max {run.max_files}"
        )
    return (
        f"adding range {item.range_id!r} would make {run.size + item.size_bytes} bytes, "
        f"over the size limit {run.max_size}"
    )


def _why_alone(failure: str, item: Range, run: _Run) -> tuple[str, str]:
    """Reason code and sentence for a range that cannot even start a run."""
    mergeability = item.resolved_mergeability
    assert mergeability is not None
    if failure == _NOT_ELIGIBLE and mergeability.mode == DELAY:
        return REASON_DELAY_NOT_DUE, (
            f"mergeability {mergeability} marked at {mergeability.marked_at} is due at "
            f"{mergeability.due_at}, after now ({run.now})"
        )
    if failure == _NOT_ELIGIBLE:
        default = " (the default for user-created ranges)" if item.mergeability is None else ""
        return REASON_NEVER, f"mergeability is NEVER{default}"
    if failure == _MAX_FILE_COUNT:
        return REASON_TOO_MANY_FILES, (
            f"it alone has {item.file_count} files, over file_max {run.max_files}"
        )
    return REASON_TOO_BIG, (
        f"it alone has {item.size_bytes} bytes, over the size limit {run.max_size}"
    )


def plan_auto_merge(
    ranges: Sequence[Range],
    settings: AutoMergeSettings,
    now: datetime,
    model_name: str,
) -> AutoMergePlan:
    """Plan the merges of one scan, with a decision for every range.

    Args:
        ranges: the table's ranges in key order, non-overlapping; gaps are allowed
            and break runs.
        settings: the limits (validated here).
        now: the scan time DELAY ranges are compared with.
        model_name: named in error text.

    Returns:
        The merges (runs of >= 2 ranges) and one decision per range, in key order.

    Raises:
        AutoMergeError: bad settings, unordered or overlapping ranges, bad range fields.

    Examples:
        >>> r = [Range("a", None, 1), Range("b", 1, None)]
        >>> plan = plan_auto_merge(r, AutoMergeSettings(), datetime(2024, 1, 1), "m")
        >>> [m.key_range for m in plan.merges]
        ['(-inf,+inf)']
    """
    settings.validate(model_name)
    if not isinstance(now, datetime):
        raise setting_error(model_name, "now", "must be a datetime", repr(now))
    checked = validate_ranges(ranges, model_name)

    run = _Run(settings.file_max, settings.max_total_size, now, model_name)
    merges: list[MergePlan] = []
    decisions: dict[str, RangeDecision] = {}
    # Why nothing before the current run could join it (for run-of-one explanations).
    run_start = "it is the first range"
    next_start = run_start

    def close(stopped_because: str) -> None:
        # Accumulo's submit(): runs of fewer than two ranges are left alone.
        members = run.members
        if len(members) == 1:
            decisions[members[0].range_id] = RangeDecision(
                members[0].range_id,
                "leave",
                REASON_RUN_OF_ONE,
                f"eligible and within the limits, but no neighbour can join it: {run_start}; "
                f"{stopped_because}",
            )
        if len(members) < 2:
            return
        first, last = members[0], members[-1]
        last_mergeability = last.resolved_mergeability
        assert last_mergeability is not None
        plan = MergePlan(
            first_range_id=first.range_id,
            last_range_id=last.range_id,
            lower=first.lower,
            upper=last.upper,
            size_bytes=run.size,
            file_count=run.files,
            record_count=run.records,
            range_ids=tuple(m.range_id for m in members),
            mergeability=last_mergeability,
            reason=(
                f"{len(members)} contiguous eligible ranges "
                f"{format_key_range(first.lower, last.upper)}: {run.size} bytes <= "
                f"{run.max_size} and {run.files} files <= {run.max_files}; the run stops "
                f"because {stopped_because}"
            ),
        )
        for member in members:
            decisions[member.range_id] = RangeDecision(
                member.range_id,
                "merge",
                MERGED,
                f"merged into {plan.key_range} with {len(members) - 1} other range(s)",
                plan_index=len(merges),
            )
        merges.append(plan)

    for item in checked:
        # 1. Try to extend the current run.
        failure = run.add(item)
        if failure is None:
            if len(run.members) == 1:
                run_start = next_start
            continue
        # 2. The run is complete: submit it and restart with this range
        #    (Accumulo: submit(current); current.resetAndAdd(tm)).
        previous = run.members[-1] if run.members else None
        close(_why_stopped(failure, item, run))
        run.reset()
        alone = run.add(item)
        if alone is None:
            # Only a gap or a limit can stop a range that stands alone, and both need a
            # run to compare with, so ``previous`` is set here.
            assert previous is not None
            run_start = (
                f"there is a gap after range {previous.range_id!r}"
                if failure == _NOT_CONTIGUOUS
                else f"it does not fit in the run ending at range {previous.range_id!r}"
            )
            continue
        # 3. It cannot stand alone either: leave it and note why for the next run.
        reason, explanation = _why_alone(alone, item, run)
        due_at = None
        if reason == REASON_DELAY_NOT_DUE and item.resolved_mergeability is not None:
            due_at = item.resolved_mergeability.due_at
        decisions[item.range_id] = RangeDecision(
            item.range_id, "leave", reason, explanation, due_at=due_at
        )
        next_start = {
            _NOT_ELIGIBLE: f"the previous {_why_not_eligible(item)}",
            _MAX_FILE_COUNT: f"the previous range {item.range_id!r} has too many files",
        }.get(alone, f"the previous range {item.range_id!r} is too big")
    # 4. Submit the last run.
    close("it is the last range")

    return AutoMergePlan(
        merges=tuple(merges),
        decisions=tuple(decisions[item.range_id] for item in checked),
        max_total_size=settings.max_total_size,
        file_max=settings.file_max,
    )
