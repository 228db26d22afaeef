"""The options of ``plan_table``: from the model's ``auto_merge`` config, else the
table's properties ``dbt_merge.auto_merge.<option>``, else their defaults; resolved and
checked before any table is read."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from dbt_merge.auto_merge.errors import AutoMergeError, renamed_setting, setting_error
from dbt_merge.auto_merge.mergeability import CREATORS, SYSTEM, utc_naive
from dbt_merge.auto_merge.rules import MergeabilityRule, parse_rules
from dbt_merge.auto_merge.settings import (
    FILE_MAX_DEFAULT,
    SETTINGS_KEYS,
    SPLIT_THRESHOLD_DEFAULT,
    THRESHOLD_DEFAULT,
    AutoMergeSettings,
)

SOURCE_FILES = "files"
SOURCE_PARTITIONS = "partitions"
SOURCES = (SOURCE_FILES, SOURCE_PARTITIONS)
SOURCE_DEFAULT = SOURCE_FILES
CREATED_BY_DEFAULT = SYSTEM

# Table properties read by plan_table: dbt_merge.auto_merge.<option>; model config wins.
PROPERTY_PREFIX = "dbt_merge.auto_merge."
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


def _parse_now(value: Any, model_name: str) -> datetime:
    if value is None or (isinstance(value, str) and not value.strip()):
        return datetime.now(UTC).replace(tzinfo=None)
    if isinstance(value, datetime):
        return utc_naive(value)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    if isinstance(value, str):
        try:
            return utc_naive(datetime.fromisoformat(value.strip()))
        except ValueError:
            pass
    raise setting_error(
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
            raise setting_error(model_name, setting, "must be a number", repr(text)) from None
    if name in ("split_threshold", "file_max"):
        try:
            return int(text.strip())
        except ValueError:
            raise setting_error(model_name, setting, "must be a whole number", repr(text)) from None
    if name == "mergeability":
        try:
            return json.loads(text)
        except ValueError:
            return text  # a bare NEVER, ALWAYS or DELAY:1h
    return text


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
        raise setting_error(model_name, "auto_merge", "must be a dict of options", repr(config))
    config = dict(config or {})
    unknown = sorted(str(k) for k in config if k not in _CONFIG_OPTIONS)
    if unknown:
        raise setting_error(
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
            raise setting_error(
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
            if name in SETTINGS_KEYS and isinstance(config[name], str):
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
        raise setting_error(
            model_name, label("source"), "must be one of " + ", ".join(SOURCES), repr(source)
        )
    sort_column = values["sort_column"]
    if sort_column is not None and (not isinstance(sort_column, str) or not sort_column.strip()):
        raise setting_error(
            model_name, label("sort_column"), "must be a column name", repr(sort_column)
        )
    created_by = values["created_by"] or CREATED_BY_DEFAULT
    if created_by not in CREATORS:
        raise setting_error(
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
        for name in SETTINGS_KEYS:
            if f"setting '{name}'" in str(exc):
                raise renamed_setting(exc, name, label(name)) from None
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
