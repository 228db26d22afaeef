"""Settings of bin packing, offline planning and defragment, each with one default; their
validation; the merge reasons and bin statuses; bin ids; the error.

Bin ids are the first 32 hex digits of
``sha256(repr(("bin", schema value, correlation value, first member id)))``, so a
pending bin keeps its id while it grows across runs and a dbt model can ``merge``
the output by ``bin_id``. Item ids must be unique (the engines raise on a repeat
within a task; the Spark functions cast ids to string).
"""

from __future__ import annotations

import hashlib
import numbers
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dbt_merge.core.errors import DbtMergeError, setting_message

# -- settings and their defaults (NiFi's in brackets where they differ)
MIN_ENTRIES_DEFAULT = 1
MAX_ENTRIES_DEFAULT = 1000
MIN_BYTES_DEFAULT = 0
MAX_BYTES_DEFAULT = None  # unbounded
MAX_BIN_AGE_DEFAULT = None  # bins never time out
MAX_BINS_DEFAULT = None  # unbounded [5]
MAX_BINS_SCOPE_DEFAULT = "global"  # the oldest open bin of any group is evicted
MAX_BINS_SCOPES = ("global", "group")
OFFLINE_STRATEGY_DEFAULT = "first_fit_decreasing"
OFFLINE_STRATEGIES = ("first_fit_decreasing", "best_fit_decreasing")
# the first fragment.index of a set: 1 as NiFi MergeContent's split processors write it
# (1..count), 0 as the record processors do (0..count-1) for MergeRecord
FRAGMENT_INDEX_BASE_DEFAULT = 1
FRAGMENT_INDEX_BASES = (0, 1)

# -- merge reasons (NiFi's MergeContent names)
MAX_BYTES_THRESHOLD_REACHED = "MAX_BYTES_THRESHOLD_REACHED"
MAX_ENTRIES_THRESHOLD_REACHED = "MAX_ENTRIES_THRESHOLD_REACHED"
MIN_THRESHOLDS_REACHED = "MIN_THRESHOLDS_REACHED"
TIMEOUT = "TIMEOUT"
BIN_MANAGER_FULL = "BIN_MANAGER_FULL"

# -- bin status
MERGED = "merged"
PENDING = "pending"
FAILED = "failed"

BIN_ID_HEX_DIGITS = 32


class BinPackingError(DbtMergeError):
    """Bad settings or input for bin packing or defragment (names model, setting, value)."""


def _setting_error(
    model_name: str, setting: str, problem: str, value: Any, what: str = "bin packing"
) -> BinPackingError:
    return BinPackingError(setting_message(what, model_name, setting, problem, repr(value)))


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _bin_id(*parts: Hashable) -> str:
    """Stable id: the first 32 hex digits of sha256(repr(parts)).

    Parts are a kind (``'bin'``, ``'set'``, ``'fragment'``, ``'offline'``), the group
    (schema and correlation value, or the fragment identifier) and the first member's
    id; their repr is stable for strings, integers and None.
    """
    return hashlib.sha256(repr(parts).encode("utf-8")).hexdigest()[:BIN_ID_HEX_DIGITS]


@dataclass(frozen=True)
class BinPackingSettings:
    """NiFi MergeContent's bin-packing properties, each with one default.

    Attributes:
        min_entries: a bin left open when the input is exhausted is merged only if it
            holds at least this many items (default 1).
        max_entries: a bin is merged as soon as it holds this many items (default 1000).
        min_bytes: like ``min_entries``, for the bin's total size (default 0).
        max_bytes: an item never goes into a bin it would take past this size; a bin
            is merged as soon as it reaches it; a larger item is a bin of its own
            (default None: unbounded).
        max_bin_age: a ``datetime.timedelta``; a bin whose age (from its first item's
            arrival) is strictly greater is merged with ``TIMEOUT`` (default None:
            never).
        max_bins: at most this many bins are open; opening another merges the
            oldest with ``BIN_MANAGER_FULL`` (default None: unbounded).
        max_bins_scope: ``'global'`` counts open bins over all groups and evicts the
            oldest of any group (NiFi; the groups are then coupled and Spark packs
            them in one task); ``'group'`` applies ``max_bins`` to each group on its
            own (default ``'global'``).
    """

    min_entries: int = MIN_ENTRIES_DEFAULT
    max_entries: int = MAX_ENTRIES_DEFAULT
    min_bytes: int = MIN_BYTES_DEFAULT
    max_bytes: int | None = MAX_BYTES_DEFAULT
    max_bin_age: timedelta | None = MAX_BIN_AGE_DEFAULT
    max_bins: int | None = MAX_BINS_DEFAULT
    max_bins_scope: str = MAX_BINS_SCOPE_DEFAULT

    def validate(self, model_name: str) -> None:
        """Raise ``BinPackingError`` (a ``ValueError``) on the first bad setting.

        Args:
            model_name: named in the message, so a dbt user finds the model to fix.

        Raises:
            BinPackingError: e.g. ``dbt_merge bin packing in model m, setting
                'max_entries': must be > 0 (got 0)``.
        """
        for name, minimum, optional in (
            ("min_entries", 1, False),
            ("max_entries", 1, False),
            ("min_bytes", 0, False),
            ("max_bytes", 1, True),
            ("max_bins", 1, True),
        ):
            value = getattr(self, name)
            if value is None and optional:
                continue
            if not _is_int(value):
                kind = "an integer or None" if optional else "an integer"
                raise _setting_error(model_name, name, f"must be {kind}", value)
            if value < minimum:
                bound = "> 0" if minimum == 1 else ">= 0"
                raise _setting_error(model_name, name, f"must be {bound}", value)
        _validate_max_bin_age(self.max_bin_age, model_name, "bin packing")
        if self.max_bins_scope not in MAX_BINS_SCOPES:
            raise _setting_error(
                model_name,
                "max_bins_scope",
                "must be one of " + ", ".join(repr(s) for s in MAX_BINS_SCOPES),
                self.max_bins_scope,
            )
        if self.min_entries > self.max_entries:
            raise _setting_error(
                model_name,
                "min_entries",
                f"must be <= 'max_entries' ({self.max_entries}), "
                "a bin is merged when it reaches max_entries",
                self.min_entries,
            )
        if self.max_bytes is not None and self.min_bytes > self.max_bytes:
            raise _setting_error(
                model_name,
                "min_bytes",
                f"must be <= 'max_bytes' ({self.max_bytes}), "
                "a bin is merged when it reaches max_bytes",
                self.min_bytes,
            )


def _validate_max_bin_age(max_bin_age: Any, model_name: str, what: str) -> None:
    if max_bin_age is None:
        return
    if not isinstance(max_bin_age, timedelta):
        raise _setting_error(
            model_name, "max_bin_age", "must be a datetime.timedelta or None", max_bin_age, what
        )
    if max_bin_age <= timedelta(0):
        raise _setting_error(model_name, "max_bin_age", "must be > 0", max_bin_age, what)


def _validate_fragment_index_base(base: Any, model_name: str) -> None:
    if not _is_int(base) or base not in FRAGMENT_INDEX_BASES:
        raise _setting_error(
            model_name,
            "fragment_index_base",
            "must be 1 (indexes 1..count, NiFi MergeContent) or 0 (indexes 0..count-1, "
            "NiFi MergeRecord)",
            base,
            "defragment",
        )


def validate_offline(
    max_bytes: Any, max_entries: Any, strategy: Any, model_name: str = "bin_packing"
) -> None:
    """Check the offline planner's options (messages as ``BinPackingSettings.validate``)."""
    if max_bytes is None:
        raise _setting_error(model_name, "max_bytes", "must be set for offline planning", None)
    if not _is_int(max_bytes) or max_bytes <= 0:
        raise _setting_error(model_name, "max_bytes", "must be an integer > 0", max_bytes)
    if max_entries is not None and (not _is_int(max_entries) or max_entries <= 0):
        raise _setting_error(
            model_name, "max_entries", "must be an integer > 0 or None", max_entries
        )
    if strategy not in OFFLINE_STRATEGIES:
        raise _setting_error(
            model_name,
            "strategy",
            "must be one of " + ", ".join(repr(s) for s in OFFLINE_STRATEGIES),
            strategy,
        )
