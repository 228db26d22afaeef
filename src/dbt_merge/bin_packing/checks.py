"""Checks of a Spark entry point's inputs, before any packing runs: the items' columns
and their types, the stored table, the clock, and one scan for bad rows. Messages as
``BinPackingSettings.validate``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, IntegralType, StructType, TimestampNTZType, TimestampType

from dbt_merge.bin_packing.frames import _micros
from dbt_merge.bin_packing.settings import _setting_error


def _check_items(
    items: Any,
    model_name: str,
    what: str,
    columns: dict[str, str | None],
    integers: Sequence[str] = (),
) -> None:
    """``items`` is a DataFrame that has the column of each setting in ``columns`` (None:
    not used), and the columns of the settings in ``integers`` are integer columns."""
    if not isinstance(items, DataFrame):
        raise _setting_error(model_name, "items", "must be a pyspark DataFrame", items, what)
    for setting, column in columns.items():
        if column is None:
            continue
        if not isinstance(column, str) or column not in items.columns:
            raise _setting_error(
                model_name,
                setting,
                f"no such column in the items, which have columns {items.columns}",
                column,
                what,
            )
    for setting in integers:
        column = columns[setting]
        _check_type(items, model_name, what, setting, column, (IntegralType,), "an integer")


def _check_type(
    df: DataFrame, model_name: str, what: str, setting: str, column: str, types: tuple, wanted: str
) -> None:
    actual = df.schema[column].dataType
    if not isinstance(actual, types):
        raise _setting_error(
            model_name,
            setting,
            f"column '{column}' must be {wanted}, it is {actual.simpleString()}",
            column,
            what,
        )


def _check_previous(
    previous: DataFrame | None, model_name: str, what: str, schema: StructType
) -> None:
    if previous is None:
        return
    if not isinstance(previous, DataFrame):
        raise _setting_error(
            model_name,
            "previous",
            "must be a DataFrame (the model's own table) or None",
            previous,
            what,
        )
    missing = [f.name for f in schema.fields if f.name not in previous.columns]
    if missing:
        raise _setting_error(
            model_name,
            "previous",
            f"is missing column(s) {missing};"
            " pass the model's own table (session.table(str(dbt.this)))",
            previous.columns,
            what,
        )


def _check_rows(
    df: DataFrame, model_name: str, what: str, checks: list[tuple[str, str, Any, str]]
) -> None:
    """One aggregation over the items; each check is ``(setting, column, bad, problem)``."""
    row = df.agg(
        *[F.count(F.when(bad, 1)).alias(f"c{i}") for i, (_, _, bad, _) in enumerate(checks)]
    ).first()
    for i, (setting, column, _, problem) in enumerate(checks):
        if row[f"c{i}"]:
            raise _setting_error(
                model_name, setting, f"{row[f'c{i}']} item(s) {problem}", column, what
            )


def _now_micros(now: datetime | None, model_name: str, what: str) -> int:
    if now is None:
        now = datetime.now(UTC)
    if not isinstance(now, datetime):
        raise _setting_error(model_name, "now", "must be a datetime or None", now, what)
    return _micros(now)


def _size_rows(size_column: str) -> list[tuple[str, str, Any, str]]:
    """The ``_check_rows`` checks of a size column: no nulls, nothing negative."""
    return [
        ("size_column", size_column, F.col(size_column).isNull(), "have a null size"),
        ("size_column", size_column, F.col(size_column) < 0, "have a negative size"),
    ]


def _check_stream(
    items: Any,
    model_name: str,
    what: str,
    columns: dict[str, str | None],
    *,
    integers: Sequence[str],
    previous: DataFrame | None,
    schema: StructType,
    now: datetime | None,
    max_bin_age: timedelta | None,
    more_rows: Sequence[tuple] = (),
) -> tuple[int, int | None]:
    """The checks of bin_pack and defragment, before any packing: ``_check_items``
    (``columns`` hold ``id_column`` and ``arrival_column``), the arrival column's type,
    the stored table, then one scan for null ids and arrivals (and ``more_rows``).
    Returns the run's clock and max bin age in microseconds."""
    _check_items(items, model_name, what, columns, integers)
    id_column, arrival_column = columns["id_column"], columns["arrival_column"]
    _check_type(
        items,
        model_name,
        what,
        "arrival_column",
        arrival_column,
        (TimestampType, TimestampNTZType, DateType),
        "a timestamp or date",
    )
    _check_previous(previous, model_name, what, schema)
    now_us = _now_micros(now, model_name, what)
    max_age = None if max_bin_age is None else _micros(max_bin_age)
    _check_rows(
        items,
        model_name,
        what,
        [
            ("id_column", id_column, F.col(id_column).isNull(), "have a null id"),
            *more_rows,
            (
                "arrival_column",
                arrival_column,
                F.col(arrival_column).isNull(),
                "have a null arrival",
            ),
        ],
    )
    return now_us, max_age
