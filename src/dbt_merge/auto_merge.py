"""Auto-merge planner: which runs of small, adjacent ranges of a table to merge.

A pure planner (no Spark) after Accumulo 4.x tablet auto-merge
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

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

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


class AutoMergeError(ValueError):
    """Bad auto-merge input; the text names the model, the setting and the value."""


def _error(model_name: str, setting: str, problem: str, got: str) -> AutoMergeError:
    return AutoMergeError(
        f"dbt_merge auto-merge in model {model_name}, setting '{setting}': {problem} (got {got})"
    )


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
    compared = ""
    try:
        for index, item in enumerate(checked):
            compared = f"range {item.range_id!r} {item.key_range}"
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
            compared = (
                f"range {prev.range_id!r} {prev.key_range} and "
                f"range {item.range_id!r} {item.key_range}"
            )
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
