"""The planner's input: a table as an ordered list of key ranges ``(lower, upper]``, how
keys compare and print, and the checks a list of ranges must pass before planning."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dbt_merge.auto_merge.errors import setting_error
from dbt_merge.auto_merge.mergeability import (
    CREATORS,
    SYSTEM,
    Mergeability,
    default_mergeability,
)


@dataclass(frozen=True)
class Range:
    """One range of the table: keys ``(lower, upper]``, like a tablet ``(prevEndRow, endRow]``.

    Attributes:
        range_id: unique name (for a tablet, its end row; ``default`` for the last).
        lower: exclusive lower key; None is -inf.
        upper: inclusive upper key; None is +inf.
        size_bytes: total size of the range's files.
        file_count: number of files.
        mergeability: None means the creator's default (``default_mergeability``).
        created_by: ``system`` or ``user``.
        record_count: rows, reported in plans only.
    """

    range_id: str
    lower: Any
    upper: Any
    size_bytes: int = 0
    file_count: int = 0
    mergeability: Mergeability | None = None
    created_by: str = SYSTEM
    record_count: int = 0

    @property
    def resolved_mergeability(self) -> Mergeability | None:
        """``mergeability``, or the creator's default when it is None."""
        if self.mergeability is not None:
            return self.mergeability
        return default_mergeability(self.created_by)

    @property
    def key_range(self) -> str:
        """``(lower,upper]`` with -inf/+inf, e.g. ``(555,666]``."""
        return format_key_range(self.lower, self.upper)


def format_key(key: Any) -> str:
    """A key for messages: tuples joined with ``/``, null parts as ``null``."""
    if isinstance(key, tuple):
        return "/".join("null" if part is None else str(part) for part in key)
    return str(key)


def format_key_range(lower: Any, upper: Any) -> str:
    """``(lower,upper]`` with None shown as ``-inf`` / ``+inf``, e.g. ``(-inf,555]``."""
    low = "-inf" if lower is None else format_key(lower)
    high = "+inf" if upper is None else format_key(upper)
    closing = ")" if upper is None else "]"
    return f"({low},{high}{closing}"


def order_key(key: Any) -> Any:
    """A key to sort and compare by: keys compare as they are, except nulls inside tuple
    keys sort first (as Spark's ascending order does), so partition keys with null
    fields stay comparable."""
    if isinstance(key, tuple):
        return tuple((0,) if part is None else (1, order_key(part)) for part in key)
    return key


def lower_bound(key: Any) -> tuple[Any, ...]:
    """Where an exclusive lower key sits in key order; None (-inf) before every key."""
    return (0,) if key is None else (1, order_key(key))


def upper_bound(key: Any) -> tuple[Any, ...]:
    """Where an inclusive upper key sits in key order; None (+inf) after every key. A
    range is contiguous with the next when its ``upper_bound`` is the next's
    ``lower_bound``."""
    return (2,) if key is None else (1, order_key(key))


def check_count(number: Any, what: str, setting: str, model_name: str) -> None:
    """A size or a count (``what``, for the message) must be a whole number >= 0."""
    if isinstance(number, bool) or not isinstance(number, int) or number < 0:
        raise setting_error(
            model_name, setting, f"{what} must be a whole number >= 0", repr(number)
        )


def validate_ranges(ranges: Sequence[Range], model_name: str) -> list[Range]:
    """The ranges as a list, once each is a ``Range`` with a unique id, a known creator,
    counts >= 0 and a complete mergeability, and all are in key order without overlaps.

    Raises:
        AutoMergeError: naming the first range that fails, and why.
    """
    checked: list[Range] = []
    seen: set[str] = set()
    for item in ranges:
        if not isinstance(item, Range):
            raise setting_error(model_name, "ranges", "must be Range objects", repr(item))
        if item.range_id in seen:
            raise setting_error(
                model_name, "ranges", "range ids must be unique", f"{item.range_id!r} twice"
            )
        seen.add(item.range_id)
        if item.created_by not in CREATORS:
            raise setting_error(
                model_name, "created_by", "must be 'system' or 'user'", repr(item.created_by)
            )
        for name in ("size_bytes", "file_count", "record_count"):
            check_count(
                getattr(item, name), f"{name} of range {item.range_id!r}", "ranges", model_name
            )
        _validate_mergeability(item, model_name)
        checked.append(item)
    prev: Range | None = None
    item: Range | None = None
    try:
        for index, item in enumerate(checked):
            prev = None
            if not lower_bound(item.lower) < upper_bound(item.upper):
                raise setting_error(
                    model_name,
                    "ranges",
                    f"range {item.range_id!r} must have lower < upper",
                    f"lower {item.lower!r}, upper {item.upper!r}",
                )
            if index == 0:
                continue
            prev = checked[index - 1]
            if upper_bound(item.upper) < upper_bound(prev.upper):
                raise setting_error(
                    model_name,
                    "ranges",
                    f"ranges must be ordered by key, but range {item.range_id!r} ends before "
                    f"range {prev.range_id!r} that precedes it",
                    f"{item.key_range} after {prev.key_range}",
                )
            if lower_bound(item.lower) < upper_bound(prev.upper) or upper_bound(
                item.upper
            ) == upper_bound(prev.upper):
                raise setting_error(
                    model_name,
                    "ranges",
                    f"ranges must not overlap, but range {item.range_id!r} starts before "
                    f"range {prev.range_id!r} ends",
                    f"{item.key_range} after {prev.key_range}",
                )
    except TypeError:
        compared = "" if item is None else f"range {item.range_id!r} {item.key_range}"
        if prev is not None and item is not None:
            compared = f"range {prev.range_id!r} {prev.key_range} and {compared}"
        raise setting_error(
            model_name, "ranges", "range keys must be comparable with each other", compared
        ) from None
    return checked


def _validate_mergeability(item: Range, model_name: str) -> None:
    mergeability = item.resolved_mergeability
    where = f"of range {item.range_id!r}"
    if not isinstance(mergeability, Mergeability):
        raise setting_error(
            model_name, "mergeability", f"{where} must be a Mergeability", repr(mergeability)
        )
    problem = mergeability.problem(where)
    if problem is not None:
        raise setting_error(model_name, "mergeability", problem[0], repr(problem[1]))
