"""When a range may be merged automatically: NEVER, ALWAYS or DELAY (Accumulo's
``TabletMergeability``), the creators' defaults, and reading mergeabilities, delays and
timestamps from dbt config or table properties (SEMANTICS.md D.2)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from dbt_merge.auto_merge.errors import setting_error

NEVER = "NEVER"
ALWAYS = "ALWAYS"
DELAY = "DELAY"
MODES = (NEVER, ALWAYS, DELAY)

SYSTEM = "system"
USER = "user"
CREATORS = (SYSTEM, USER)

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

    def problem(self, where: str) -> tuple[str, Any] | None:
        """What makes a mergeability built by hand unusable, and the value at fault:
        an unknown mode, or a DELAY without a duration >= 0 or without ``marked_at``
        (``parse_mergeability`` never returns one). ``where`` names it in the text,
        e.g. ``of range 'a'``. None when it is complete."""
        if self.mode not in MODES:
            return f"unknown mergeability {where}, expected NEVER, ALWAYS or DELAY", self.mode
        if self.mode != DELAY:
            return None
        if not isinstance(self.delay, timedelta):
            return f"DELAY {where} needs a duration, e.g. DELAY:1h or DELAY 3600s", self.delay
        if self.delay < timedelta():
            return "a delay must be >= 0", self.delay
        if not isinstance(self.marked_at, datetime):
            problem = "needs the time it was marked (marked_at) to know when it is due"
            return f"DELAY {where} {problem}", self.marked_at
        return None

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
        raise setting_error(
            model_name,
            setting,
            "a delay must be a duration such as 90s, 1h or 1h30m (units ms, s, m, h, d), "
            "a number of seconds or a timedelta",
            repr(value),
        )
    if delay < timedelta():
        raise setting_error(model_name, setting, "a delay must be >= 0", repr(value))
    return delay


def parse_marked_at(value: Any, *, model_name: str) -> datetime:
    """A DELAY's ``marked_at``: a ``datetime`` or an ISO-8601 timestamp."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.strip())
        except ValueError:
            pass
    raise setting_error(
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
            raise setting_error(
                model_name, "created_by", "must be 'system' or 'user'", repr(created_by)
            )
        return default
    if isinstance(value, Mergeability):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.upper() in (NEVER, ALWAYS):
            return Mergeability(text.upper())
        delay_match = _DELAY_RE.fullmatch(text)
        if text.upper() == DELAY or (delay_match and not delay_match.group(1).strip()):
            raise setting_error(
                model_name,
                "mergeability",
                "DELAY needs a duration, e.g. DELAY:1h or DELAY 3600s",
                repr(value),
            )
        if not delay_match:
            raise setting_error(
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
            raise setting_error(
                model_name,
                "mergeability",
                f"unknown keys [{', '.join(unknown)}], supported: mode, delay, marked_at",
                repr(dict(value)),
            )
        mode = value.get("mode")
        mode = mode.strip().upper() if isinstance(mode, str) else mode
        if mode not in MODES:
            raise setting_error(
                model_name,
                "mergeability",
                "unknown mergeability mode, expected NEVER, ALWAYS or DELAY",
                repr(dict(value)),
            )
        if mode != DELAY:
            if value.get("delay") is not None or value.get("marked_at") is not None:
                raise setting_error(
                    model_name,
                    "mergeability",
                    f"{mode} takes no delay or marked_at",
                    repr(dict(value)),
                )
            return Mergeability(mode)
        if value.get("delay") is None:
            raise setting_error(
                model_name,
                "mergeability",
                "DELAY needs a duration, e.g. DELAY:1h or DELAY 3600s",
                repr(dict(value)),
            )
        delay = parse_duration(value["delay"], model_name=model_name)
        if value.get("marked_at") is not None:
            marked_at = parse_marked_at(value["marked_at"], model_name=model_name)
        return _delay(delay, marked_at, dict(value), model_name)
    raise setting_error(
        model_name,
        "mergeability",
        "must be a string such as 'NEVER', 'ALWAYS' or 'DELAY:1h', or a dict",
        repr(value),
    )


def _delay(
    delay: timedelta, marked_at: datetime | None, value: Any, model_name: str
) -> Mergeability:
    if marked_at is None:
        raise setting_error(
            model_name,
            "mergeability",
            "DELAY needs the time it was marked (marked_at) to know when it is due",
            repr(value),
        )
    return Mergeability.after(delay, marked_at)


def utc_naive(value: datetime) -> datetime:
    """A naive datetime is taken as UTC; an aware one is converted to UTC."""
    if value.tzinfo is None:
        return value
    return value.astimezone(UTC).replace(tzinfo=None)


def local_naive_to_utc(value: datetime | None) -> datetime | None:
    """PySpark collects timestamps as naive datetimes in the Python process's zone."""
    if value is None:
        return None
    return value.astimezone(UTC).replace(tzinfo=None)
