"""Bin packing and defragment: NiFi MergeContent's bins, as tables a dbt model merges.

Three algorithms, each a pure-Python engine (plain lists, no Spark, unit-tested on
its own) and a Spark entry point a dbt Python model calls:

* **streaming bin packing** (``BinPacker``, ``pack_items``; Spark: ``bin_pack``).
  Items are taken in arrival order (ties by item id). An item goes into the first
  open bin, in creation order, of its group (same schema value *and* same
  correlation value; null is a value of its own) that has room for it, else into a
  new bin. Before each item, every open bin older than ``max_bin_age`` (age =
  the item's arrival minus the bin's first arrival, strictly greater) is emitted
  with ``TIMEOUT``. An item larger than ``max_bytes`` is a bin of its own, emitted
  at once with ``MAX_BYTES_THRESHOLD_REACHED``. Opening a bin while ``max_bins``
  bins are open first emits the oldest open bin with ``BIN_MANAGER_FULL``. A bin
  is emitted as soon as it reaches ``max_bytes`` (``MAX_BYTES_THRESHOLD_REACHED``,
  which wins over entries, as in NiFi) or ``max_entries``
  (``MAX_ENTRIES_THRESHOLD_REACHED``). When the run's input is exhausted each open
  bin is emitted with ``TIMEOUT`` if it is older than ``max_bin_age`` at the run's
  clock, else with ``MIN_THRESHOLDS_REACHED`` if it holds ``min_bytes`` and
  ``min_entries``, else it stays **pending** and the next run resumes it. Over any
  sequence of runs every item is emitted exactly once.
* **offline planning** (``plan_offline_items``; Spark: ``plan_offline`` and
  ``offline_report``): a known set (e.g. the data files of a table) packed per
  group by first-fit-decreasing or best-fit-decreasing, reported against the
  lower bound ``ceil(bytes / max_bytes)``.
* **defragment** (``Defragmenter``, ``defragment_items``; Spark: ``defragment``):
  fragments are binned by fragment identifier; a set holding ``count`` distinct
  indexes ``1..count`` is merged in index order. Broken sets fail with a reason;
  nothing is dropped.

Differences from NiFi, on purpose:

* Bins are emitted as soon as they reach a maximum, and at the end of a run's
  input; NiFi's "more than 5 failed offers" completion and its trigger timing have
  no counterpart in a batch.
* At the end of the input a bin older than ``max_bin_age`` is ``TIMEOUT`` even if
  it also meets the minimums (NiFi would report ``MIN_THRESHOLDS_REACHED`` for it
  when its queue is empty).
* An oversized item does not count as an open bin and never triggers
  ``BIN_MANAGER_FULL``; its bin gets ``MAX_BYTES_THRESHOLD_REACHED`` (NiFi leaves
  the reason unset).
* ``max_bins`` defaults to unbounded (NiFi: 5) and may apply per group
  (``max_bins_scope='group'``) so that groups stay independent.

Bin ids are the first 32 hex digits of
``sha256(repr(("bin", schema value, correlation value, first member id)))``, so a
pending bin keeps its id while it grows across runs and a dbt model can ``merge``
the output by ``bin_id``. Item ids must be unique (the engines raise on a repeat
within a task; the Spark functions cast ids to string).
"""

from __future__ import annotations

import bisect
import functools
import logging
import operator
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DateType,
    DoubleType,
    IntegralType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from dbt_merge.bin_packing.first_fit import _CLOSED, _FirstFitIndex
from dbt_merge.bin_packing.packer import (
    Bin,
    _pack,
)
from dbt_merge.bin_packing.settings import (
    _UNSET,
    CONFLICTING_FRAGMENT_COUNT,
    DUPLICATE_FRAGMENT_INDEX,
    FAILED,
    FRAGMENT_INDEX_OUT_OF_RANGE,
    INCOMPLETE_AFTER_MAX_BIN_AGE,
    INVALID_FRAGMENT_COUNT,
    INVALID_FRAGMENT_IDENTIFIER,
    INVALID_FRAGMENT_INDEX,
    MAX_BIN_AGE_DEFAULT,
    MAX_BINS_DEFAULT,
    MAX_BINS_SCOPE_DEFAULT,
    MAX_BYTES_DEFAULT,
    MAX_ENTRIES_DEFAULT,
    MAX_ENTRIES_THRESHOLD_REACHED,
    MERGED,
    MIN_BYTES_DEFAULT,
    MIN_ENTRIES_DEFAULT,
    OFFLINE_STRATEGY_DEFAULT,
    PENDING,
    BinPackingSettings,
    _bin_id,
    _is_int,
    _setting_error,
    _validate_max_bin_age,
    validate_offline,
)
from dbt_merge.core.spark import materialize

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)

_MICROSECOND = timedelta(microseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

BIN_SCHEMA = StructType(
    [
        StructField("bin_id", StringType(), False),
        StructField("schema_value", StringType(), True),
        StructField("correlation_value", StringType(), True),
        StructField("entries", LongType(), False),
        StructField("bytes", LongType(), False),
        StructField("members", ArrayType(StringType(), False), False),
        StructField("status", StringType(), False),
        StructField("merge_reason", StringType(), True),
        StructField("opened_at", TimestampType(), False),
        StructField("merged_at", TimestampType(), True),
    ]
)
"""One row per bin of ``bin_pack``; ``members`` in arrival order."""

OFFLINE_SCHEMA = StructType(
    [
        StructField("bin_id", StringType(), False),
        StructField("schema_value", StringType(), True),
        StructField("correlation_value", StringType(), True),
        StructField("entries", LongType(), False),
        StructField("bytes", LongType(), False),
        StructField("members", ArrayType(StringType(), False), False),
        StructField("is_oversized", BooleanType(), False),
    ]
)
"""One row per planned bin of ``plan_offline``; ``members`` in placement order."""

OFFLINE_REPORT_SCHEMA = StructType(
    [
        StructField("level", StringType(), False),
        StructField("schema_value", StringType(), True),
        StructField("correlation_value", StringType(), True),
        StructField("items", LongType(), False),
        StructField("bytes", LongType(), False),
        StructField("oversized", LongType(), False),
        StructField("bins", LongType(), False),
        StructField("lower_bound", LongType(), False),
        StructField("bins_over_lower_bound", DoubleType(), True),
    ]
)
"""One row per group (``level='group'``) plus one ``level='total'`` row."""

DEFRAGMENT_SCHEMA = StructType(
    [
        StructField("bin_id", StringType(), False),
        StructField("fragment_identifier", StringType(), True),
        StructField("fragment_count", LongType(), True),
        StructField("entries", LongType(), False),
        StructField("members", ArrayType(StringType(), False), False),
        StructField("member_indexes", ArrayType(LongType(), True), False),
        StructField("status", StringType(), False),
        StructField("merge_reason", StringType(), True),
        StructField("failure_reason", StringType(), True),
        StructField("opened_at", TimestampType(), False),
        StructField("merged_at", TimestampType(), True),
    ]
)
"""One row per fragment set of ``defragment``; ``members`` in index order."""


# ---------------------------------------------------------------------------------------
# offline planning


@dataclass
class PlannedBin:
    """A bin of the offline planner; ``members`` in placement (decreasing size) order."""

    bin_id: str
    schema: Hashable
    correlation: Hashable
    members: list[Hashable]
    bytes: int
    is_oversized: bool = False

    @property
    def entries(self) -> int:
        return len(self.members)

    def as_dict(self) -> dict[str, Any]:
        """The bin as an output row (``OFFLINE_SCHEMA`` names)."""
        return {
            "bin_id": self.bin_id,
            "schema_value": self.schema,
            "correlation_value": self.correlation,
            "entries": self.entries,
            "bytes": self.bytes,
            "members": list(self.members),
            "is_oversized": self.is_oversized,
        }


@dataclass
class GroupReport:
    """How one group was packed, against the lower bound.

    ``lower_bound`` = oversized items (one bin each) + the larger of
    ``ceil(bytes / max_bytes)`` and ``ceil(items / max_entries)`` over the other
    items (at least 1 if there are any); with no oversized items and ``max_entries``
    not binding it is ``ceil(bytes / max_bytes)``.
    """

    schema: Hashable
    correlation: Hashable
    items: int
    bytes: int
    oversized: int
    bins: int
    lower_bound: int

    @property
    def ratio(self) -> float | None:
        """bins / lower bound (1.0 is optimal), None for an empty group."""
        return self.bins / self.lower_bound if self.lower_bound else None


@dataclass
class OfflineReport:
    """Per-group reports and their totals (groups never share a bin)."""

    groups: list[GroupReport]

    @property
    def bins(self) -> int:
        return sum(g.bins for g in self.groups)

    @property
    def lower_bound(self) -> int:
        return sum(g.lower_bound for g in self.groups)

    @property
    def ratio(self) -> float | None:
        return self.bins / self.lower_bound if self.lower_bound else None


@dataclass
class OfflinePlan:
    """Bins (groups in first-seen order) and the report."""

    bins: list[PlannedBin]
    report: OfflineReport


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _lower_bound(
    items: int, total: int, oversized: int, max_bytes: int, max_entries: int | None
) -> int:
    normal_items = items - oversized
    if normal_items == 0:
        return oversized
    bound = max(1, _ceil_div(total, max_bytes))
    if max_entries is not None:
        bound = max(bound, _ceil_div(normal_items, max_entries))
    return oversized + bound


def plan_offline_items(
    items: Iterable[tuple],
    *,
    max_bytes: int,
    max_entries: int | None = None,
    strategy: str = OFFLINE_STRATEGY_DEFAULT,
    model_name: str = "bin_packing",
) -> OfflinePlan:
    """Pack a known set per group with first- or best-fit-decreasing.

    Items are sorted by size, largest first (ties by id), and each goes into the
    first bin (``first_fit_decreasing``; segment tree) or the fullest bin
    (``best_fit_decreasing``; bisect over the sorted remaining capacities, ties to
    the older bin) that has room and fewer than ``max_entries`` items, else into a
    new bin. An item larger than ``max_bytes`` is a bin of its own. O(n log n) per
    group (best fit also moves list entries on insert, a memmove).

    Both are within 11/9 OPT + 1 bins. On sizes uniform in ``[1, max_bytes/4]``
    they come within a bin or two of ``ceil(bytes / max_bytes)``. On sizes uniform
    up to ``max_bytes`` the lower bound itself is weak: items above
    ``max_bytes/2`` cannot share a bin, and the optimum exceeds the bound by
    Theta(sqrt(n)) bins, so the reported ratio stays above 1 for any packer.

    Args:
        items: tuples ``(item_id, size, correlation, schema)``; the last two may be
            left out (None).
        max_bytes: capacity of a bin.
        max_entries: items per bin at most (None: no limit).
        strategy: ``'first_fit_decreasing'`` (default) or ``'best_fit_decreasing'``.
        model_name: named in error messages.

    Returns:
        ``OfflinePlan``: bins, groups in first-seen order, and the report.
    """
    validate_offline(max_bytes, max_entries, strategy, model_name)
    groups: dict[tuple[Hashable, Hashable], list[tuple[Hashable, int]]] = {}
    for item in items:
        item_id, size = item[0], item[1]
        correlation = item[2] if len(item) > 2 else None
        schema = item[3] if len(item) > 3 else None
        if not _is_int(size) or size < 0:
            raise _setting_error(
                model_name, "size", f"item {item_id!r} needs a size >= 0 in bytes", size
            )
        groups.setdefault((schema, correlation), []).append((item_id, size))
    pack = _first_fit_decreasing if strategy == "first_fit_decreasing" else _best_fit_decreasing
    bins: list[PlannedBin] = []
    reports = []
    for (schema, correlation), members in groups.items():
        members.sort(key=lambda m: (-m[1], m[0]))
        cut = bisect.bisect_left([-m[1] for m in members], -max_bytes)  # first item <= max
        group_bins = [
            PlannedBin(
                _bin_id("offline", schema, correlation, m[0]),
                schema,
                correlation,
                [m[0]],
                m[1],
                True,
            )
            for m in members[:cut]
        ]
        for packed in pack(members[cut:], max_bytes, max_entries):
            first = packed[0][0]
            group_bins.append(
                PlannedBin(
                    _bin_id("offline", schema, correlation, first),
                    schema,
                    correlation,
                    [m for m, _ in packed],
                    sum(s for _, s in packed),
                )
            )
        bins.extend(group_bins)
        total = sum(s for _, s in members[cut:])
        reports.append(
            GroupReport(
                schema,
                correlation,
                items=len(members),
                bytes=total + sum(s for _, s in members[:cut]),
                oversized=cut,
                bins=len(group_bins),
                lower_bound=_lower_bound(len(members), total, cut, max_bytes, max_entries),
            )
        )
    return OfflinePlan(bins, OfflineReport(reports))


def _first_fit_decreasing(
    members: list[tuple[Hashable, int]], max_bytes: int, max_entries: int | None
) -> list[list[tuple[Hashable, int]]]:
    index = _FirstFitIndex()
    bins: list[list[tuple[Hashable, int]]] = []
    room: list[int] = []
    for member in members:
        size = member[1]
        slot = index.first_at_least(size)
        if slot < 0:
            slot = index.append(max_bytes)
            bins.append([])
            room.append(max_bytes)
        bins[slot].append(member)
        room[slot] -= size
        full = max_entries is not None and len(bins[slot]) >= max_entries
        index.set(slot, _CLOSED if full else room[slot])
    return bins


def _best_fit_decreasing(
    members: list[tuple[Hashable, int]], max_bytes: int, max_entries: int | None
) -> list[list[tuple[Hashable, int]]]:
    bins: list[list[tuple[Hashable, int]]] = []
    by_room: list[tuple[int, int]] = []  # (remaining capacity, bin number), sorted
    for member in members:
        size = member[1]
        at = bisect.bisect_left(by_room, (size, -1))
        if at == len(by_room):
            number, room = len(bins), max_bytes
            bins.append([])
        else:
            room, number = by_room.pop(at)
        bins[number].append(member)
        if max_entries is None or len(bins[number]) < max_entries:
            bisect.insort(by_room, (room - size, number))
    return bins


# ---------------------------------------------------------------------------------------
# defragment


class Fragment(NamedTuple):
    """One fragment: NiFi's ``fragment.identifier``, ``fragment.count`` (may be None on
    all but one fragment of a set) and ``fragment.index`` (1-based)."""

    item_id: Hashable
    identifier: Hashable
    count: Any
    index: Any
    arrival_at: Any


class DefragBin:
    """A fragment set: merged (complete), failed (with a reason) or pending."""

    __slots__ = (
        "bin_id",
        "changed",
        "count",
        "failure_reason",
        "identifier",
        "indexes",
        "members",
        "merge_reason",
        "merged_at",
        "opened_at",
        "status",
    )

    def __init__(
        self,
        bin_id: str,
        identifier: Hashable,
        count: Any,
        members: Sequence[Hashable],
        indexes: Sequence[Any],
        opened_at: Any,
        status: str = PENDING,
        merge_reason: str | None = None,
        failure_reason: str | None = None,
        merged_at: Any = None,
    ) -> None:
        self.bin_id = bin_id
        self.identifier = identifier
        self.count = count
        self.members = list(members)
        self.indexes = list(indexes)
        self.opened_at = opened_at
        self.status = status
        self.merge_reason = merge_reason
        self.failure_reason = failure_reason
        self.merged_at = merged_at
        self.changed = True

    @property
    def entries(self) -> int:
        return len(self.members)

    def as_dict(self) -> dict[str, Any]:
        """The set as an output row (``DEFRAGMENT_SCHEMA`` names)."""
        return {
            "bin_id": self.bin_id,
            "fragment_identifier": self.identifier,
            "fragment_count": self.count,
            "entries": self.entries,
            "members": list(self.members),
            "member_indexes": list(self.indexes),
            "status": self.status,
            "merge_reason": self.merge_reason,
            "failure_reason": self.failure_reason,
            "opened_at": self.opened_at,
            "merged_at": self.merged_at,
        }

    def __repr__(self) -> str:
        return (
            f"DefragBin({self.identifier!r}, members={self.members!r}, "
            f"indexes={self.indexes!r}, {self.status}, "
            f"{self.merge_reason or self.failure_reason})"
        )


@dataclass
class DefragResult:
    """One run of ``Defragmenter``: sets merged or failed in this run (emission
    order) and the pending ones (creation order)."""

    done: list[DefragBin]
    pending: list[DefragBin]

    @property
    def changed(self) -> list[DefragBin]:
        """Rows to merge into the stored table."""
        return self.done + [b for b in self.pending if b.changed]


class _FragmentSet:
    __slots__ = (
        "bin_id",
        "changed",
        "count",
        "entries",
        "identifier",
        "indexes",
        "last_at",
        "opened_at",
    )

    def __init__(
        self, bin_id: str, identifier: Hashable, opened_at: Any, count: int | None = None
    ) -> None:
        self.bin_id = bin_id
        self.identifier = identifier
        self.opened_at = opened_at
        self.count = count
        self.entries: list[tuple[int, int, Hashable, Any]] = []  # (index, seq, id, arrival)
        self.indexes: set[int] = set()
        self.last_at = opened_at
        self.changed = True


class Defragmenter:
    """Streaming defragment: NiFi's Defragment merge strategy, per fragment identifier.

    Each fragment, in arrival order (ties by id), is checked in this order:

    1. null identifier -> fails alone, ``INVALID_FRAGMENT_IDENTIFIER``;
    2. index null, not an integer or < 1 -> fails alone, ``INVALID_FRAGMENT_INDEX``
       (indexes are 1-based, as NiFi's split processors write them);
    3. count not an integer or < 1 -> fails alone, ``INVALID_FRAGMENT_COUNT``; a null
       count is fine as long as some fragment of the set carries it (NiFi);
    4. its identifier already conflicted in this run -> joins that failed set;
    5. count differs from the open set's count -> the open set and this fragment
       fail together, ``CONFLICTING_FRAGMENT_COUNT``, and so does every later
       fragment of the identifier in this run;
    6. index > count -> fails alone, ``FRAGMENT_INDEX_OUT_OF_RANGE`` (NiFi does not
       check the range); members already in the set when its count becomes known
       fail the same way;
    7. index already in the open set -> this (later) copy fails alone,
       ``DUPLICATE_FRAGMENT_INDEX``; the set can still complete (NiFi C13);
    8. otherwise it joins the open set, which is merged in index order with
       ``MAX_ENTRIES_THRESHOLD_REACHED`` as soon as it holds ``count`` distinct
       indexes. A later fragment of the same identifier opens a new set.

    At ``finish(now)`` an open set older than ``max_bin_age`` (from its first
    fragment) fails with ``INCOMPLETE_AFTER_MAX_BIN_AGE``; the rest stay pending.
    A set that is complete when a run sees it merges however long it took; without
    ``max_bin_age`` an incomplete set waits forever (as NiFi).

    Args:
        max_bin_age: a ``datetime.timedelta`` or None.
        pending: the previous run's pending sets (``DefragBin`` with status pending).
        model_name: named in error messages.
        max_age: ``max_bin_age`` in the unit of the arrival times, when they are not
            datetimes; defaults to ``max_bin_age``.
    """

    def __init__(
        self,
        *,
        max_bin_age: timedelta | None = None,
        pending: Iterable[DefragBin] = (),
        model_name: str = "defragment",
        max_age: Any = _UNSET,
    ) -> None:
        _validate_max_bin_age(max_bin_age, model_name, "defragment")
        self.model_name = model_name
        self._max_age = max_bin_age if max_age is _UNSET else max_age
        self._open: dict[Hashable, _FragmentSet] = {}
        self._conflicts: dict[Hashable, _FragmentSet] = {}
        self._done: list[DefragBin] = []
        self._seen: set[Hashable] = set()
        self._seq = 0
        self._finished = False
        for stored in pending:
            self._resume(stored)

    def add(self, fragment: Fragment | tuple) -> None:
        """Take one fragment ``(item_id, identifier, count, index, arrival_at)``."""
        item_id, identifier, count, index, arrival_at = fragment
        if self._finished:
            raise RuntimeError("Defragmenter.add after finish")
        self._see(item_id)
        seq = self._next_seq()
        # 1-3. checks on the fragment alone
        reason = None
        if identifier is None:
            reason = INVALID_FRAGMENT_IDENTIFIER
        elif not _is_int(index) or index < 1:
            reason = INVALID_FRAGMENT_INDEX
        elif count is not None and (not _is_int(count) or count < 1):
            reason = INVALID_FRAGMENT_COUNT
        if reason is not None:
            self._fail_alone(reason, identifier, count, index, item_id, arrival_at, arrival_at)
            return
        index, count = int(index), None if count is None else int(count)
        entry = (index, seq, item_id, arrival_at)
        # 4. the identifier already conflicted in this run
        conflict = self._conflicts.get(identifier)
        if conflict is not None:
            conflict.entries.append(entry)
            conflict.last_at = arrival_at
            return
        # 5. a count that contradicts the open set's
        fragments = self._open.get(identifier)
        known = None if fragments is None else fragments.count
        if None not in (count, known) and count != known:
            fragments.entries.append(entry)
            fragments.last_at = arrival_at
            self._conflicts[identifier] = self._open.pop(identifier)
            return
        # 6-7. out of range, duplicate
        known = count if known is None else known
        if known is not None and index > known:
            reason = FRAGMENT_INDEX_OUT_OF_RANGE
        elif fragments is not None and index in fragments.indexes:
            reason = DUPLICATE_FRAGMENT_INDEX
        if reason is not None:
            self._fail_alone(reason, identifier, count, index, item_id, arrival_at, arrival_at)
            return
        # 8. join (or open) the set
        if fragments is None:
            fragments = _FragmentSet(_bin_id("set", identifier, item_id), identifier, arrival_at)
            self._open[identifier] = fragments
        if fragments.count is None and count is not None:
            fragments.count = count
            self._drop_out_of_range(fragments, arrival_at)
        fragments.entries.append(entry)
        fragments.indexes.add(index)
        fragments.last_at = arrival_at
        fragments.changed = True
        if fragments.count is not None and len(fragments.indexes) == fragments.count:
            del self._open[identifier]
            self._done.append(
                self._as_bin(fragments, MERGED, MAX_ENTRIES_THRESHOLD_REACHED, None, arrival_at)
            )

    def finish(self, now: Any) -> DefragResult:
        """End of the run's input: fail conflicting and timed-out sets, keep the rest.

        Args:
            now: the run's clock (same type as the arrival times).

        Returns:
            ``DefragResult``.
        """
        if self._finished:
            raise RuntimeError("Defragmenter.finish called twice")
        self._finished = True
        for fragments in self._conflicts.values():
            self._done.append(
                self._as_bin(fragments, FAILED, None, CONFLICTING_FRAGMENT_COUNT, fragments.last_at)
            )
        deadline = None if self._max_age is None else now - self._max_age
        pending = []
        for fragments in self._open.values():
            if deadline is not None and fragments.opened_at < deadline:
                self._done.append(
                    self._as_bin(fragments, FAILED, None, INCOMPLETE_AFTER_MAX_BIN_AGE, now)
                )
            else:
                pending.append(self._as_bin(fragments, PENDING, None, None, None))
        return DefragResult(self._done, pending)

    # -- internals

    def _see(self, item_id: Hashable) -> None:
        if item_id in self._seen:
            raise _setting_error(
                self.model_name,
                "id",
                "item ids must be unique; this one came twice",
                item_id,
                "defragment",
            )
        self._seen.add(item_id)

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _resume(self, stored: DefragBin) -> None:
        if stored.status != PENDING:
            raise _setting_error(
                self.model_name,
                "pending",
                "only pending sets can be resumed",
                stored.bin_id,
                "defragment",
            )
        if stored.identifier in self._open:
            raise _setting_error(
                self.model_name,
                "pending",
                "an identifier has one pending set at most; this one has two",
                stored.identifier,
                "defragment",
            )
        fragments = _FragmentSet(stored.bin_id, stored.identifier, stored.opened_at, stored.count)
        for member, index in zip(stored.members, stored.indexes, strict=True):
            self._see(member)
            fragments.entries.append((index, self._next_seq(), member, None))
            fragments.indexes.add(index)
        fragments.changed = False
        self._open[stored.identifier] = fragments

    def _fail_alone(
        self,
        reason: str,
        identifier: Hashable,
        count: Any,
        index: Any,
        item_id: Hashable,
        opened_at: Any,
        at: Any,
    ) -> None:
        self._done.append(
            DefragBin(
                _bin_id("fragment", identifier, item_id),
                identifier,
                count,
                [item_id],
                [index],
                opened_at,
                FAILED,
                failure_reason=reason,
                merged_at=at,
            )
        )

    def _drop_out_of_range(self, fragments: _FragmentSet, at: Any) -> None:
        """The set just learned its count: members with a larger index fail."""
        kept = []
        for index, seq, item_id, arrival_at in fragments.entries:
            if index <= fragments.count:
                kept.append((index, seq, item_id, arrival_at))
                continue
            opened_at = fragments.opened_at if arrival_at is None else arrival_at
            self._fail_alone(
                FRAGMENT_INDEX_OUT_OF_RANGE,
                fragments.identifier,
                None,
                index,
                item_id,
                opened_at,
                at,
            )
            fragments.indexes.discard(index)
        fragments.entries = kept

    def _as_bin(
        self,
        fragments: _FragmentSet,
        status: str,
        merge_reason: str | None,
        failure_reason: str | None,
        at: Any,
    ) -> DefragBin:
        ordered = sorted(fragments.entries, key=operator.itemgetter(0, 1))
        out = DefragBin(
            fragments.bin_id,
            fragments.identifier,
            None if failure_reason == CONFLICTING_FRAGMENT_COUNT else fragments.count,
            [e[2] for e in ordered],
            [e[0] for e in ordered],
            fragments.opened_at,
            status,
            merge_reason,
            failure_reason,
            at,
        )
        out.changed = fragments.changed or status != PENDING
        return out


def defragment_items(
    fragments: Iterable[Fragment | tuple],
    *,
    now: Any,
    max_bin_age: timedelta | None = None,
    pending: Iterable[DefragBin] = (),
    model_name: str = "defragment",
) -> DefragResult:
    """Defragment one run's fragments (sorted here by arrival, then id).

    Args:
        fragments: ``Fragment`` s or tuples ``(item_id, identifier, count, index,
            arrival_at)``.
        now: the run's clock.
        max_bin_age: incomplete sets older than this at ``now`` fail.
        pending: the previous run's pending sets.
        model_name: named in error messages.

    Returns:
        ``DefragResult``: merged and failed sets, and the pending ones.
    """
    return _defragment(
        fragments, now=now, max_bin_age=max_bin_age, pending=pending, model_name=model_name
    )


def _defragment(
    fragments: Iterable[Fragment | tuple],
    *,
    now: Any,
    max_bin_age: timedelta | None,
    pending: Iterable[DefragBin],
    model_name: str,
    max_age: Any = _UNSET,
) -> DefragResult:
    engine = Defragmenter(
        max_bin_age=max_bin_age, pending=pending, model_name=model_name, max_age=max_age
    )
    add = engine.add
    for fragment in sorted(fragments, key=operator.itemgetter(4, 0)):
        add(fragment)
    return engine.finish(now)


# ---------------------------------------------------------------------------------------
# Spark glue


def _micros(value: datetime | timedelta) -> int:
    """Epoch microseconds of a datetime (naive = local time, as PySpark reads it), or
    the microseconds of a timedelta."""
    if isinstance(value, timedelta):
        return value // _MICROSECOND
    if value.tzinfo is None:
        value = value.astimezone()
    return (value - _EPOCH) // _MICROSECOND


def _utc_timestamps(values: list[int | None]) -> pd.Series:
    import pandas as pd

    return pd.to_datetime(pd.Series(values, dtype="Int64"), unit="us", utc=True)


def _frame(rows: list[dict[str, Any]], schema: StructType) -> pd.DataFrame:
    """Output rows of a pandas task as a frame whose dtypes come from ``schema``, not
    from the values: a task with no rows must still convert (pandas reads an empty
    list as float64, which Arrow cannot turn into strings). Timestamps are epoch
    microseconds, as the engines keep them."""
    import pandas as pd

    columns = {}
    for field in schema.fields:
        values = [row[field.name] for row in rows]
        if isinstance(field.dataType, TimestampType):
            columns[field.name] = _utc_timestamps(values)
        elif isinstance(field.dataType, LongType):
            columns[field.name] = pd.Series(values, dtype="Int64" if field.nullable else "int64")
        elif isinstance(field.dataType, BooleanType):
            columns[field.name] = pd.Series(values, dtype=bool)
        else:
            columns[field.name] = pd.Series(values, dtype=object)
    return pd.DataFrame(columns)


def _check_columns(
    df: DataFrame, model_name: str, what: str, required: dict[str, str | None]
) -> None:
    for setting, column in required.items():
        if column is None:
            continue
        if not isinstance(column, str) or column not in df.columns:
            raise _setting_error(
                model_name,
                setting,
                f"no such column in the items, which have columns {df.columns}",
                column,
                what,
            )


def _check_type(
    df: DataFrame, model_name: str, what: str, setting: str, column: str, types: tuple, wanted: str
) -> None:
    actual = df.schema[column].dataType
    if not isinstance(actual, types):
        raise _setting_error(
            model_name,
            setting,
            f"column '{column}' must be {wanted}, it is {actual.simpleString()}",
            column,
            what,
        )


def _check_previous(
    previous: DataFrame | None, model_name: str, what: str, schema: StructType
) -> None:
    if previous is None:
        return
    if not isinstance(previous, DataFrame):
        raise _setting_error(
            model_name,
            "previous",
            "must be a DataFrame (the model's own table) or None",
            previous,
            what,
        )
    missing = [f.name for f in schema.fields if f.name not in previous.columns]
    if missing:
        raise _setting_error(
            model_name,
            "previous",
            f"is missing column(s) {missing}; pass the model's own table (dbt.this)",
            previous.columns,
            what,
        )


def _check_rows(
    df: DataFrame, model_name: str, what: str, checks: list[tuple[str, str, Any, str]]
) -> None:
    """One aggregation over the items; each check is ``(setting, column, bad, problem)``."""
    row = df.agg(
        *[F.count(F.when(bad, 1)).alias(f"c{i}") for i, (_, _, bad, _) in enumerate(checks)]
    ).first()
    for i, (setting, column, _, problem) in enumerate(checks):
        if row[f"c{i}"]:
            raise _setting_error(
                model_name, setting, f"{row[f'c{i}']} item(s) {problem}", column, what
            )


def _now_micros(now: datetime | None, model_name: str, what: str) -> int:
    if now is None:
        now = datetime.now(UTC)
    if not isinstance(now, datetime):
        raise _setting_error(model_name, "now", "must be a datetime or None", now, what)
    return _micros(now)


def _check_stream(
    items: DataFrame,
    model_name: str,
    what: str,
    *,
    id_column: str,
    arrival_column: str,
    previous: DataFrame | None,
    schema: StructType,
    now: datetime | None,
    max_bin_age: timedelta | None,
    more_rows: Sequence[tuple] = (),
) -> tuple[int, int | None]:
    """The checks bin_pack and defragment share, before any packing: the arrival
    column's type, the stored table, then one scan for null ids and arrivals (and
    ``more_rows``). Returns the run's clock and max bin age in microseconds."""
    _check_type(
        items,
        model_name,
        what,
        "arrival_column",
        arrival_column,
        (TimestampType, TimestampNTZType, DateType),
        "a timestamp or date",
    )
    _check_previous(previous, model_name, what, schema)
    now_us = _now_micros(now, model_name, what)
    max_age = None if max_bin_age is None else _micros(max_bin_age)
    _check_rows(
        items,
        model_name,
        what,
        [
            ("id_column", id_column, F.col(id_column).isNull(), "have a null id"),
            *more_rows,
            (
                "arrival_column",
                arrival_column,
                F.col(arrival_column).isNull(),
                "have a null arrival",
            ),
        ],
    )
    return now_us, max_age


def bin_pack(
    items: DataFrame,
    *,
    id_column: str,
    size_column: str,
    arrival_column: str,
    correlation_column: str | None = None,
    schema_column: str | None = None,
    min_entries: int = MIN_ENTRIES_DEFAULT,
    max_entries: int = MAX_ENTRIES_DEFAULT,
    min_bytes: int = MIN_BYTES_DEFAULT,
    max_bytes: int | None = MAX_BYTES_DEFAULT,
    max_bin_age: timedelta | None = MAX_BIN_AGE_DEFAULT,
    max_bins: int | None = MAX_BINS_DEFAULT,
    max_bins_scope: str = MAX_BINS_SCOPE_DEFAULT,
    now: datetime | None = None,
    previous: DataFrame | None = None,
    model_name: str = "bin_packing",
) -> DataFrame:
    """Streaming bin packing of an items relation; the rows to merge by ``bin_id``.

    Items already a member of a bin in ``previous`` are skipped (a left anti join
    on the exploded members), and the pending bins of ``previous`` are reopened
    first, so re-running never emits an item twice. Groups are packed in parallel,
    one ``applyInPandas`` call per (schema, correlation) group, except with
    ``max_bins`` and ``max_bins_scope='global'``: then the groups compete for the
    open bins and are packed together in a single task.

    Args:
        items: one row per item.
        id_column: item id (cast to string; also the tie-breaker for equal arrivals).
        size_column: size in bytes, an integer column, no nulls, >= 0.
        arrival_column: arrival time (timestamp or date), no nulls.
        correlation_column: items are binned only with items of equal value.
        schema_column: likewise (e.g. a schema fingerprint).
        min_entries, max_entries, min_bytes, max_bytes, max_bin_age, max_bins,
            max_bins_scope: see ``BinPackingSettings``.
        now: the run's clock (default: the current time); naive = local time.
        previous: the model's own table (``dbt.this``) on incremental runs, else None.
        model_name: named in error messages.

    Returns:
        ``BIN_SCHEMA`` rows: every bin merged in this run and every new or grown
        pending bin; merge them into the table by ``bin_id``.

    Raises:
        BinPackingError: bad settings, missing or mistyped columns, null ids, sizes
            or arrivals, negative sizes (checked before the packing runs).

    Examples:
        >>> def model(dbt, session):
        ...     dbt.config(materialized="incremental", unique_key="bin_id")
        ...     return bin_pack(dbt.ref("files"), id_column="file_id",
        ...                     size_column="size_bytes", arrival_column="arrived_at",
        ...                     max_bytes=128 * 2**20,
        ...                     previous=dbt.this if dbt.is_incremental else None)
    """
    what = "bin packing"
    settings = BinPackingSettings(
        min_entries=min_entries,
        max_entries=max_entries,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        max_bin_age=max_bin_age,
        max_bins=max_bins,
        max_bins_scope=max_bins_scope,
    )
    settings.validate(model_name)
    if not isinstance(items, DataFrame):
        raise _setting_error(model_name, "items", "must be a pyspark DataFrame", items, what)
    _check_columns(
        items,
        model_name,
        what,
        {
            "id_column": id_column,
            "size_column": size_column,
            "arrival_column": arrival_column,
            "correlation_column": correlation_column,
            "schema_column": schema_column,
        },
    )
    _check_type(items, model_name, what, "size_column", size_column, (IntegralType,), "an integer")
    now_us, max_age = _check_stream(
        items,
        model_name,
        what,
        id_column=id_column,
        arrival_column=arrival_column,
        previous=previous,
        schema=BIN_SCHEMA,
        now=now,
        max_bin_age=max_bin_age,
        more_rows=[
            ("size_column", size_column, F.col(size_column).isNull(), "have a null size"),
            ("size_column", size_column, F.col(size_column) < 0, "have a negative size"),
        ],
    )

    def key(column: str | None) -> Any:
        return F.lit(None).cast("string") if column is None else F.col(column).cast("string")

    new = items.select(
        F.col(id_column).cast("string").alias("_id"),
        F.col(size_column).cast("long").alias("_size"),
        F.expr(f"unix_micros(cast(`{arrival_column}` as timestamp))").alias("_arrival"),
        key(schema_column).alias("_schema"),
        key(correlation_column).alias("_corr"),
    )
    pending_cols = ["bin_id", "_schema", "_corr", "_opened", "members", "bytes", "entries"]
    if previous is None:
        pending = new.sparkSession.createDataFrame(
            [],
            "bin_id string, _schema string, _corr string, _opened long, "
            "members array<string>, bytes long, entries long",
        )
    else:
        consumed = previous.select(F.explode("members").alias("_id"))
        new = new.join(consumed, "_id", "left_anti")
        pending = previous.where(F.col("status") == PENDING).select(
            "bin_id",
            F.col("schema_value").alias("_schema"),
            F.col("correlation_value").alias("_corr"),
            F.expr("unix_micros(opened_at)").alias("_opened"),
            "members",
            F.col("bytes").cast("long"),
            F.col("entries").cast("long"),
        )
    pending = pending.select(*pending_cols)
    coupled = max_bins is not None and max_bins_scope == "global"
    keys = ["_task"] if coupled else ["_schema", "_corr"]
    if coupled:
        new, pending = new.withColumn("_task", F.lit(0)), pending.withColumn("_task", F.lit(0))
    logger.info(
        "bin_pack %s: %s", model_name, "one task (global max_bins)" if coupled else "per group"
    )
    run = functools.partial(_pack_frames, settings, max_age, now_us, model_name)
    return new.groupBy(*keys).cogroup(pending.groupBy(*keys)).applyInPandas(run, BIN_SCHEMA)


def _pack_frames(
    settings: BinPackingSettings,
    max_age: int | None,
    now_us: int,
    model_name: str,
    items_pdf: pd.DataFrame,
    pending_pdf: pd.DataFrame,
) -> pd.DataFrame:
    """One task of ``bin_pack``: pandas in, ``BIN_SCHEMA`` pandas out."""

    stored = sorted(
        zip(
            pending_pdf["_opened"].tolist(),
            pending_pdf["members"].tolist(),
            pending_pdf["bin_id"].tolist(),
            pending_pdf["_schema"].tolist(),
            pending_pdf["_corr"].tolist(),
            pending_pdf["bytes"].tolist(),
            pending_pdf["entries"].tolist(),
            strict=True,
        ),
        key=lambda r: (r[0], r[1][0]),
    )
    pending = [
        Bin(bin_id, schema, corr, opened, [str(m) for m in members], size, entries)
        for opened, members, bin_id, schema, corr, size, entries in stored
    ]
    items = zip(
        items_pdf["_id"].tolist(),
        items_pdf["_size"].tolist(),
        items_pdf["_arrival"].tolist(),
        items_pdf["_corr"].tolist(),
        items_pdf["_schema"].tolist(),
        strict=True,
    )
    result = _pack(
        items, settings, now=now_us, pending=pending, model_name=model_name, max_age=max_age
    )
    bins = result.changed
    return _frame([b.as_dict() for b in bins], BIN_SCHEMA)


def plan_offline(
    items: DataFrame,
    *,
    id_column: str,
    size_column: str,
    correlation_column: str | None = None,
    schema_column: str | None = None,
    max_bytes: int,
    max_entries: int | None = None,
    strategy: str = OFFLINE_STRATEGY_DEFAULT,
    model_name: str = "bin_packing",
) -> DataFrame:
    """Offline plan of a known set, one ``applyInPandas`` call per group.

    Args:
        items: one row per item (e.g. a table's ``files`` metadata table).
        id_column: item id (cast to string).
        size_column: size in bytes, an integer column, no nulls, >= 0.
        correlation_column: items are binned only with items of equal value.
        schema_column: likewise.
        max_bytes: capacity of a bin (required).
        max_entries: items per bin at most (None: no limit).
        strategy: ``'first_fit_decreasing'`` (default) or ``'best_fit_decreasing'``.
        model_name: named in error messages.

    Returns:
        ``OFFLINE_SCHEMA`` rows, one per planned bin; see ``offline_report``.
    """
    what = "bin packing"
    validate_offline(max_bytes, max_entries, strategy, model_name)
    if not isinstance(items, DataFrame):
        raise _setting_error(model_name, "items", "must be a pyspark DataFrame", items, what)
    _check_columns(
        items,
        model_name,
        what,
        {
            "id_column": id_column,
            "size_column": size_column,
            "correlation_column": correlation_column,
            "schema_column": schema_column,
        },
    )
    _check_type(items, model_name, what, "size_column", size_column, (IntegralType,), "an integer")
    _check_rows(
        items,
        model_name,
        what,
        [
            ("id_column", id_column, F.col(id_column).isNull(), "have a null id"),
            ("size_column", size_column, F.col(size_column).isNull(), "have a null size"),
            ("size_column", size_column, F.col(size_column) < 0, "have a negative size"),
        ],
    )

    def key(column: str | None) -> Any:
        return F.lit(None).cast("string") if column is None else F.col(column).cast("string")

    frame = items.select(
        F.col(id_column).cast("string").alias("_id"),
        F.col(size_column).cast("long").alias("_size"),
        key(schema_column).alias("_schema"),
        key(correlation_column).alias("_corr"),
    )
    run = functools.partial(_plan_frame, max_bytes, max_entries, strategy, model_name)
    return frame.groupBy("_schema", "_corr").applyInPandas(run, OFFLINE_SCHEMA)


def _plan_frame(
    max_bytes: int, max_entries: int | None, strategy: str, model_name: str, pdf: pd.DataFrame
) -> pd.DataFrame:
    """One group of ``plan_offline``: pandas in, ``OFFLINE_SCHEMA`` pandas out."""

    plan = plan_offline_items(
        zip(
            pdf["_id"].tolist(),
            pdf["_size"].tolist(),
            pdf["_corr"].tolist(),
            pdf["_schema"].tolist(),
            strict=True,
        ),
        max_bytes=max_bytes,
        max_entries=max_entries,
        strategy=strategy,
        model_name=model_name,
    )
    bins = plan.bins
    return _frame([b.as_dict() for b in bins], OFFLINE_SCHEMA)


def offline_report(
    bins: DataFrame,
    *,
    max_bytes: int,
    max_entries: int | None = None,
    model_name: str = "bin_packing",
) -> DataFrame:
    """Bins against the lower bound, per group and in total, from ``plan_offline``'s bins.

    Args:
        bins: the output of ``plan_offline`` (same ``max_bytes`` / ``max_entries``).
        max_bytes: as given to ``plan_offline``.
        max_entries: as given to ``plan_offline``.
        model_name: named in error messages.

    Returns:
        ``OFFLINE_REPORT_SCHEMA`` rows: one per group (``level='group'``) and one
        ``level='total'`` row (sums; groups never share a bin). The lower bound is
        ``GroupReport``'s.
    """
    validate_offline(max_bytes, max_entries, OFFLINE_STRATEGY_DEFAULT, model_name)
    normal = ~F.col("is_oversized")
    per_group = bins.groupBy("schema_value", "correlation_value").agg(
        F.sum("entries").alias("items"),
        F.sum("bytes").alias("bytes"),
        F.count(F.when(F.col("is_oversized"), 1)).alias("oversized"),
        F.count(F.lit(1)).alias("bins"),
        F.coalesce(F.sum(F.when(normal, F.col("bytes"))), F.lit(0)).alias("_normal_bytes"),
        F.coalesce(F.sum(F.when(normal, F.col("entries"))), F.lit(0)).alias("_normal_items"),
    )
    bound = F.greatest(
        F.lit(1),
        F.expr(f"(_normal_bytes + {max_bytes - 1}) div {max_bytes}"),
        *(
            []
            if max_entries is None
            else [F.expr(f"(_normal_items + {max_entries - 1}) div {max_entries}")]
        ),
    )
    lower = F.col("oversized") + F.when(F.col("_normal_items") > 0, bound).otherwise(F.lit(0))
    groups = per_group.select(
        F.lit("group").alias("level"),
        "schema_value",
        "correlation_value",
        F.col("items").cast("long"),
        F.col("bytes").cast("long"),
        F.col("oversized").cast("long"),
        F.col("bins").cast("long"),
        lower.cast("long").alias("lower_bound"),
    )
    total = groups.agg(
        F.lit("total").alias("level"),
        F.lit(None).cast("string").alias("schema_value"),
        F.lit(None).cast("string").alias("correlation_value"),
        *[
            F.coalesce(F.sum(c), F.lit(0)).cast("long").alias(c)
            for c in ("items", "bytes", "oversized", "bins", "lower_bound")
        ],
    )
    both = groups.unionByName(total)
    return both.withColumn(
        "bins_over_lower_bound",
        F.when(F.col("lower_bound") > 0, F.col("bins") / F.col("lower_bound")),
    )


def defragment(
    items: DataFrame,
    *,
    id_column: str,
    arrival_column: str,
    identifier_column: str = "fragment_identifier",
    count_column: str = "fragment_count",
    index_column: str = "fragment_index",
    max_bin_age: timedelta | None = None,
    now: datetime | None = None,
    previous: DataFrame | None = None,
    model_name: str = "defragment",
    size_column: str | None = None,
) -> DataFrame:
    """Defragment an items relation, one ``applyInPandas`` call per identifier.

    Semantics as ``Defragmenter``. Fragments already a member of a set in
    ``previous`` are skipped and its pending sets are resumed.

    Args:
        items: one row per fragment.
        id_column: fragment id (cast to string), no nulls.
        arrival_column: arrival time (timestamp or date), no nulls.
        identifier_column: NiFi's ``fragment.identifier`` (cast to string).
        count_column: ``fragment.count``, an integer column (nulls allowed).
        index_column: ``fragment.index``, an integer column, 1-based.
        max_bin_age: incomplete sets older than this at ``now`` fail.
        now: the run's clock (default: the current time); naive = local time.
        previous: the model's own table (``dbt.this``) on incremental runs, else None.
        model_name: named in error messages.
        size_column: optional fragment size in bytes (an integer column); adds a
            ``bytes`` column after ``entries``: the sum over the set's members.

    Returns:
        ``DEFRAGMENT_SCHEMA`` rows: sets merged or failed in this run (a failure is
        a row with ``status='failed'``, its ``failure_reason`` and its members) and
        new or grown pending sets; merge them into the table by ``bin_id``.
    """
    what = "defragment"
    _validate_max_bin_age(max_bin_age, model_name, what)
    if not isinstance(items, DataFrame):
        raise _setting_error(model_name, "items", "must be a pyspark DataFrame", items, what)
    _check_columns(
        items,
        model_name,
        what,
        {
            "id_column": id_column,
            "arrival_column": arrival_column,
            "identifier_column": identifier_column,
            "count_column": count_column,
            "index_column": index_column,
            "size_column": size_column,
        },
    )
    sized = [("size_column", size_column)] if size_column is not None else []
    for setting, column in [("count_column", count_column), ("index_column", index_column), *sized]:
        _check_type(items, model_name, what, setting, column, (IntegralType,), "an integer")
    now_us, max_age = _check_stream(
        items,
        model_name,
        what,
        id_column=id_column,
        arrival_column=arrival_column,
        previous=previous,
        schema=DEFRAGMENT_SCHEMA,
        now=now,
        max_bin_age=max_bin_age,
    )
    new = items.select(
        F.col(id_column).cast("string").alias("_id"),
        F.col(identifier_column).cast("string").alias("_identifier"),
        F.col(count_column).cast("long").alias("_count"),
        F.col(index_column).cast("long").alias("_index"),
        F.expr(f"unix_micros(cast(`{arrival_column}` as timestamp))").alias("_arrival"),
    )
    if previous is None:
        pending = new.sparkSession.createDataFrame(
            [],
            "bin_id string, _identifier string, fragment_count long, members array<string>, "
            "member_indexes array<long>, _opened long",
        )
    else:
        consumed = previous.select(F.explode("members").alias("_id"))
        new = new.join(consumed, "_id", "left_anti")
        pending = previous.where(F.col("status") == PENDING).select(
            "bin_id",
            F.col("fragment_identifier").alias("_identifier"),
            F.col("fragment_count").cast("long"),
            "members",
            F.col("member_indexes").cast("array<long>"),
            F.expr("unix_micros(opened_at)").alias("_opened"),
        )
    run = functools.partial(_defragment_frames, max_age, now_us, model_name)
    sets = (
        new.groupBy("_identifier")
        .cogroup(pending.groupBy("_identifier"))
        .applyInPandas(run, DEFRAGMENT_SCHEMA)
    )
    if size_column is None:
        return sets
    # the sets are read twice below: compute them once
    sets = materialize(sets)
    # members of resumed sets came in earlier runs: sizes come from all of ``items``
    sizes = items.select(
        F.col(id_column).cast("string").alias("_member"),
        F.col(size_column).cast("long").alias("_size"),
    )
    totals = (
        sets.select("bin_id", F.explode("members").alias("_member"))
        .join(sizes, "_member")
        .groupBy("bin_id")
        .agg(F.sum("_size").alias("bytes"))
    )
    columns = [F.col(f"sets.{name}") for name in DEFRAGMENT_SCHEMA.fieldNames()]
    at = DEFRAGMENT_SCHEMA.fieldNames().index("entries") + 1
    columns.insert(at, F.coalesce(F.col("totals.bytes"), F.lit(0)).cast("long").alias("bytes"))
    return sets.alias("sets").join(totals.alias("totals"), "bin_id", "left").select(*columns)


def _optional_ints(values: list) -> list[int | None]:
    """Integers from an Arrow-converted column (float with NaN when it has nulls)."""
    return [None if v is None or v != v else int(v) for v in values]


def _defragment_frames(
    max_age: int | None,
    now_us: int,
    model_name: str,
    items_pdf: pd.DataFrame,
    pending_pdf: pd.DataFrame,
) -> pd.DataFrame:
    """One task of ``defragment``: pandas in, ``DEFRAGMENT_SCHEMA`` pandas out."""

    stored = sorted(
        zip(
            pending_pdf["_opened"].tolist(),
            pending_pdf["bin_id"].tolist(),
            pending_pdf["_identifier"].tolist(),
            _optional_ints(pending_pdf["fragment_count"].tolist()),
            pending_pdf["members"].tolist(),
            pending_pdf["member_indexes"].tolist(),
            strict=True,
        ),
        key=lambda r: (r[0], r[1]),
    )
    pending = [
        DefragBin(
            bin_id, identifier, count, [str(m) for m in members], [int(i) for i in indexes], opened
        )
        for opened, bin_id, identifier, count, members, indexes in stored
    ]
    fragments = zip(
        items_pdf["_id"].tolist(),
        items_pdf["_identifier"].tolist(),
        _optional_ints(items_pdf["_count"].tolist()),
        _optional_ints(items_pdf["_index"].tolist()),
        items_pdf["_arrival"].tolist(),
        strict=True,
    )
    result = _defragment(
        fragments,
        now=now_us,
        max_bin_age=None,
        pending=pending,
        model_name=model_name,
        max_age=max_age,
    )
    sets = result.changed
    return _frame([b.as_dict() for b in sets], DEFRAGMENT_SCHEMA)
