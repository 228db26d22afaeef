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

On Iceberg, ``plan_table`` (the last sections; the only part that needs Spark) reads
a table's own metadata tables and returns the plan as a DataFrame for a dbt Python
model; the macro ``dbt_merge.execute_auto_merge`` carries it out with
``rewrite_data_files``. The ranges are the table's data files ordered by a sort
column (within each partition), or its partitions.

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

import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from typing import Any

from dbt_merge.core.errors import DbtMergeError, setting_message
from dbt_merge.core.sql import quote_identifier, string_literal, typed_literal

logger = logging.getLogger(__name__)

# One documented default per option (Accumulo table.mergeability.threshold = .25,
# table.split.threshold = 1G, table.merge.file.max = 10000; SEMANTICS.md D.1).
THRESHOLD_DEFAULT = 0.25
SPLIT_THRESHOLD_DEFAULT = 1024**3
FILE_MAX_DEFAULT = 10_000

NEVER = "NEVER"
ALWAYS = "ALWAYS"
DELAY = "DELAY"
MODES = (NEVER, ALWAYS, DELAY)

SYSTEM = "system"
USER = "user"
CREATORS = (SYSTEM, USER)

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

_DURATION_UNITS = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
}
_DURATION_RE = re.compile(r"(?:\d+(?:ms|s|m|h|d))+")
_DURATION_PART_RE = re.compile(r"(\d+)(ms|s|m|h|d)")
_DELAY_RE = re.compile(r"DELAY(?:\s*:\s*|\s+)(.*)", re.IGNORECASE | re.DOTALL)
_MERGEABILITY_KEYS = ("mode", "delay", "marked_at")
_PARTITION_COLUMNS = ("record_count", "file_count", "total_data_file_size_in_bytes")
_SETTINGS_KEYS = ("threshold", "split_threshold", "file_max")


class AutoMergeError(DbtMergeError):
    """Bad auto-merge input; the text names the model, the setting and the value."""


def _error(model_name: str, setting: str, problem: str, got: str) -> AutoMergeError:
    return AutoMergeError(setting_message("auto-merge", model_name, setting, problem, got))


# -- mergeability ------------------------------------------------------------------------


@dataclass(frozen=True)
class Mergeability:
    """When a range may be merged automatically (Accumulo ``TabletMergeability``).

    Build with ``never()``, ``always()`` or ``after(delay, marked_at)``.

    Attributes:
        mode: ``NEVER``, ``ALWAYS`` or ``DELAY``.
        delay: for ``DELAY``, how long after ``marked_at`` the range becomes eligible.
        marked_at: for ``DELAY``, when the mergeability was set.
    """

    mode: str
    delay: timedelta | None = None
    marked_at: datetime | None = None

    @classmethod
    def never(cls) -> Mergeability:
        """Never eligible."""
        return cls(NEVER)

    @classmethod
    def always(cls) -> Mergeability:
        """Always eligible."""
        return cls(ALWAYS)

    @classmethod
    def after(cls, delay: timedelta, marked_at: datetime) -> Mergeability:
        """Eligible from ``marked_at + delay`` on."""
        return cls(DELAY, delay, marked_at)

    @property
    def due_at(self) -> datetime | None:
        """The first time a ``DELAY`` range is eligible; None for NEVER and ALWAYS."""
        if self.mode != DELAY or self.delay is None or self.marked_at is None:
            return None
        return self.marked_at + self.delay

    def is_eligible(self, now: datetime) -> bool:
        """Whether the range may be merged at ``now``.

        DELAY is due at exactly ``marked_at + delay``: Accumulo's
        ``TabletMergeabilityUtil.isMergeable`` is ``currentTime.compareTo(created +
        delay) >= 0`` (SEMANTICS.md D.2, "now >= steadyTimeWhenSet + delay"; D8).
        """
        if self.mode == ALWAYS:
            return True
        if self.mode == DELAY and self.due_at is not None:
            return now >= self.due_at
        return False

    def __str__(self) -> str:
        if self.mode == DELAY and self.delay is not None:
            return f"DELAY:{format_duration(self.delay)}"
        return self.mode


def default_mergeability(created_by: str) -> Mergeability | None:
    """``ALWAYS`` for system-created ranges, ``NEVER`` for user-created ones.

    Accumulo: user splits default to NEVER, system splits (and a new table's single
    tablet) to ALWAYS (SEMANTICS.md D.2, D11). Returns None for an unknown creator.
    """
    return {SYSTEM: Mergeability.always(), USER: Mergeability.never()}.get(created_by)


def format_duration(delay: timedelta) -> str:
    """Render a duration in the parser's format, e.g. ``1h30m``, ``0s``, ``1d``."""
    rest = delay
    parts = []
    for unit in ("d", "h", "m", "s", "ms"):
        count, rest = divmod(rest, _DURATION_UNITS[unit])
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def parse_duration(value: Any, *, model_name: str, setting: str = "mergeability") -> timedelta:
    """Read a delay: a ``timedelta``, a number of seconds or a string like ``1h30m``.

    Strings are one or more ``<integer><unit>`` parts, units ``ms``, ``s``, ``m``, ``h``,
    ``d`` (the suffixes of Accumulo's time properties, e.g. ``24h``); case and spaces
    around the string are ignored. A bare number in a string is refused (its unit would
    be a guess).

    Args:
        value: the delay.
        model_name: named in error text.
        setting: named in error text.

    Returns:
        The delay, ``>= 0``.

    Raises:
        AutoMergeError: unreadable or negative delay.
    """
    if isinstance(value, timedelta):
        delay = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        delay = timedelta(seconds=value)
    elif isinstance(value, str) and _DURATION_RE.fullmatch(value.strip().lower()):
        delay = timedelta()
        for count, unit in _DURATION_PART_RE.findall(value.strip().lower()):
            delay += int(count) * _DURATION_UNITS[unit]
    else:
        raise _error(
            model_name,
            setting,
            "a delay must be a duration such as 90s, 1h or 1h30m (units ms, s, m, h, d), "
            "a number of seconds or a timedelta",
            repr(value),
        )
    if delay < timedelta():
        raise _error(model_name, setting, "a delay must be >= 0", repr(value))
    return delay


def _parse_marked_at(value: Any, *, model_name: str) -> datetime:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.strip())
        except ValueError:
            pass
    raise _error(
        model_name,
        "mergeability",
        "marked_at must be a datetime or an ISO-8601 timestamp",
        repr(value),
    )


def parse_mergeability(
    value: str | Mapping[str, Any] | Mergeability | None,
    created_by: str = SYSTEM,
    *,
    model_name: str,
    marked_at: datetime | None = None,
) -> Mergeability:
    """Read a mergeability from dbt config or a table property.

    Accepted forms (mode names are case-insensitive):

    * ``None``: the creator's default, ``ALWAYS`` for ``system``, ``NEVER`` for ``user``;
    * ``"NEVER"``, ``"ALWAYS"``;
    * ``"DELAY:<duration>"`` or ``"DELAY <duration>"``, e.g. ``"DELAY:1h"``,
      ``"DELAY 3600s"`` (durations as in ``parse_duration``); the stamp is ``marked_at``;
    * a dict ``{"mode": "DELAY", "delay": "1h" | 3600 | timedelta,
      "marked_at": datetime | "2024-05-01T12:00:00+00:00"}`` (``delay`` and
      ``marked_at`` only with DELAY; a dict's ``marked_at`` wins over the argument);
    * a ``Mergeability``, returned as it is.

    Args:
        value: the setting.
        created_by: ``system`` or ``user``; picks the default when ``value`` is None.
        model_name: named in error text.
        marked_at: when a DELAY was set (for Iceberg partitions, ``last_updated_at``).

    Returns:
        The mergeability.

    Raises:
        AutoMergeError: unknown mode or creator, DELAY without a duration or a stamp,
            NEVER/ALWAYS with a delay, unknown dict keys.
    """
    if value is None:
        default = default_mergeability(created_by)
        if default is None:
            raise _error(model_name, "created_by", "must be 'system' or 'user'", repr(created_by))
        return default
    if isinstance(value, Mergeability):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.upper() in (NEVER, ALWAYS):
            return Mergeability(text.upper())
        delay_match = _DELAY_RE.fullmatch(text)
        if text.upper() == DELAY or (delay_match and not delay_match.group(1).strip()):
            raise _error(
                model_name,
                "mergeability",
                "DELAY needs a duration, e.g. DELAY:1h or DELAY 3600s",
                repr(value),
            )
        if not delay_match:
            raise _error(
                model_name,
                "mergeability",
                "unknown mergeability, expected NEVER, ALWAYS or DELAY:<duration>",
                repr(value),
            )
        delay = parse_duration(delay_match.group(1), model_name=model_name)
        return _delay(delay, marked_at, value, model_name)
    if isinstance(value, Mapping):
        unknown = sorted(str(k) for k in value if k not in _MERGEABILITY_KEYS)
        if unknown:
            raise _error(
                model_name,
                "mergeability",
                f"unknown keys [{', '.join(unknown)}], supported: mode, delay, marked_at",
                repr(dict(value)),
            )
        mode = value.get("mode")
        mode = mode.strip().upper() if isinstance(mode, str) else mode
        if mode not in MODES:
            raise _error(
                model_name,
                "mergeability",
                "unknown mergeability mode, expected NEVER, ALWAYS or DELAY",
                repr(dict(value)),
            )
        if mode != DELAY:
            if value.get("delay") is not None or value.get("marked_at") is not None:
                raise _error(
                    model_name,
                    "mergeability",
                    f"{mode} takes no delay or marked_at",
                    repr(dict(value)),
                )
            return Mergeability(mode)
        if value.get("delay") is None:
            raise _error(
                model_name,
                "mergeability",
                "DELAY needs a duration, e.g. DELAY:1h or DELAY 3600s",
                repr(dict(value)),
            )
        delay = parse_duration(value["delay"], model_name=model_name)
        if value.get("marked_at") is not None:
            marked_at = _parse_marked_at(value["marked_at"], model_name=model_name)
        return _delay(delay, marked_at, dict(value), model_name)
    raise _error(
        model_name,
        "mergeability",
        "must be a string such as 'NEVER', 'ALWAYS' or 'DELAY:1h', or a dict",
        repr(value),
    )


def _delay(
    delay: timedelta, marked_at: datetime | None, value: Any, model_name: str
) -> Mergeability:
    if marked_at is None:
        raise _error(
            model_name,
            "mergeability",
            "DELAY needs the time it was marked (marked_at) to know when it is due",
            repr(value),
        )
    return Mergeability.after(delay, marked_at)


# -- settings ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AutoMergeSettings:
    """Limits of one merge.

    Attributes:
        threshold: fraction of ``split_threshold`` a merged range may reach, in
            ``(0, 1]`` (Accumulo ``table.mergeability.threshold``, default 0.25).
        split_threshold: size in bytes at which a range is considered full
            (Accumulo ``table.split.threshold``, default 1 GiB).
        file_max: most files a merged range may hold (Accumulo
            ``table.merge.file.max``, default 10000).
    """

    threshold: float = THRESHOLD_DEFAULT
    split_threshold: int = SPLIT_THRESHOLD_DEFAULT
    file_max: int = FILE_MAX_DEFAULT

    @property
    def max_total_size(self) -> int:
        """Largest merged size in bytes: ``int(split_threshold * threshold)``.

        Truncated like Accumulo's ``(long) (threshold * mergeabilityThreshold)``
        (SEMANTICS.md D.1), so float rounding can cost a byte.
        """
        return int(self.split_threshold * self.threshold)

    def validate(self, model_name: str) -> AutoMergeSettings:
        """Check every setting; returns ``self`` so calls can chain.

        Raises:
            AutoMergeError: a setting is of the wrong type or out of range.
        """
        threshold = self.threshold
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            raise _error(model_name, "threshold", "must be a number", repr(threshold))
        if not 0 < threshold <= 1:
            raise _error(model_name, "threshold", "must be > 0 and <= 1", repr(threshold))
        for name in ("split_threshold", "file_max"):
            number = getattr(self, name)
            if isinstance(number, bool) or not isinstance(number, int):
                raise _error(model_name, name, "must be a whole number", repr(number))
            if number <= 0:
                raise _error(model_name, name, "must be > 0", repr(number))
        return self

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None, model_name: str) -> AutoMergeSettings:
        """Settings from a dbt config dict such as ``{"threshold": 0.5, "file_max": 100}``.

        Missing keys take their defaults; the result is validated.

        Raises:
            AutoMergeError: unknown keys or bad values.
        """
        if config is not None and not isinstance(config, Mapping):
            raise _error(model_name, "auto_merge", "must be a dict of options", repr(config))
        config = dict(config or {})
        unknown = sorted(str(k) for k in config if k not in _SETTINGS_KEYS)
        if unknown:
            raise _error(
                model_name,
                "auto_merge",
                f"unknown options [{', '.join(unknown)}], supported: " + ", ".join(_SETTINGS_KEYS),
                repr(config),
            )
        return cls(**config).validate(model_name)


# -- ranges and plans ------------------------------------------------------------------------


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


def _order_key(key: Any) -> Any:
    # Keys compare as they are, except nulls inside tuple keys sort first (as Spark's
    # ascending order does), so partition keys with null fields stay comparable.
    if isinstance(key, tuple):
        return tuple((0,) if part is None else (1, _order_key(part)) for part in key)
    return key


def _lower_bound(key: Any) -> tuple[Any, ...]:
    return (0,) if key is None else (1, _order_key(key))


def _upper_bound(key: Any) -> tuple[Any, ...]:
    return (2,) if key is None else (1, _order_key(key))


def _validate_ranges(ranges: Sequence[Range], model_name: str) -> list[Range]:
    checked: list[Range] = []
    seen: set[str] = set()
    for item in ranges:
        if not isinstance(item, Range):
            raise _error(model_name, "ranges", "must be Range objects", repr(item))
        if item.range_id in seen:
            raise _error(
                model_name, "ranges", "range ids must be unique", f"{item.range_id!r} twice"
            )
        seen.add(item.range_id)
        if item.created_by not in CREATORS:
            raise _error(
                model_name, "created_by", "must be 'system' or 'user'", repr(item.created_by)
            )
        for name in ("size_bytes", "file_count", "record_count"):
            number = getattr(item, name)
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise _error(
                    model_name,
                    "ranges",
                    f"{name} of range {item.range_id!r} must be a whole number >= 0",
                    repr(number),
                )
        _validate_mergeability(item, model_name)
        checked.append(item)
    prev: Range | None = None
    item: Range | None = None
    try:
        for index, item in enumerate(checked):
            prev = None
            if not _lower_bound(item.lower) < _upper_bound(item.upper):
                raise _error(
                    model_name,
                    "ranges",
                    f"range {item.range_id!r} must have lower < upper",
                    f"lower {item.lower!r}, upper {item.upper!r}",
                )
            if index == 0:
                continue
            prev = checked[index - 1]
            if _upper_bound(item.upper) < _upper_bound(prev.upper):
                raise _error(
                    model_name,
                    "ranges",
                    f"ranges must be ordered by key, but range {item.range_id!r} ends before "
                    f"range {prev.range_id!r} that precedes it",
                    f"{item.key_range} after {prev.key_range}",
                )
            if _lower_bound(item.lower) < _upper_bound(prev.upper) or _upper_bound(
                item.upper
            ) == _upper_bound(prev.upper):
                raise _error(
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
        raise _error(
            model_name, "ranges", "range keys must be comparable with each other", compared
        ) from None
    return checked


def _validate_mergeability(item: Range, model_name: str) -> None:
    mergeability = item.resolved_mergeability
    where = f"of range {item.range_id!r}"
    if not isinstance(mergeability, Mergeability):
        raise _error(
            model_name, "mergeability", f"{where} must be a Mergeability", repr(mergeability)
        )
    if mergeability.mode not in MODES:
        raise _error(
            model_name,
            "mergeability",
            f"unknown mergeability {where}, expected NEVER, ALWAYS or DELAY",
            repr(mergeability.mode),
        )
    if mergeability.mode != DELAY:
        return
    if not isinstance(mergeability.delay, timedelta):
        raise _error(
            model_name,
            "mergeability",
            f"DELAY {where} needs a duration, e.g. DELAY:1h or DELAY 3600s",
            repr(mergeability.delay),
        )
    if mergeability.delay < timedelta():
        raise _error(model_name, "mergeability", "a delay must be >= 0", repr(mergeability.delay))
    if not isinstance(mergeability.marked_at, datetime):
        raise _error(
            model_name,
            "mergeability",
            f"DELAY {where} needs the time it was marked (marked_at) to know when it is due",
            repr(mergeability.marked_at),
        )


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
        if self.members and _lower_bound(item.lower) != _upper_bound(self.members[-1].upper):
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
        raise _error(
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
        raise _error(model_name, "now", "must be a datetime", repr(now))
    checked = _validate_ranges(ranges, model_name)

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


def plan_merges(
    ranges: Sequence[Range],
    settings: AutoMergeSettings,
    now: datetime,
    model_name: str,
) -> list[MergePlan]:
    """The merges of ``plan_auto_merge`` only (see there for the arguments)."""
    return list(plan_auto_merge(ranges, settings, now, model_name).merges)


def verify_merge(
    plan: MergePlan,
    ranges: Sequence[Range],
    settings: AutoMergeSettings,
    now: datetime,
    model_name: str,
) -> str | None:
    """Re-check a planned merge against the table as it is now, just before running it.

    Like Accumulo's ``VerifyMergeability`` (SEMANTICS.md D.1, D12): the ranges that
    overlap the plan's key range are run through the same checks with the current
    time; the first failure aborts the merge with Accumulo's message
    (``UnreserveSystemMerge``).

    Args:
        plan: a merge from ``plan_auto_merge``.
        ranges: the table's ranges now (same rules as for planning).
        settings: the limits.
        now: the time of the check.
        model_name: named in error text.

    Returns:
        None if the merge may go ahead, else why it is aborted.
    """
    settings.validate(model_name)
    if not isinstance(now, datetime):
        raise _error(model_name, "now", "must be a datetime", repr(now))
    checked = _validate_ranges(ranges, model_name)
    run = _Run(settings.file_max, settings.max_total_size, now, model_name)
    for item in checked:
        overlaps = _lower_bound(item.lower) < _upper_bound(plan.upper) and _lower_bound(
            plan.lower
        ) < _upper_bound(item.upper)
        if not overlaps:
            continue
        failure = run.add(item)
        if failure == _MAX_FILE_COUNT:
            return (
                "Aborted merge because it would produce a range with more files than the "
                f"configured limit of {settings.file_max}"
            )
        if failure == _MAX_TOTAL_SIZE:
            return (
                "Aborted merge because it would produce a range with a file size larger than "
                f"the configured limit of {settings.max_total_size}"
            )
        if failure == _NOT_ELIGIBLE:
            return "Aborted merge because one or more ranges in the merge range are unmergeable."
        if failure == _NOT_CONTIGUOUS:
            return "Aborted merge because the ranges in the merge range are not contiguous."
    return None


# -- Iceberg -----------------------------------------------------------------------------------


def ranges_from_partitions(
    rows: Sequence[Mapping[str, Any]],
    *,
    model_name: str,
    mergeability: (
        str | Mapping[str, Any] | Mergeability | Callable[[Mapping[str, Any]], Any] | None
    ) = None,
    created_by: str = SYSTEM,
) -> list[Range]:
    """Ranges from the rows of an Iceberg ``<table>.partitions`` metadata table.

    Columns read (apache/iceberg ``core/.../PartitionsTable.java``): ``partition``
    (struct; absent for an unpartitioned table), ``record_count``, ``file_count`` (data
    files), ``total_data_file_size_in_bytes`` (data files) and the optional
    ``last_updated_at`` (commit time of the last snapshot that touched the
    partition). Delete files are not counted. Pass rows as dicts, e.g.
    ``[r.asDict(recursive=True) for r in spark.table("db.t.partitions").collect()]``.

    Partitions are sorted by their values (field order, nulls first) and tile the key
    space: partition *i* covers ``(partition i-1, partition i]``, the first starts at
    -inf. A merged range ``(lower, upper]`` therefore holds exactly its member
    partitions. Each range id is ``field=value/...`` (``(unpartitioned)`` without
    fields).

    Args:
        rows: one dict per partition.
        model_name: named in error text.
        mergeability: for every partition (see ``parse_mergeability``), or a callable
            that takes the row and returns it. A DELAY is stamped with the row's
            ``last_updated_at`` unless its dict gives ``marked_at``, so ``"DELAY:1d"``
            means "a day after the partition was last written".
        created_by: default creator; Iceberg partitions are made by writes, so
            ``system`` (ALWAYS by default).

    Returns:
        The ranges in key order.

    Raises:
        AutoMergeError: a missing column, a bad count, duplicate partitions or a bad
            mergeability.
    """
    keyed: list[tuple[tuple[Any, ...], str, Mapping[str, Any]]] = []
    for row in rows:
        missing = [c for c in _PARTITION_COLUMNS if c not in row]
        if missing:
            raise _error(
                model_name,
                "partitions",
                f"each row needs the column(s) {', '.join(missing)}",
                repr(sorted(row)),
            )
        partition = row.get("partition")
        if partition is None:
            key: tuple[Any, ...] = ()
            range_id = "(unpartitioned)"
        elif isinstance(partition, Mapping):
            key = tuple(partition.values())
            range_id = "/".join(
                f"{name}={'null' if value is None else value}" for name, value in partition.items()
            )
        elif isinstance(partition, Sequence) and not isinstance(partition, str):
            key = tuple(partition)
            range_id = format_key(key)
        else:
            raise _error(
                model_name,
                "partitions",
                "partition must be a struct (dict) or a tuple of field values",
                repr(partition),
            )
        keyed.append((key, range_id or "(unpartitioned)", row))
    try:
        keyed.sort(key=lambda entry: _order_key(entry[0]))
    except TypeError:
        types = sorted({type(v).__name__ for key, _, _ in keyed for v in key if v is not None})
        raise _error(
            model_name,
            "partitions",
            "partition values must be comparable",
            f"values of types {', '.join(types)}",
        ) from None

    if len(keyed) > 1 and any(not key for key, _, _ in keyed):
        raise _error(
            model_name,
            "partitions",
            "a row without partition values must be the only row (an unpartitioned table)",
            f"{len(keyed)} rows",
        )

    ranges: list[Range] = []
    previous: tuple[Any, ...] | None = None
    for key, range_id, row in keyed:
        if previous is not None and _order_key(previous) == _order_key(key):
            raise _error(model_name, "partitions", "each partition must appear once", range_id)
        value = mergeability(row) if callable(mergeability) else mergeability
        counts = {c: row[c] for c in _PARTITION_COLUMNS}
        for column, number in counts.items():
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise _error(
                    model_name,
                    "partitions",
                    f"{column} of partition {range_id} must be a whole number >= 0",
                    repr(number),
                )
        ranges.append(
            Range(
                range_id=range_id,
                lower=previous,
                upper=key or None,  # an unpartitioned table is one range (-inf,+inf)
                size_bytes=counts["total_data_file_size_in_bytes"],
                file_count=counts["file_count"],
                mergeability=parse_mergeability(
                    value,
                    created_by,
                    model_name=model_name,
                    marked_at=row.get("last_updated_at"),
                ),
                created_by=created_by,
                record_count=counts["record_count"],
            )
        )
        previous = key
    return ranges


# -- planning an Iceberg table -----------------------------------------------------------------
#
# ``plan_table`` reads a table's own metadata tables and plans with ``plan_auto_merge``.
# The pure steps (options, rules, files to ranges, the where clauses) take plain
# Python values so they are tested without Spark; the Spark glue is at the end.

SOURCE_FILES = "files"
SOURCE_PARTITIONS = "partitions"
SOURCES = (SOURCE_FILES, SOURCE_PARTITIONS)
SOURCE_DEFAULT = SOURCE_FILES
CREATED_BY_DEFAULT = SYSTEM

# Table properties read by plan_table: dbt_merge.auto_merge.<option>; model config wins.
PROPERTY_PREFIX = "dbt_merge.auto_merge."
REASON_NO_KEY_BOUNDS = "no_key_bounds"

_PROPERTY_OPTIONS = (
    "source",
    "sort_column",
    "threshold",
    "split_threshold",
    "file_max",
    "mergeability",
    "created_by",
)
_CONFIG_OPTIONS = (*_PROPERTY_OPTIONS, "now")
_RULE_KEYS = ("from", "to", "mergeability", "marked_at")

# The plan table: one row per range (file or partition) in key order, with the
# merge it belongs to. (name, Spark SQL type) in column order.
PLAN_COLUMNS = (
    ("catalog_name", "string"),
    ("table_name", "string"),
    ("snapshot_id", "bigint"),
    ("source", "string"),
    ("sort_column", "string"),
    ("range_index", "int"),
    ("range_id", "string"),
    ("partition", "string"),
    ("min_key", "string"),
    ("max_key", "string"),
    ("file_count", "bigint"),
    ("size_bytes", "bigint"),
    ("record_count", "bigint"),
    ("file_paths", "array<string>"),
    ("mergeability", "string"),
    ("mergeability_rule", "int"),
    ("marked_at", "timestamp"),
    ("due_at", "timestamp"),
    ("action", "string"),
    ("reason", "string"),
    ("explanation", "string"),
    ("merge_index", "int"),
    ("merge_min_key", "string"),
    ("merge_max_key", "string"),
    ("merge_file_count", "bigint"),
    ("merge_size_bytes", "bigint"),
    ("merge_where", "string"),
    ("merge_files_where", "string"),
    ("target_file_size_bytes", "bigint"),
    ("planned_at", "timestamp"),
)
_PLAN_COLUMN_NAMES = tuple(name for name, _ in PLAN_COLUMNS)


@dataclass(frozen=True)
class MergeabilityRule:
    """Mergeability for the ranges whose keys meet ``[lower, upper]`` (both inclusive).

    Attributes:
        index: 1-based position in the ``mergeability`` list (0 for a single value
            that covers every range).
        lower: smallest key of the rule, None for -inf; text until ``typed``.
        upper: largest key of the rule, None for +inf.
        mergeability: as for ``parse_mergeability``; None is the default of a range a
            user created, ``NEVER`` (Accumulo ``addSplits``).
        marked_at: when a DELAY was set; None means when the range was last written.
    """

    index: int
    lower: Any = None
    upper: Any = None
    mergeability: Any = None
    marked_at: Any = None

    @property
    def label(self) -> str:
        """``rule 2`` or ``the single value``, for messages."""
        return f"rule {self.index}" if self.index else "the single value"


@dataclass(frozen=True)
class AutoMergeOptions:
    """Everything ``plan_table`` needs besides the table, resolved and checked.

    Attributes:
        source: ``files`` (data files ordered by ``sort_column``) or ``partitions``.
        sort_column: the key of the files source (None: the table's sort order).
        settings: the limits.
        rules: mergeability rules; a range none of them meets gets the default of
            ``created_by``.
        created_by: ``system`` (ALWAYS, the default: Iceberg's files and partitions
            are made by writes) or ``user`` (NEVER).
        now: the scan time DELAY ranges are compared with (naive UTC).
        origins: where each option came from: ``config``, ``table property`` or
            ``default``.
    """

    source: str
    sort_column: str | None
    settings: AutoMergeSettings
    rules: tuple[MergeabilityRule, ...]
    created_by: str
    now: datetime
    origins: Mapping[str, str]


def _utc_naive(value: datetime) -> datetime:
    """A naive datetime is taken as UTC; an aware one is converted to UTC."""
    if value.tzinfo is None:
        return value
    return value.astimezone(UTC).replace(tzinfo=None)


def _local_naive_to_utc(value: datetime | None) -> datetime | None:
    """PySpark collects timestamps as naive datetimes in the Python process's zone."""
    if value is None:
        return None
    return value.astimezone(UTC).replace(tzinfo=None)


def _parse_now(value: Any, model_name: str) -> datetime:
    if value is None or (isinstance(value, str) and not value.strip()):
        return datetime.now(UTC).replace(tzinfo=None)
    if isinstance(value, datetime):
        return _utc_naive(value)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    if isinstance(value, str):
        try:
            return _utc_naive(datetime.fromisoformat(value.strip()))
        except ValueError:
            pass
    raise _error(
        model_name,
        "now",
        "must be an ISO-8601 timestamp such as 2024-03-01T00:00:00 (UTC unless it "
        "has an offset), or empty for the current time",
        repr(value),
    )


def _property_value(name: str, text: str, model_name: str, setting: str | None = None) -> Any:
    """A table property's text as the option's type (numbers, JSON for mergeability).

    Also reads numbers that dbt rendered to text, e.g. ``"{{ var('file_max', 100) }}"``
    in a YAML config (``setting`` then names the config key).
    """
    setting = setting or f"{PROPERTY_PREFIX}{name}"
    if name == "threshold":
        try:
            return float(text)
        except ValueError:
            raise _error(model_name, setting, "must be a number", repr(text)) from None
    if name in ("split_threshold", "file_max"):
        try:
            return int(text.strip())
        except ValueError:
            raise _error(model_name, setting, "must be a whole number", repr(text)) from None
    if name == "mergeability":
        try:
            return json.loads(text)
        except ValueError:
            return text  # a bare NEVER, ALWAYS or DELAY:1h
    return text


def _named(exc: AutoMergeError, setting: str, label: str) -> AutoMergeError:
    """The same error with the setting named as ``label`` (e.g. a table property)."""
    return AutoMergeError(str(exc).replace(f"setting '{setting}'", f"setting '{label}'", 1))


def parse_rules(
    value: Any, *, model_name: str, setting: str = "mergeability"
) -> tuple[MergeabilityRule, ...]:
    """Read the ``mergeability`` option.

    Accepted forms:

    * None: no rules, every range gets the default of ``created_by``;
    * one mergeability (``"NEVER"``, ``"DELAY:1h"``, ``{"mode": ...}``): every range;
    * a list of rules ``{"from": key, "to": key, "mergeability": ...,
      "marked_at": ...}``. ``from`` and ``to`` are inclusive keys (either may be left
      out for an open end); a rule without ``mergeability`` marks a range a user
      made, which is ``NEVER`` (Accumulo's default for user splits). A range that
      meets several rules takes the strictest: NEVER, then the DELAY due last, then
      ALWAYS.

    Mergeabilities are checked here, before any table is read. ``setting`` names the
    option in error text (a table property's name when it came from one).

    Raises:
        AutoMergeError: a bad form, unknown keys, a bad mergeability.
    """
    if value is None:
        return ()
    if isinstance(value, str | Mergeability) or (isinstance(value, Mapping) and "mode" in value):
        rules = [MergeabilityRule(0, mergeability=value)]
    elif isinstance(value, Sequence) and not isinstance(value, str):
        rules = []
        for index, rule in enumerate(value, start=1):
            if not isinstance(rule, Mapping):
                raise _error(
                    model_name,
                    setting,
                    f"rule {index} must be a dict with from, to, mergeability, marked_at",
                    repr(rule),
                )
            unknown = sorted(str(k) for k in rule if k not in _RULE_KEYS)
            if unknown:
                raise _error(
                    model_name,
                    setting,
                    f"rule {index} has unknown keys [{', '.join(unknown)}], supported: "
                    + ", ".join(_RULE_KEYS),
                    repr(dict(rule)),
                )
            rules.append(
                MergeabilityRule(
                    index,
                    rule.get("from"),
                    rule.get("to"),
                    rule.get("mergeability"),
                    rule.get("marked_at"),
                )
            )
    else:
        raise _error(
            model_name,
            setting,
            "must be one mergeability (NEVER, ALWAYS, DELAY:<duration>) or a list of "
            "rules {from, to, mergeability, marked_at}",
            repr(value),
        )
    for rule in rules:
        # Check the syntax now; a DELAY without marked_at is stamped per range later.
        try:
            marked_at = rule.marked_at
            if marked_at is not None:
                marked_at = _parse_marked_at(marked_at, model_name=model_name)
            parse_mergeability(
                rule.mergeability, USER, model_name=model_name, marked_at=marked_at or datetime.min
            )
        except AutoMergeError as exc:
            raise _named(exc, "mergeability", f"{setting} ({rule.label})") from None
    return tuple(rules)


def read_options(
    config: Mapping[str, Any] | None,
    properties: Mapping[str, str] | None,
    *,
    model_name: str,
    table_name: str = "",
) -> AutoMergeOptions:
    """Resolve the options from the model's config, then the table's properties.

    Each option comes from the model config (the ``auto_merge`` dict) if set there,
    else from the table property ``dbt_merge.auto_merge.<option>``, else its
    default. ``now`` is config only (empty or missing: the current time).

    Args:
        config: the ``auto_merge`` config dict.
        properties: the table's properties (all of them; others are ignored).
        model_name: named in error text.
        table_name: named in error text about table properties.

    Returns:
        The checked options.

    Raises:
        AutoMergeError: unknown options, bad values; the setting named is the config
            key or the table property.
    """
    if config is not None and not isinstance(config, Mapping):
        raise _error(model_name, "auto_merge", "must be a dict of options", repr(config))
    config = dict(config or {})
    unknown = sorted(str(k) for k in config if k not in _CONFIG_OPTIONS)
    if unknown:
        raise _error(
            model_name,
            "auto_merge",
            f"unknown options [{', '.join(unknown)}], supported: " + ", ".join(_CONFIG_OPTIONS),
            repr(config),
        )
    from_properties: dict[str, Any] = {}
    for key, text in (properties or {}).items():
        if not key.startswith(PROPERTY_PREFIX):
            continue
        name = key[len(PROPERTY_PREFIX) :]
        if name not in _PROPERTY_OPTIONS:
            raise _error(
                model_name,
                key,
                f"unknown table property of {table_name or 'the table'}, supported: "
                + ", ".join(PROPERTY_PREFIX + o for o in _PROPERTY_OPTIONS),
                repr(text),
            )
        from_properties[name] = _property_value(name, text, model_name)

    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name in _CONFIG_OPTIONS:
        if config.get(name) is not None:
            values[name], origins[name] = config[name], "config"
            if name in _SETTINGS_KEYS and isinstance(config[name], str):
                values[name] = _property_value(name, config[name], model_name, setting=name)
        elif name in from_properties:
            values[name], origins[name] = from_properties[name], "table property"
        else:
            values[name], origins[name] = None, "default"

    def label(name: str) -> str:
        if origins[name] == "table property":
            return f"{PROPERTY_PREFIX}{name}"
        return name

    source = values["source"] or SOURCE_DEFAULT
    if source not in SOURCES:
        raise _error(
            model_name, label("source"), "must be one of " + ", ".join(SOURCES), repr(source)
        )
    sort_column = values["sort_column"]
    if sort_column is not None and (not isinstance(sort_column, str) or not sort_column.strip()):
        raise _error(model_name, label("sort_column"), "must be a column name", repr(sort_column))
    created_by = values["created_by"] or CREATED_BY_DEFAULT
    if created_by not in CREATORS:
        raise _error(
            model_name, label("created_by"), "must be 'system' or 'user'", repr(created_by)
        )
    settings = AutoMergeSettings(
        threshold=THRESHOLD_DEFAULT if values["threshold"] is None else values["threshold"],
        split_threshold=(
            SPLIT_THRESHOLD_DEFAULT
            if values["split_threshold"] is None
            else values["split_threshold"]
        ),
        file_max=FILE_MAX_DEFAULT if values["file_max"] is None else values["file_max"],
    )
    try:
        settings.validate(model_name)
    except AutoMergeError as exc:
        for name in _SETTINGS_KEYS:
            if f"setting '{name}'" in str(exc):
                raise _named(exc, name, label(name)) from None
        raise
    rules = parse_rules(
        values["mergeability"], model_name=model_name, setting=label("mergeability")
    )
    return AutoMergeOptions(
        source=source,
        sort_column=sort_column.strip() if sort_column else None,
        settings=settings,
        rules=rules,
        created_by=created_by,
        now=_parse_now(values["now"], model_name),
        origins=origins,
    )


def resolve_mergeability(
    rules: Sequence[MergeabilityRule],
    lower: Any,
    upper: Any,
    *,
    created_by: str,
    written_at: datetime | None,
    range_id: str,
    model_name: str,
) -> tuple[Mergeability, int | None]:
    """The mergeability of a range holding keys ``[lower, upper]``, and the rule behind it.

    Rules must have typed bounds (comparable with the keys). A range meets a rule when
    their key intervals share a key; among the rules it meets the strictest wins:
    NEVER, then the DELAY due last, then ALWAYS; a range that meets none takes the
    default of ``created_by``. A DELAY without ``marked_at`` counts from
    ``written_at`` (when the file was added, or the partition last written).

    Returns:
        The mergeability and the winning rule's index (None for the default).

    Raises:
        AutoMergeError: a DELAY that cannot be stamped, keys that do not compare.
    """
    met: list[tuple[Mergeability, int]] = []
    for rule in rules:
        try:
            meets = (rule.lower is None or _order_key(upper) >= _order_key(rule.lower)) and (
                rule.upper is None or _order_key(lower) <= _order_key(rule.upper)
            )
        except TypeError:
            raise _error(
                model_name,
                "mergeability",
                f"the keys of {rule.label} cannot be compared with the keys of range {range_id!r}",
                f"from {rule.lower!r}, to {rule.upper!r}; range [{lower!r}, {upper!r}]",
            ) from None
        if not meets:
            continue
        marked_at = rule.marked_at
        marked_at = (
            _utc_naive(_parse_marked_at(marked_at, model_name=model_name))
            if marked_at is not None
            else written_at
        )
        try:
            mergeability = parse_mergeability(
                rule.mergeability, USER, model_name=model_name, marked_at=marked_at
            )
        except AutoMergeError as exc:
            raise _named(
                exc, "mergeability", f"mergeability ({rule.label}, range {range_id!r})"
            ) from None
        met.append((mergeability, rule.index))
    if not met:
        default = default_mergeability(created_by)
        assert default is not None  # created_by is checked by read_options
        return default, None

    def strictness(entry: tuple[Mergeability, int]) -> tuple[int, datetime]:
        mergeability = entry[0]
        if mergeability.mode == NEVER:
            return (2, datetime.max)
        if mergeability.mode == DELAY:
            assert mergeability.due_at is not None
            return (1, mergeability.due_at)
        return (0, datetime.min)

    mergeability, index = max(met, key=strictness)
    return mergeability, (index or None)


@dataclass(frozen=True)
class DataFile:
    """One data file of an Iceberg table, from its ``data_files`` metadata table.

    Attributes:
        path: ``file_path``.
        size_bytes: ``file_size_in_bytes``.
        record_count: ``record_count``.
        min_key: lower bound of the sort column (``readable_metrics``); None when
            the file has no bound (only nulls, or metrics off for the column).
        max_key: upper bound of the sort column.
        min_key_text: ``min_key`` as Spark renders it (``cast(... as string)``).
        max_key_text: ``max_key`` as Spark renders it.
        partition: ``(field, value, value as text)`` per partition field; empty for an
            unpartitioned table.
        added_at: commit time of the snapshot that added the file (naive UTC), if known.
    """

    path: str
    size_bytes: int
    record_count: int
    min_key: Any
    max_key: Any
    min_key_text: str | None = None
    max_key_text: str | None = None
    partition: tuple[tuple[str, Any, str | None], ...] = ()
    added_at: datetime | None = None

    @property
    def partition_id(self) -> str | None:
        """``field=value/...`` (null values as ``null``); None when unpartitioned."""
        if not self.partition:
            return None
        return "/".join(
            f"{name}={'null' if text is None else text}" for name, _, text in self.partition
        )


@dataclass(frozen=True)
class TableLayout:
    """What the where clauses need to know about the table.

    Attributes:
        catalog_name: e.g. ``spark_catalog``.
        table_name: ``<namespace>.<table>``, e.g. ``dbt_merge.daily_events``.
        sort_column_type: Spark SQL type of the sort column, e.g. ``date``.
        identity_fields: ``{partition field: source column}`` of the identity
            partition fields (a where clause on the column selects the partition).
        partition_types: ``{partition field: Spark SQL type}``.
        snapshot_id: the current snapshot, None for a table without one.
    """

    catalog_name: str
    table_name: str
    sort_column_type: str | None = None
    identity_fields: Mapping[str, str] = field(default_factory=dict)
    partition_types: Mapping[str, str] = field(default_factory=dict)
    snapshot_id: int | None = None


def _partition_predicates(
    partition: Sequence[tuple[str, Any, str | None]], layout: TableLayout, *, metadata: bool
) -> list[str]:
    """Equalities on the identity partition fields: on the table's columns (for the
    CALL) or on ``partition.<field>`` of the metadata table (to check the files)."""
    predicates = []
    for name, _, text in partition:
        if name not in layout.identity_fields:
            continue
        column = (
            "partition." + quote_identifier(name)
            if metadata
            else quote_identifier(layout.identity_fields[name])
        )
        if text is None:
            predicates.append(f"{column} is null")
        else:
            predicates.append(f"{column} = {typed_literal(text, layout.partition_types[name])}")
    return predicates


def files_where_clauses(
    members: Sequence[DataFile], sort_column: str, layout: TableLayout
) -> tuple[str, str]:
    """The where clause of ``rewrite_data_files`` for a run of files, and the same
    selection as a predicate over the ``data_files`` metadata table.

    Iceberg plans the rewrite from file metrics: it takes every file whose key bounds
    meet ``[first min, last max]`` (and whose partition matches). The run's files are
    contiguous and no file of the table overlaps another, so within the partition
    that is exactly the run. Identity partition fields are added as equalities; a
    file of another partition that a where clause cannot exclude (a transform such
    as ``days(ts)``, whose files meet the key range) is caught by the executor's check
    of the files predicate, which then skips the merge.
    """
    first, last = members[0], members[-1]
    column = quote_identifier(sort_column)
    key_type = layout.sort_column_type or "string"
    low = typed_literal(first.min_key_text, key_type)
    high = typed_literal(last.max_key_text, key_type)
    call = [f"{column} >= {low}", f"{column} <= {high}"]
    # readable_metrics has one field per leaf column, named by its full (dotted) name
    metrics = "readable_metrics.`" + sort_column.replace("`", "``") + "`"
    files = [f"{metrics}.upper_bound >= {low}", f"{metrics}.lower_bound <= {high}"]
    call += _partition_predicates(first.partition, layout, metadata=False)
    files += _partition_predicates(first.partition, layout, metadata=True)
    return " and ".join(call), " and ".join(files)


def partitions_where_clauses(
    partitions: Sequence[Sequence[tuple[str, Any, str | None]]], layout: TableLayout
) -> tuple[str, str] | None:
    """Where clauses selecting exactly the given partitions (see ``files_where_clauses``).

    Returns None when a partition field is not an identity field: a where clause on
    the table's columns cannot name such a partition exactly.
    """
    if not partitions or any(
        name not in layout.identity_fields for part in partitions for name, _, _ in part
    ):
        return None
    clauses = []
    for metadata in (False, True):
        each = [
            " and ".join(_partition_predicates(part, layout, metadata=metadata))
            for part in partitions
        ]
        clauses.append(" or ".join(f"({c})" for c in each) if len(each) > 1 else each[0])
    return clauses[0], clauses[1]


def _file_range_id(item: DataFile) -> str:
    """A file's range id: its keys (``2024-01-08``, ``2024-01-08..2024-01-14``), after
    its partition (``region=eu:2024-01-08``). Unique, because files do not overlap."""
    keys = item.min_key_text
    if item.max_key_text != item.min_key_text:
        keys = f"{item.min_key_text}..{item.max_key_text}"
    return f"{item.partition_id}:{keys}" if item.partition else str(keys)


def _plan_row(**values: Any) -> dict[str, Any]:
    row = dict.fromkeys(_PLAN_COLUMN_NAMES)
    unknown = set(values) - set(row)
    assert not unknown, unknown
    row.update(values)
    return row


def plan_files(
    files: Sequence[DataFile],
    options: AutoMergeOptions,
    layout: TableLayout,
    *,
    model_name: str,
) -> list[dict[str, Any]]:
    """Plan the merges of a table's data files ordered by ``options.sort_column``.

    One range per file, holding the keys ``[min_key, max_key]`` of its metrics.
    Within a partition the files are sorted by key and tile it like tablets: file
    *i* covers ``(max of file i-1, max of file i]``, so neighbours are contiguous and
    a merged run holds exactly its files. Files of different partitions are never
    contiguous (``rewrite_data_files`` never combines them), so each partition is
    planned on its own, partitions in order of their values. Files without key
    bounds are left alone (reason ``no_key_bounds``).

    Args:
        files: the table's data files, in any order.
        options: from ``read_options``; ``sort_column`` must be set, rules typed.
        layout: table names, types and identity partition fields.
        model_name: named in error text.

    Returns:
        One row (``PLAN_COLUMNS``) per file, in key order.

    Raises:
        AutoMergeError: files that overlap on the key (they are not ranges of the
            key), bad mergeability.
    """
    assert options.sort_column is not None
    by_partition: dict[tuple[Any, ...], list[DataFile]] = {}
    for item in files:
        key = tuple(value for _, value, _ in item.partition)
        by_partition.setdefault(key, []).append(item)
    ids = {
        f.path: _file_range_id(f) if f.min_key is not None and f.max_key is not None else f.path
        for f in files
    }
    rows: list[dict[str, Any]] = []
    merge_count = 0
    for key in sorted(by_partition, key=_order_key):
        group = by_partition[key]
        unbounded = sorted(
            (f for f in group if f.min_key is None or f.max_key is None), key=lambda f: f.path
        )
        bounded = sorted(
            (f for f in group if f.min_key is not None and f.max_key is not None),
            key=lambda f: (_order_key(f.min_key), _order_key(f.max_key), f.path),
        )
        for item in unbounded:
            rows.append(
                _file_row(
                    item,
                    ids,
                    options,
                    layout,
                    mergeability=None,
                    rule=None,
                    action="leave",
                    reason=REASON_NO_KEY_BOUNDS,
                    explanation=(
                        f"the file has no bounds for {options.sort_column} in its metrics "
                        "(only nulls, or metrics turned off for the column by "
                        "write.metadata.metrics.*), so it has no place in the key order"
                    ),
                )
            )
        _check_no_overlap(bounded, options.sort_column, layout, model_name)
        ranges = []
        rules: dict[str, int | None] = {}
        previous = None
        for item in bounded:
            range_id = ids[item.path]
            mergeability, rules[range_id] = resolve_mergeability(
                options.rules,
                item.min_key,
                item.max_key,
                created_by=options.created_by,
                written_at=item.added_at,
                range_id=range_id,
                model_name=model_name,
            )
            ranges.append(
                Range(
                    range_id=range_id,
                    lower=None if previous is None else previous.max_key,
                    upper=item.max_key,
                    size_bytes=item.size_bytes,
                    file_count=1,
                    mergeability=mergeability,
                    created_by=options.created_by,
                    record_count=item.record_count,
                )
            )
            previous = item
        plan = plan_auto_merge(ranges, options.settings, options.now, model_name)
        members_of: dict[int, list[DataFile]] = {}
        for item, decision in zip(bounded, plan.decisions, strict=True):
            if decision.plan_index is not None:
                members_of.setdefault(decision.plan_index, []).append(item)
        clauses = {
            index: files_where_clauses(members, options.sort_column, layout)
            for index, members in members_of.items()
        }
        for item, item_range, decision in zip(bounded, ranges, plan.decisions, strict=True):
            merge_values: dict[str, Any] = {}
            explanation = decision.explanation
            if decision.plan_index is not None:
                merge = plan.merges[decision.plan_index]
                members = members_of[decision.plan_index]
                call_where, files_where = clauses[decision.plan_index]
                explanation = merge.reason
                merge_values = {
                    "merge_index": merge_count + decision.plan_index + 1,
                    "merge_min_key": members[0].min_key_text,
                    "merge_max_key": members[-1].max_key_text,
                    "merge_file_count": merge.file_count,
                    "merge_size_bytes": merge.size_bytes,
                    "merge_where": call_where,
                    "merge_files_where": files_where,
                }
            rows.append(
                _file_row(
                    item,
                    ids,
                    options,
                    layout,
                    mergeability=item_range.mergeability,
                    rule=rules[item_range.range_id],
                    action=decision.action,
                    reason=decision.reason,
                    explanation=explanation,
                    due_at=decision.due_at,
                    **merge_values,
                )
            )
        merge_count += len(plan.merges)
    return _numbered(rows)


def _file_row(
    item: DataFile,
    ids: Mapping[str, str],
    options: AutoMergeOptions,
    layout: TableLayout,
    *,
    mergeability: Mergeability | None,
    rule: int | None,
    **values: Any,
) -> dict[str, Any]:
    return _plan_row(
        catalog_name=layout.catalog_name,
        table_name=layout.table_name,
        snapshot_id=layout.snapshot_id,
        source=SOURCE_FILES,
        sort_column=options.sort_column,
        range_id=ids[item.path],
        partition=item.partition_id,
        min_key=item.min_key_text,
        max_key=item.max_key_text,
        file_count=1,
        size_bytes=item.size_bytes,
        record_count=item.record_count,
        file_paths=[item.path],
        mergeability=None if mergeability is None else str(mergeability),
        mergeability_rule=rule,
        marked_at=None if mergeability is None else mergeability.marked_at,
        target_file_size_bytes=options.settings.split_threshold,
        planned_at=options.now,
        **values,
    )


def _numbered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for index, row in enumerate(rows, start=1):
        row["range_index"] = index
    return rows


def _check_no_overlap(
    files: Sequence[DataFile], sort_column: str, layout: TableLayout, model_name: str
) -> None:
    """Sorted files must hold disjoint key intervals: a key on two files has no single
    range, and a where clause could not select one file without the other."""
    for previous, item in zip(files, files[1:], strict=False):
        if _order_key(item.min_key) <= _order_key(previous.max_key):
            where = f" in partition {item.partition_id}" if item.partition else ""
            raise _error(
                model_name,
                "sort_column",
                f"the data files of {layout.table_name} overlap on {sort_column}{where}, so "
                f"they are not ranges of the key: {previous.path} holds "
                f"[{previous.min_key_text}, {previous.max_key_text}] and {item.path} holds "
                f"[{item.min_key_text}, {item.max_key_text}]. Sort the table by "
                f"{sort_column} first (ALTER TABLE ... WRITE ORDERED BY {sort_column}, then "
                "CALL <catalog>.system.rewrite_data_files(..., strategy => 'sort')), "
                "choose another sort_column, or plan with source 'partitions'",
                repr(sort_column),
            )


def plan_partitions(
    rows: Sequence[Mapping[str, Any]],
    options: AutoMergeOptions,
    layout: TableLayout,
    *,
    model_name: str,
) -> list[dict[str, Any]]:
    """Plan the merges of a table's partitions (ranges of ``ranges_from_partitions``).

    Iceberg keeps its partitions: executing a planned run compacts the *files* of
    its partitions (``rewrite_data_files`` never combines files of two partitions).

    Args:
        rows: one dict per partition with the columns of the ``partitions`` metadata
            table (``partition`` as a dict), plus ``partition_text`` (the values as
            Spark renders them, a dict) and ``file_paths`` (its data files).
        options: from ``read_options``, rules typed as tuples of partition values.
        layout: table names, types and identity partition fields.
        model_name: named in error text.

    Returns:
        One row (``PLAN_COLUMNS``) per partition, in key order.
    """
    by_key: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for row in rows:
        partition = row.get("partition") or {}
        by_key[tuple(partition.values())] = row
    chosen: dict[tuple[Any, ...], tuple[Mergeability, int | None]] = {}

    def mergeability_of(row: Mapping[str, Any]) -> Mergeability:
        key = tuple((row.get("partition") or {}).values())
        chosen[key] = resolve_mergeability(
            options.rules,
            key,
            key,
            created_by=options.created_by,
            written_at=_local_naive_to_utc(row.get("last_updated_at")),
            range_id=_partition_label(row),
            model_name=model_name,
        )
        return chosen[key][0]

    ranges = ranges_from_partitions(
        rows, model_name=model_name, mergeability=mergeability_of, created_by=options.created_by
    )
    plan = plan_auto_merge(ranges, options.settings, options.now, model_name)
    keys = [() if item.upper is None else item.upper for item in ranges]

    def parts(key: tuple[Any, ...]) -> list[tuple[str, Any, str | None]]:
        row = by_key[key]
        texts = row.get("partition_text") or {}
        values = (row.get("partition") or {}).items()
        return [(name, value, texts.get(name)) for name, value in values]

    def text(key: tuple[Any, ...]) -> str | None:
        return "/".join("null" if t is None else str(t) for _, _, t in parts(key)) or None

    out = []
    for item, key, decision in zip(ranges, keys, plan.decisions, strict=True):
        row = by_key[key]
        merge_values: dict[str, Any] = {}
        explanation = decision.explanation
        if decision.plan_index is not None:
            merge = plan.merges[decision.plan_index]
            member_keys = [
                k for k, r in zip(keys, ranges, strict=True) if r.range_id in merge.range_ids
            ]
            clauses = partitions_where_clauses([parts(k) for k in member_keys], layout)
            explanation = merge.reason
            if clauses is None:
                explanation += (
                    "; not executable: a where clause can only select identity partitions, "
                    f"and {layout.table_name} has partition fields "
                    + ", ".join(n for n, _, _ in parts(key) if n not in layout.identity_fields)
                )
            merge_values = {
                "merge_index": decision.plan_index + 1,
                "merge_min_key": text(member_keys[0]),
                "merge_max_key": text(member_keys[-1]),
                "merge_file_count": merge.file_count,
                "merge_size_bytes": merge.size_bytes,
                "merge_where": None if clauses is None else clauses[0],
                "merge_files_where": None if clauses is None else clauses[1],
            }
        mergeability, rule = chosen[key]
        out.append(
            _plan_row(
                catalog_name=layout.catalog_name,
                table_name=layout.table_name,
                snapshot_id=layout.snapshot_id,
                source=SOURCE_PARTITIONS,
                sort_column=None,
                range_id=item.range_id,
                partition=item.range_id if key else None,
                min_key=text(key),
                max_key=text(key),
                file_count=item.file_count,
                size_bytes=item.size_bytes,
                record_count=item.record_count,
                file_paths=sorted(row.get("file_paths") or []),
                mergeability=str(mergeability),
                mergeability_rule=rule,
                marked_at=mergeability.marked_at,
                action=decision.action,
                reason=decision.reason,
                explanation=explanation,
                due_at=decision.due_at,
                target_file_size_bytes=options.settings.split_threshold,
                planned_at=options.now,
                **merge_values,
            )
        )
    return _numbered(out)


def _partition_label(row: Mapping[str, Any]) -> str:
    partition = row.get("partition") or {}
    return "/".join(f"{k}={'null' if v is None else v}" for k, v in partition.items()) or (
        "(unpartitioned)"
    )


# -- Spark: reading the table and writing the plan ------------------------------------------


def plan_table(
    session: Any,
    table: Any,
    *,
    model_name: str,
    config: Mapping[str, Any] | None = None,
) -> Any:
    """Plan the auto-merge of an Iceberg table from its own metadata tables.

    The ranges are the table's data files ordered by a sort column (``source:
    files``, the default; from ``<table>.data_files`` and its ``readable_metrics``) or
    its partitions (``source: partitions``, from ``<table>.partitions``). Options come
    from ``config`` (a dbt model's ``auto_merge`` config), else from the table
    properties ``dbt_merge.auto_merge.<option>``, else their defaults:

    ================  ========================================================
    ``source``        ``files`` (default) or ``partitions``
    ``sort_column``   files only; default: the first field of the table's sort
                      order (``ALTER TABLE ... WRITE ORDERED BY``)
    ``threshold``     0.25; a merge may reach ``threshold x split_threshold``
    ``split_threshold``  1 GiB; also the ``target-file-size-bytes`` of the rewrite
    ``file_max``      10000 files per merge
    ``mergeability``  one mergeability for every range, or a list of rules by key
                      range (``parse_rules``); property value: JSON
    ``created_by``    ``system`` (ranges without a rule are ALWAYS) or ``user``
                      (NEVER)
    ``now``           config only: ISO timestamp DELAYs are compared with;
                      empty: the current time
    ================  ========================================================

    Args:
        session: the SparkSession.
        table: the table's name (``db.tbl`` or ``catalog.db.tbl``) or a DataFrame
            that reads it, e.g. ``dbt.ref("daily_events")``.
        model_name: named in error text.
        config: the options.

    Returns:
        A DataFrame with one row per range in key order (``PLAN_COLUMNS``): its
        mergeability, whether it is merged or left alone and why, and for merged
        ranges the merge's number, totals and the where clauses the executor
        (``dbt_merge.execute_auto_merge``) uses.

    Raises:
        AutoMergeError: bad options, a table that is not Iceberg, files that overlap
            on the sort column.

    Examples:
        >>> plan = plan_table(spark, "db.events", model_name="events_plan",
        ...                   config={"sort_column": "event_date", "threshold": 0.5})
    """
    catalog_name, table_name = _table_identity(session, table, model_name)
    iceberg = _load_iceberg_table(session, f"{catalog_name}.{table_name}", model_name)
    properties = {str(k): str(v) for k, v in dict(iceberg.properties()).items()}
    options = read_options(config, properties, model_name=model_name, table_name=table_name)
    snapshot = iceberg.currentSnapshot()
    schema = iceberg.schema()
    identity = {
        str(f.name()): str(schema.findColumnName(f.sourceId()))
        for f in iceberg.spec().fields()
        if f.transform().isIdentity()
    }
    metadata = f"{quote_identifier(catalog_name)}.{quote_identifier(table_name)}"
    data_files = session.table(f"{metadata}.data_files")
    partition_types = {}
    if "partition" in data_files.columns:
        partition_types = {
            f.name: f.dataType.simpleString() for f in data_files.schema["partition"].dataType
        }
    layout = TableLayout(
        catalog_name=catalog_name,
        table_name=table_name,
        identity_fields=identity,
        partition_types=partition_types,
        snapshot_id=None if snapshot is None else int(snapshot.snapshotId()),
    )
    if options.source == SOURCE_FILES:
        sort_column = options.sort_column or _sort_order_column(iceberg, schema, model_name)
        metrics = data_files.schema["readable_metrics"].dataType
        if sort_column not in metrics.fieldNames():
            raise _error(
                model_name,
                "sort_column"
                if options.origins["sort_column"] != "table property"
                else f"{PROPERTY_PREFIX}sort_column",
                f"{table_name} has no column {sort_column!r} with metrics; columns: "
                + ", ".join(metrics.fieldNames()),
                repr(sort_column),
            )
        key_type = metrics[sort_column].dataType["lower_bound"].dataType.simpleString()
        layout = replace(layout, sort_column_type=key_type)
        rules = _typed_rules(session, options.rules, [key_type], model_name, scalar=True)
        options = replace(options, sort_column=sort_column, rules=rules)
        files = _read_files(session, metadata, sort_column, partition_types, options.rules)
        rows = plan_files(files, options, layout, model_name=model_name)
    else:
        types = list(partition_types.values())
        rules = _typed_rules(session, options.rules, types, model_name, scalar=len(types) == 1)
        if len(types) == 1:  # partition keys are tuples, also with one field
            rules = tuple(
                replace(
                    r,
                    lower=None if r.lower is None else (r.lower,),
                    upper=None if r.upper is None else (r.upper,),
                )
                for r in rules
            )
        options = replace(options, rules=rules)
        rows = plan_partitions(
            _read_partitions(session, metadata, partition_types),
            options,
            layout,
            model_name=model_name,
        )
    merges = {row["merge_index"] for row in rows if row["merge_index"] is not None}
    logger.info(
        "auto-merge plan of %s.%s (%s): %d ranges, %d merges",
        catalog_name,
        table_name,
        options.source,
        len(rows),
        len(merges),
    )
    return _plan_dataframe(session, rows)


def _table_identity(session: Any, table: Any, model_name: str) -> tuple[str, str]:
    """``(catalog, namespace.table)`` of a table name or of a DataFrame reading a table."""
    jvm = session._jvm
    if isinstance(table, str):
        try:
            found = jvm.org.apache.iceberg.spark.Spark3Util.catalogAndIdentifier(
                session._jsparkSession, table
            )
        except Exception:  # py4j raises the JVM's parse error
            raise _error(model_name, "table", "is not a table name", repr(table)) from None
        identifier = found.identifier()
        parts = [*list(identifier.namespace()), identifier.name()]
        return str(found.catalog().name()), ".".join(str(p) for p in parts)
    plan = getattr(getattr(table, "_jdf", None), "queryExecution", None)
    if plan is None:
        raise _error(
            model_name,
            "table",
            "must be a table name or a DataFrame that reads a table",
            repr(table),
        )
    node = table._jdf.queryExecution().analyzed()
    while node.getClass().getSimpleName() == "SubqueryAlias":
        node = node.child()
    if node.getClass().getSimpleName() != "DataSourceV2Relation" or node.identifier().isEmpty():
        raise _error(
            model_name,
            "table",
            "a DataFrame must read one table as it is (dbt.ref or spark.table, no "
            "filters or projections)",
            node.getClass().getSimpleName(),
        )
    identifier = node.identifier().get()
    parts = [*list(identifier.namespace()), identifier.name()]
    return str(node.catalog().get().name()), ".".join(str(p) for p in parts)


def _load_iceberg_table(session: Any, name: str, model_name: str) -> Any:
    try:
        return session._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            session._jsparkSession, name
        )
    except Exception as exc:  # a Py4JJavaError: no such table, or not Iceberg
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise _error(
            model_name, "table", f"must be an Iceberg table ({message[:200]})", repr(name)
        ) from None


def _sort_order_column(iceberg: Any, schema: Any, model_name: str) -> str:
    fields = list(iceberg.sortOrder().fields())
    if fields and fields[0].transform().isIdentity():
        return str(schema.findColumnName(fields[0].sourceId()))
    raise _error(
        model_name,
        "sort_column",
        "is required for source 'files': the table has no sort order to take it from "
        "(ALTER TABLE ... WRITE ORDERED BY <column> sets one)",
        "None",
    )


def _typed_rules(
    session: Any,
    rules: Sequence[MergeabilityRule],
    types: Sequence[str],
    model_name: str,
    *,
    scalar: bool,
) -> tuple[MergeabilityRule, ...]:
    """Rule bounds read as the key's Spark type (``try_cast``), so they compare with
    the keys Spark returns. ``scalar``: one key column, bounds are single values;
    otherwise a bound is a list with one value per partition field."""
    wanted: list[tuple[MergeabilityRule, str, Any]] = []
    for rule in rules:
        for end, value in (("from", rule.lower), ("to", rule.upper)):
            if value is None:
                continue
            values = [value] if scalar else value
            if (
                not types
                or isinstance(values, str | bytes)
                or not isinstance(values, Sequence)
                or len(values) != len(types)
            ):
                expected = (
                    "no keys: the table is not partitioned"
                    if not types
                    else "one value"
                    if scalar
                    else f"a list of {len(types)} values, one per partition field"
                )
                raise _error(
                    model_name,
                    "mergeability",
                    f"'{end}' of {rule.label} must be {expected}",
                    repr(value),
                )
            wanted.append((rule, end, values))
    if not wanted:
        return tuple(rules)
    expressions = [
        f"try_cast({string_literal(str(v))} as {t})"
        for _, _, values in wanted
        for v, t in zip(values, types, strict=True)
    ]
    cast = list(session.sql("select " + ", ".join(expressions)).first())
    typed: dict[tuple[int, str], Any] = {}
    for rule, end, values in wanted:
        parts = [cast.pop(0) for _ in values]
        for value, part, sql_type in zip(values, parts, types, strict=True):
            if part is None:
                raise _error(
                    model_name,
                    "mergeability",
                    f"'{end}' of {rule.label} cannot be read as {sql_type}",
                    repr(value),
                )
        typed[(rule.index, end)] = parts[0] if scalar else tuple(parts)
    out = []
    for rule in rules:
        lower = typed.get((rule.index, "from"), rule.lower)
        upper = typed.get((rule.index, "to"), rule.upper)
        if lower is not None and upper is not None and _order_key(lower) > _order_key(upper):
            raise _error(
                model_name,
                "mergeability",
                f"{rule.label} must have from <= to",
                f"from {rule.lower!r}, to {rule.upper!r}",
            )
        out.append(replace(rule, lower=lower, upper=upper))
    return tuple(out)


def _read_files(
    session: Any,
    metadata: str,
    sort_column: str,
    partition_types: Mapping[str, str],
    rules: Sequence[MergeabilityRule],
) -> list[DataFile]:
    metrics = "readable_metrics.`" + sort_column.replace("`", "``") + "`"
    columns = [
        "file_path",
        "file_size_in_bytes",
        "record_count",
        f"{metrics}.lower_bound as min_key",
        f"{metrics}.upper_bound as max_key",
        f"cast({metrics}.lower_bound as string) as min_key_text",
        f"cast({metrics}.upper_bound as string) as max_key_text",
    ]
    if partition_types:
        texts = ", ".join(
            f"cast(partition.{quote_identifier(name)} as string) as {quote_identifier(name)}"
            for name in partition_types
        )
        columns += ["partition", f"struct({texts}) as partition_text"]
    rows = session.sql(f"select {', '.join(columns)} from {metadata}.data_files").collect()
    added: dict[str, datetime | None] = {}
    if any(rule.marked_at is None and _is_delay(rule.mergeability) for rule in rules):
        # DELAY rules without marked_at count from the commit that added each file
        written = session.sql(
            f"select e.data_file.file_path as file_path, s.committed_at "
            f"from {metadata}.entries as e "
            f"left join {metadata}.snapshots as s on e.snapshot_id = s.snapshot_id "
            f"where e.status < 2 and e.data_file.content = 0"
        ).collect()
        added = {r["file_path"]: _local_naive_to_utc(r["committed_at"]) for r in written}
    files = []
    for row in rows:
        partition: tuple[tuple[str, Any, str | None], ...] = ()
        if partition_types:
            values, texts = row["partition"].asDict(), row["partition_text"].asDict()
            partition = tuple((name, values[name], texts[name]) for name in partition_types)
        files.append(
            DataFile(
                path=row["file_path"],
                size_bytes=int(row["file_size_in_bytes"]),
                record_count=int(row["record_count"]),
                min_key=row["min_key"],
                max_key=row["max_key"],
                min_key_text=row["min_key_text"],
                max_key_text=row["max_key_text"],
                partition=partition,
                added_at=added.get(row["file_path"]),
            )
        )
    return files


def _is_delay(value: Any) -> bool:
    if isinstance(value, Mergeability):
        return value.mode == DELAY
    if isinstance(value, Mapping):
        return str(value.get("mode", "")).strip().upper() == DELAY and not value.get("marked_at")
    return isinstance(value, str) and value.strip().upper().startswith(DELAY)


def _read_partitions(
    session: Any, metadata: str, partition_types: Mapping[str, str]
) -> list[dict[str, Any]]:
    if not partition_types:
        rows = [
            r.asDict(recursive=True)
            for r in session.sql(f"select * from {metadata}.partitions").collect()
        ]
        paths = [
            r["file_path"]
            for r in session.sql(f"select file_path from {metadata}.data_files").collect()
        ]
        for row in rows:
            row["file_paths"] = paths
        return rows
    texts = ", ".join(
        f"cast(partition.{quote_identifier(name)} as string) as {quote_identifier(name)}"
        for name in partition_types
    )
    rows = [
        r.asDict(recursive=True)
        for r in session.sql(
            f"select *, struct({texts}) as partition_text from {metadata}.partitions"
        ).collect()
    ]
    paths: dict[tuple[Any, ...], list[str]] = {}
    for r in session.sql(
        f"select partition, collect_list(file_path) as file_paths from {metadata}.data_files "
        "group by partition"
    ).collect():
        paths[tuple(r["partition"].asDict().values())] = list(r["file_paths"])
    for row in rows:
        row["file_paths"] = paths.get(tuple(row["partition"].values()), [])
    return rows


def _plan_dataframe(session: Any, rows: Sequence[Mapping[str, Any]]) -> Any:
    from pyspark.sql.types import _parse_datatype_string

    schema = _parse_datatype_string(
        "struct<" + ", ".join(f"`{name}`: {sql_type}" for name, sql_type in PLAN_COLUMNS) + ">"
    )

    def value(item: Any) -> Any:
        # naive UTC datetimes: aware, so Spark stores them as UTC whatever the local zone
        if isinstance(item, datetime):
            return _utc_naive(item).replace(tzinfo=UTC)
        return item

    data = [tuple(value(row[name]) for name, _ in PLAN_COLUMNS) for row in rows]
    return session.createDataFrame(data, schema)
