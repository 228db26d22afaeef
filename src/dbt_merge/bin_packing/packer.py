"""Streaming bin packing (``BinPacker``, ``pack_items``; Spark: ``spark.bin_pack``).

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
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from dbt_merge.bin_packing.first_fit import _CLOSED, _FirstFitIndex
from dbt_merge.bin_packing.settings import (
    BIN_MANAGER_FULL,
    MAX_BYTES_THRESHOLD_REACHED,
    MAX_ENTRIES_THRESHOLD_REACHED,
    MERGED,
    MIN_THRESHOLDS_REACHED,
    PENDING,
    TIMEOUT,
    BinPackingSettings,
    _bin_id,
    _is_int,
    _setting_error,
)
from dbt_merge.bin_packing.stream import _UNSET, StreamEngine


class Item(NamedTuple):
    """One item to pack. ``(schema, correlation)`` is its group; None is a value."""

    item_id: Hashable
    size: int
    arrival_at: Any
    correlation: Hashable = None
    schema: Hashable = None


class Bin:
    """A bin of ``BinPacker``: open, pending (open at the end of a run) or merged.

    To resume a pending bin in the next run, pass it (or a ``Bin`` rebuilt from the
    stored row) in ``BinPacker(pending=...)``.
    """

    __slots__ = (
        "_seq",
        "_slot",
        "bin_id",
        "bytes",
        "changed",
        "correlation",
        "entries",
        "members",
        "merge_reason",
        "merged_at",
        "opened_at",
        "schema",
    )

    def __init__(
        self,
        bin_id: str | None,
        schema: Hashable,
        correlation: Hashable,
        opened_at: Any,
        members: Sequence[Hashable] = (),
        bytes: int = 0,
        entries: int | None = None,
        merge_reason: str | None = None,
        merged_at: Any = None,
    ) -> None:
        self.bin_id = bin_id
        self.schema = schema
        self.correlation = correlation
        self.opened_at = opened_at
        self.members = list(members)
        self.bytes = bytes
        self.entries = len(self.members) if entries is None else entries
        self.merge_reason = merge_reason
        self.merged_at = merged_at
        self.changed = True
        self._seq = 0
        self._slot = -1

    @property
    def status(self) -> str:
        """``'merged'`` once a merge reason is set, else ``'pending'``."""
        return PENDING if self.merge_reason is None else MERGED

    def as_dict(self) -> dict[str, Any]:
        """The bin as an output row (``BIN_SCHEMA`` names)."""
        return {
            **group_bin_row(self),
            "status": self.status,
            "merge_reason": self.merge_reason,
            "opened_at": self.opened_at,
            "merged_at": self.merged_at,
        }

    def __repr__(self) -> str:
        return (
            f"Bin({self.bin_id!r}, {self.schema!r}, {self.correlation!r}, "
            f"members={self.members!r}, bytes={self.bytes}, {self.status}, "
            f"{self.merge_reason}, opened_at={self.opened_at!r}, merged_at={self.merged_at!r})"
        )


def group_bin_row(b: Any) -> dict[str, Any]:
    """The columns a bin of a (schema, correlation) group begins its output row with:
    its id, group and contents. Shared by ``Bin`` and the offline ``PlannedBin``."""
    return {
        "bin_id": b.bin_id,
        "schema_value": b.schema,
        "correlation_value": b.correlation,
        "entries": b.entries,
        "bytes": b.bytes,
        "members": list(b.members),
    }


@dataclass
class PackResult:
    """What one run of ``BinPacker`` produced.

    Attributes:
        merged: bins emitted in this run, in emission order.
        pending: bins still open, in creation order; the next run resumes them.
    """

    merged: list[Bin]
    pending: list[Bin]

    @property
    def changed(self) -> list[Bin]:
        """Rows to merge into the stored table: every merged bin and every new or
        grown pending bin."""
        return self.merged + [b for b in self.pending if b.changed]


class _Group:
    __slots__ = ("heap", "index", "open", "slots")

    def __init__(self) -> None:
        self.index = _FirstFitIndex()
        self.slots: list[Bin] = []
        self.heap: list[tuple[Any, int, Bin]] = []
        self.open = 0


class BinPacker(StreamEngine):
    """NiFi-style streaming bin packing over items in arrival order.

    Feed items with ``add`` in arrival order (ties by item id; ``run`` and
    ``pack_items`` sort for you), then call ``finish(now)`` once. Finding the first
    bin with room is a segment-tree search, O(log bins) per item, however many bins a
    group holds open. Open-bin counts and ages use heaps with lazy deletion.

    Args:
        settings: the thresholds (validated here).
        pending: pending bins of the previous run, in their creation order; they are
            reopened before any new item.
        model_name: named in error messages.
        max_age: ``max_bin_age`` in the unit of the arrival times, when they are not
            datetimes (e.g. microseconds as int); defaults to ``settings.max_bin_age``.

    Raises:
        BinPackingError: bad settings, a negative or non-integer size, or an item id
            seen twice (including the members of the pending bins).
    """

    ARRIVAL = 2
    WHAT = "bin packing"

    def __init__(
        self,
        settings: BinPackingSettings | None = None,
        *,
        pending: Iterable[Bin] = (),
        model_name: str = "bin_packing",
        max_age: Any = _UNSET,
    ) -> None:
        settings = settings if settings is not None else BinPackingSettings()
        settings.validate(model_name)
        super().__init__(model_name, settings.max_bin_age, max_age)
        self.settings = settings
        self._bounded = settings.max_bytes is not None
        self._cap: float = settings.max_bytes if self._bounded else math.inf
        self._max_entries = settings.max_entries
        self._max_bins = settings.max_bins
        self._global_scope = settings.max_bins_scope == "global"
        self._groups: dict[tuple[Hashable, Hashable], _Group] = {}
        self._age_heap: list[tuple[Any, int, Bin]] = []
        self._global_heap: list[tuple[Any, int, Bin]] = []
        self._global_open = 0
        self._seq = 0
        self._merged: list[Bin] = []
        for stored in pending:
            self._resume(stored)

    # -- public

    def add(self, item: Item | tuple) -> None:
        """Place one item (``(item_id, size, arrival_at, correlation, schema)``)."""
        item_id, size, arrival_at, correlation, schema = item
        if self._finished:
            raise RuntimeError("BinPacker.add after finish")
        if (type(size) is not int and not _is_int(size)) or size < 0:
            raise _setting_error(
                self.model_name, "size", f"item {item_id!r} needs a size >= 0 in bytes", size
            )
        self._see(item_id)
        if self._max_age is not None:
            self._expire(arrival_at)
        key = (schema, correlation)
        if size > self._cap:
            solo = Bin(None, schema, correlation, arrival_at, [item_id], size, 1)
            solo.bin_id = _bin_id("bin", schema, correlation, item_id)
            solo.merge_reason, solo.merged_at = MAX_BYTES_THRESHOLD_REACHED, arrival_at
            self._merged.append(solo)
            return
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group()
        slot = group.index.first_at_least(size)
        if slot < 0:
            target = self._open_bin(group, key, arrival_at, item_id)
        else:
            target = group.slots[slot]
        target.members.append(item_id)
        target.bytes += size
        target.entries += 1
        target.changed = True
        if target.bytes >= self._cap:
            self._emit(group, target, MAX_BYTES_THRESHOLD_REACHED, arrival_at)
        elif target.entries >= self._max_entries:
            self._emit(group, target, MAX_ENTRIES_THRESHOLD_REACHED, arrival_at)
        elif self._bounded:
            group.index.set(target._slot, self._cap - target.bytes)

    def finish(self, now: Any) -> PackResult:
        """End of the run's input: merge what is old or big enough, keep the rest.

        Args:
            now: the run's clock (same type as the arrival times).

        Returns:
            ``PackResult``: bins merged in this run, and the pending bins.
        """
        deadline = self._close(now)
        settings = self.settings
        still_open = sorted(
            (b for g in self._groups.values() for b in g.slots if b.merge_reason is None),
            key=operator.attrgetter("_seq"),
        )
        pending = []
        for b in still_open:
            group = self._groups[(b.schema, b.correlation)]
            if deadline is not None and b.opened_at < deadline:
                self._emit(group, b, TIMEOUT, now)
            elif b.bytes >= settings.min_bytes and b.entries >= settings.min_entries:
                self._emit(group, b, MIN_THRESHOLDS_REACHED, now)
            else:
                pending.append(b)
        return PackResult(self._merged, pending)

    # -- internals

    def _resume(self, stored: Bin) -> None:
        if stored.merge_reason is not None:
            raise _setting_error(
                self.model_name, "pending", "only pending bins can be resumed", stored.bin_id
            )
        if not stored.members:
            raise _setting_error(self.model_name, "pending", "a bin needs members", stored.bin_id)
        resumed = Bin(
            stored.bin_id,
            stored.schema,
            stored.correlation,
            stored.opened_at,
            stored.members,
            stored.bytes,
            stored.entries,
        )
        if resumed.bin_id is None:
            resumed.bin_id = _bin_id("bin", resumed.schema, resumed.correlation, resumed.members[0])
        resumed.changed = False
        for member in resumed.members:
            self._see(member)
        key = (resumed.schema, resumed.correlation)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group()
        self._register(group, resumed)
        if resumed.entries >= self._max_entries:
            group.index.set(resumed._slot, _CLOSED)  # settings were lowered: accepts nothing

    def _register(self, group: _Group, b: Bin) -> None:
        b._seq = self._seq
        self._seq += 1
        b._slot = group.index.append(self._cap - b.bytes if self._bounded else self._cap)
        group.slots.append(b)
        group.open += 1
        self._global_open += 1
        entry = (b.opened_at, b._seq, b)
        if self._max_age is not None:
            heapq.heappush(self._age_heap, entry)
        if self._max_bins is not None:
            heapq.heappush(self._global_heap if self._global_scope else group.heap, entry)

    def _open_bin(
        self, group: _Group, key: tuple[Hashable, Hashable], arrival_at: Any, item_id: Hashable
    ) -> Bin:
        if self._max_bins is not None:
            heap = self._global_heap if self._global_scope else group.heap
            while (self._global_open if self._global_scope else group.open) >= self._max_bins:
                _, _, oldest = heapq.heappop(heap)
                if oldest.merge_reason is None:
                    owner = self._groups[(oldest.schema, oldest.correlation)]
                    self._emit(owner, oldest, BIN_MANAGER_FULL, arrival_at)
        schema, correlation = key
        b = Bin(_bin_id("bin", schema, correlation, item_id), schema, correlation, arrival_at)
        self._register(group, b)
        return b

    def _expire(self, arrival_at: Any) -> None:
        heap = self._age_heap
        deadline = arrival_at - self._max_age
        while heap and heap[0][0] < deadline:
            _, _, b = heapq.heappop(heap)
            if b.merge_reason is None:
                self._emit(self._groups[(b.schema, b.correlation)], b, TIMEOUT, arrival_at)

    def _emit(self, group: _Group, b: Bin, reason: str, at: Any) -> None:
        b.merge_reason, b.merged_at, b.changed = reason, at, True
        group.index.set(b._slot, _CLOSED)
        group.open -= 1
        self._global_open -= 1
        self._merged.append(b)


def pack_items(
    items: Iterable[Item | tuple],
    settings: BinPackingSettings | None = None,
    *,
    now: Any,
    pending: Iterable[Bin] = (),
    model_name: str = "bin_packing",
) -> PackResult:
    """Pack one run's items (sorted here by arrival, then id) after the pending bins.

    Args:
        items: ``Item`` s or tuples ``(item_id, size, arrival_at, correlation, schema)``.
        settings: the thresholds; defaults to ``BinPackingSettings()``.
        now: the run's clock, compared with ``max_bin_age`` at the end of the input.
        pending: the previous run's pending bins, in creation order.
        model_name: named in error messages.

    Returns:
        ``PackResult`` with the merged and the pending bins.

    Examples:
        >>> s = BinPackingSettings(max_entries=2)
        >>> r = pack_items([("a", 1, 1, None, None), ("b", 1, 2, None, None),
        ...                 ("c", 1, 3, None, None)], s, now=9)
        >>> [(b.members, b.merge_reason) for b in r.merged]
        [(['a', 'b'], 'MAX_ENTRIES_THRESHOLD_REACHED'), (['c'], 'MIN_THRESHOLDS_REACHED')]
    """
    return BinPacker(settings, pending=pending, model_name=model_name).run(items, now)
