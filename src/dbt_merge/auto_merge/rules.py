"""Mergeability by key range: the ``mergeability`` option's rules, and the mergeability
a range gets from the rules it meets (the strictest wins)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dbt_merge.auto_merge.errors import AutoMergeError, renamed_setting, setting_error
from dbt_merge.auto_merge.mergeability import (
    DELAY,
    NEVER,
    USER,
    Mergeability,
    default_mergeability,
    parse_marked_at,
    parse_mergeability,
    utc_naive,
)
from dbt_merge.auto_merge.ranges import order_key

_RULE_KEYS = ("from", "to", "mergeability", "marked_at")


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

    @property
    def counts_from_write(self) -> bool:
        """Whether this is a DELAY without ``marked_at``: it counts from when each range
        was written, so ``plan_table`` must read when each file was added."""
        value = self.mergeability
        if self.marked_at is not None:
            return False
        if isinstance(value, Mergeability):
            return value.mode == DELAY
        if isinstance(value, Mapping):
            return str(value.get("mode", "")).strip().upper() == DELAY and not value.get(
                "marked_at"
            )
        return isinstance(value, str) and value.strip().upper().startswith(DELAY)


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
                raise setting_error(
                    model_name,
                    setting,
                    f"rule {index} must be a dict with from, to, mergeability, marked_at",
                    repr(rule),
                )
            unknown = sorted(str(k) for k in rule if k not in _RULE_KEYS)
            if unknown:
                raise setting_error(
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
        raise setting_error(
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
                marked_at = parse_marked_at(marked_at, model_name=model_name)
            parse_mergeability(
                rule.mergeability, USER, model_name=model_name, marked_at=marked_at or datetime.min
            )
        except AutoMergeError as exc:
            raise renamed_setting(exc, "mergeability", f"{setting} ({rule.label})") from None
    return tuple(rules)


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
            meets = (rule.lower is None or order_key(upper) >= order_key(rule.lower)) and (
                rule.upper is None or order_key(lower) <= order_key(rule.upper)
            )
        except TypeError:
            raise setting_error(
                model_name,
                "mergeability",
                f"the keys of {rule.label} cannot be compared with the keys of range {range_id!r}",
                f"from {rule.lower!r}, to {rule.upper!r}; range [{lower!r}, {upper!r}]",
            ) from None
        if not meets:
            continue
        marked_at = rule.marked_at
        marked_at = (
            utc_naive(parse_marked_at(marked_at, model_name=model_name))
            if marked_at is not None
            else written_at
        )
        try:
            mergeability = parse_mergeability(
                rule.mergeability, USER, model_name=model_name, marked_at=marked_at
            )
        except AutoMergeError as exc:
            raise renamed_setting(
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
