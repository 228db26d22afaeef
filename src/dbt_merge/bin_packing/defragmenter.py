"""Defragment (``Defragmenter``, ``defragment_items``; Spark: ``spark.defragment``),
NiFi MergeContent's Defragment strategy: fragments are binned by fragment
identifier; a set holding ``count`` distinct indexes ``1..count`` (or ``0..count-1``
with ``fragment_index_base=0``, as NiFi's record processors number them) is merged in
index order. Broken sets fail with a reason; nothing is dropped."""

from __future__ import annotations

import operator
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NamedTuple

from dbt_merge.bin_packing.settings import (
    FAILED,
    FRAGMENT_INDEX_BASE_DEFAULT,
    MAX_ENTRIES_THRESHOLD_REACHED,
    MERGED,
    PENDING,
    _bin_id,
    _is_int,
    _setting_error,
    _validate_fragment_index_base,
    _validate_max_bin_age,
)
from dbt_merge.bin_packing.stream import _UNSET, StreamEngine

# -- failure reasons (a set that cannot merge is a row of its own, nothing is dropped)
CONFLICTING_FRAGMENT_COUNT = "CONFLICTING_FRAGMENT_COUNT"
DUPLICATE_FRAGMENT_INDEX = "DUPLICATE_FRAGMENT_INDEX"
FRAGMENT_INDEX_OUT_OF_RANGE = "FRAGMENT_INDEX_OUT_OF_RANGE"
INVALID_FRAGMENT_COUNT = "INVALID_FRAGMENT_COUNT"
INVALID_FRAGMENT_INDEX = "INVALID_FRAGMENT_INDEX"
INVALID_FRAGMENT_IDENTIFIER = "INVALID_FRAGMENT_IDENTIFIER"
INCOMPLETE_AFTER_MAX_BIN_AGE = "INCOMPLETE_AFTER_MAX_BIN_AGE"


class Fragment(NamedTuple):
    """One fragment: NiFi's ``fragment.identifier``, ``fragment.count`` (may be None on
    all but one fragment of a set) and ``fragment.index`` (from the defragmenter's
    ``fragment_index_base``: 1 or 0)."""

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


class Defragmenter(StreamEngine):
    """Streaming defragment: NiFi's Defragment merge strategy, per fragment identifier.

    Each fragment, in arrival order (ties by id), is checked in this order:

    1. null identifier -> fails alone, ``INVALID_FRAGMENT_IDENTIFIER``;
    2. index null, not an integer or < ``fragment_index_base`` -> fails alone,
       ``INVALID_FRAGMENT_INDEX`` (indexes start at 1 by default, as NiFi
       MergeContent's split processors write them; at 0 with
       ``fragment_index_base=0``, as NiFi's record processors write them for
       MergeRecord);
    3. count not an integer or < 1 -> fails alone, ``INVALID_FRAGMENT_COUNT``; a null
       count is fine as long as some fragment of the set carries it (NiFi);
    4. its identifier already conflicted in this run -> joins that failed set;
    5. count differs from the open set's count -> the open set and this fragment
       fail together, ``CONFLICTING_FRAGMENT_COUNT``, and so does every later
       fragment of the identifier in this run;
    6. index past the last one (``count``, or ``count - 1`` with base 0) -> fails
       alone, ``FRAGMENT_INDEX_OUT_OF_RANGE`` (NiFi does not check the range), so a
       set numbered from the other base never merges by mistake; members already in
       the set when its count becomes known fail the same way;
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
        fragment_index_base: the first index of a set, 1 (default: ``1..count``, NiFi
            MergeContent) or 0 (``0..count-1``, NiFi MergeRecord).
    """

    ARRIVAL = 4
    WHAT = "defragment"

    def __init__(
        self,
        *,
        max_bin_age: timedelta | None = None,
        pending: Iterable[DefragBin] = (),
        model_name: str = "defragment",
        max_age: Any = _UNSET,
        fragment_index_base: int = FRAGMENT_INDEX_BASE_DEFAULT,
    ) -> None:
        _validate_max_bin_age(max_bin_age, model_name, "defragment")
        _validate_fragment_index_base(fragment_index_base, model_name)
        super().__init__(model_name, max_bin_age, max_age)
        self._base = fragment_index_base
        self._open: dict[Hashable, _FragmentSet] = {}
        self._conflicts: dict[Hashable, _FragmentSet] = {}
        self._done: list[DefragBin] = []
        self._seq = 0
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
        elif not _is_int(index) or index < self._base:
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
        if known is not None and index > self._last(known):
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
        deadline = self._close(now)
        for fragments in self._conflicts.values():
            self._done.append(
                self._as_bin(fragments, FAILED, None, CONFLICTING_FRAGMENT_COUNT, fragments.last_at)
            )
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

    def _last(self, count: int) -> int:
        """The last index of a set of ``count`` fragments."""
        return count - 1 + self._base

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
            if index <= self._last(fragments.count):
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
    fragment_index_base: int = FRAGMENT_INDEX_BASE_DEFAULT,
) -> DefragResult:
    """Defragment one run's fragments (sorted here by arrival, then id).

    Args:
        fragments: ``Fragment`` s or tuples ``(item_id, identifier, count, index,
            arrival_at)``.
        now: the run's clock.
        max_bin_age: incomplete sets older than this at ``now`` fail.
        pending: the previous run's pending sets.
        model_name: named in error messages.
        fragment_index_base: 1 (default) or 0; see ``Defragmenter``.

    Returns:
        ``DefragResult``: merged and failed sets, and the pending ones.
    """
    engine = Defragmenter(
        max_bin_age=max_bin_age,
        pending=pending,
        model_name=model_name,
        fragment_index_base=fragment_index_base,
    )
    return engine.run(fragments, now)
