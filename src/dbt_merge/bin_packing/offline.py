"""Offline planning (``plan_offline_items``; Spark: ``spark.plan_offline`` and
``spark.offline_report``): a known set (e.g. the data files of a table) packed per
group by first-fit-decreasing or best-fit-decreasing, reported against the lower
bound ``ceil(bytes / max_bytes)``."""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from dbt_merge.bin_packing.first_fit import _CLOSED, _FirstFitIndex
from dbt_merge.bin_packing.packer import group_bin_row
from dbt_merge.bin_packing.settings import (
    OFFLINE_STRATEGY_DEFAULT,
    _bin_id,
    _is_int,
    _setting_error,
    validate_offline,
)


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
        return {**group_bin_row(self), "is_oversized": self.is_oversized}


class _AgainstLowerBound:
    """A count of bins and its lower bound (a group's, or all groups')."""

    bins: int
    lower_bound: int

    @property
    def ratio(self) -> float | None:
        """bins / lower bound (1.0 is optimal), None when there are no items."""
        return self.bins / self.lower_bound if self.lower_bound else None


@dataclass
class GroupReport(_AgainstLowerBound):
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


@dataclass
class OfflineReport(_AgainstLowerBound):
    """Per-group reports and their totals (groups never share a bin)."""

    groups: list[GroupReport]

    @property
    def bins(self) -> int:
        return sum(g.bins for g in self.groups)

    @property
    def lower_bound(self) -> int:
        return sum(g.lower_bound for g in self.groups)


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
