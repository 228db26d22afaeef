"""What the two streaming engines share (``packer.BinPacker``, ``defragmenter.Defragmenter``):
one run takes items in arrival order (ties by item id), each id once, then finishes once.
"""

from __future__ import annotations

import operator
from collections.abc import Hashable, Iterable
from typing import Any, ClassVar

from dbt_merge.bin_packing.settings import _setting_error

_UNSET: Any = object()  # "not given", where None means something


class StreamEngine:
    """Base of the streaming engines: ``add`` items in arrival order, then ``finish(now)``.

    Subclasses implement ``add`` and ``finish`` and set the class attributes.

    Args:
        model_name: named in error messages.
        max_bin_age: the engine's ``max_bin_age`` setting (a ``timedelta`` or None).
        max_age: ``max_bin_age`` in the unit of the arrival times, when they are not
            datetimes (e.g. microseconds as int); defaults to ``max_bin_age``.
    """

    ARRIVAL: ClassVar[int]
    """The arrival time's place in an item tuple (the id is first)."""
    WHAT: ClassVar[str]
    """The family, as error messages name it."""

    def __init__(self, model_name: str, max_bin_age: Any, max_age: Any = _UNSET) -> None:
        self.model_name = model_name
        self._max_age = max_bin_age if max_age is _UNSET else max_age
        self._seen: set[Hashable] = set()
        self._finished = False

    def add(self, item: tuple) -> None:
        raise NotImplementedError

    def finish(self, now: Any) -> Any:
        raise NotImplementedError

    def run(self, items: Iterable[tuple], now: Any) -> Any:
        """One run: ``add`` the items sorted by arrival, then id, and ``finish(now)``."""
        add = self.add
        for item in sorted(items, key=operator.itemgetter(self.ARRIVAL, 0)):
            add(item)
        return self.finish(now)

    def _see(self, item_id: Hashable) -> None:
        """Raise on an id seen before in this run (items and resumed members alike)."""
        if item_id in self._seen:
            raise _setting_error(
                self.model_name,
                "id",
                "item ids must be unique; this one came twice",
                item_id,
                self.WHAT,
            )
        self._seen.add(item_id)

    def _close(self, now: Any) -> Any:
        """Start ``finish`` (once): returns the deadline, before which a bin opened is
        older than ``max_bin_age`` at ``now`` (None without one)."""
        if self._finished:
            raise RuntimeError(f"{type(self).__name__}.finish called twice")
        self._finished = True
        return None if self._max_age is None else now - self._max_age
