"""Between Spark and the engines: the output tables' schemas, and the pandas frames a
task reads and returns. Times travel as epoch microseconds, as the engines keep them."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

if TYPE_CHECKING:
    import pandas as pd


_MICROSECOND = timedelta(microseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


_GROUP_BIN_FIELDS = [
    StructField("bin_id", StringType(), False),
    StructField("schema_value", StringType(), True),
    StructField("correlation_value", StringType(), True),
    StructField("entries", LongType(), False),
    StructField("bytes", LongType(), False),
    StructField("members", ArrayType(StringType(), False), False),
]
"""A bin of a (schema, correlation) group and what it holds (``packer.group_bin_row``):
the first columns of ``BIN_SCHEMA`` and ``OFFLINE_SCHEMA``."""

BIN_SCHEMA = StructType(
    [
        *_GROUP_BIN_FIELDS,
        StructField("status", StringType(), False),
        StructField("merge_reason", StringType(), True),
        StructField("opened_at", TimestampType(), False),
        StructField("merged_at", TimestampType(), True),
    ]
)
"""One row per bin of ``bin_pack``; ``members`` in arrival order."""

OFFLINE_SCHEMA = StructType([*_GROUP_BIN_FIELDS, StructField("is_oversized", BooleanType(), False)])
"""One row per planned bin of ``plan_offline``; ``members`` in placement order."""

OFFLINE_REPORT_SCHEMA = StructType(
    [
        StructField("level", StringType(), False),
        StructField("schema_value", StringType(), True),
        StructField("correlation_value", StringType(), True),
        StructField("items", LongType(), False),
        StructField("bytes", LongType(), False),
        StructField("oversized", LongType(), False),
        StructField("bins", LongType(), False),
        StructField("lower_bound", LongType(), False),
        StructField("bins_over_lower_bound", DoubleType(), True),
    ]
)
"""One row per group (``level='group'``) plus one ``level='total'`` row."""

DEFRAGMENT_SCHEMA = StructType(
    [
        StructField("bin_id", StringType(), False),
        StructField("fragment_identifier", StringType(), True),
        StructField("fragment_count", LongType(), True),
        StructField("entries", LongType(), False),
        StructField("members", ArrayType(StringType(), False), False),
        StructField("member_indexes", ArrayType(LongType(), True), False),
        StructField("status", StringType(), False),
        StructField("merge_reason", StringType(), True),
        StructField("failure_reason", StringType(), True),
        StructField("opened_at", TimestampType(), False),
        StructField("merged_at", TimestampType(), True),
    ]
)
"""One row per fragment set of ``defragment``; ``members`` in index order."""


def _micros(value: datetime | timedelta) -> int:
    """Epoch microseconds of a datetime (naive = local time, as PySpark reads it), or
    the microseconds of a timedelta."""
    if isinstance(value, timedelta):
        return value // _MICROSECOND
    if value.tzinfo is None:
        value = value.astimezone()
    return (value - _EPOCH) // _MICROSECOND


def _utc_timestamps(values: list[int | None]) -> pd.Series:
    import pandas as pd

    return pd.to_datetime(pd.Series(values, dtype="Int64"), unit="us", utc=True)


def _frame(rows: list[dict[str, Any]], schema: StructType) -> pd.DataFrame:
    """Output rows of a pandas task as a frame whose dtypes come from ``schema``, not
    from the values: a task with no rows must still convert (pandas reads an empty
    list as float64, which Arrow cannot turn into strings). Timestamps are epoch
    microseconds, as the engines keep them."""
    import pandas as pd

    columns = {}
    for field in schema.fields:
        values = [row[field.name] for row in rows]
        if isinstance(field.dataType, TimestampType):
            columns[field.name] = _utc_timestamps(values)
        elif isinstance(field.dataType, LongType):
            columns[field.name] = pd.Series(values, dtype="Int64" if field.nullable else "int64")
        elif isinstance(field.dataType, BooleanType):
            columns[field.name] = pd.Series(values, dtype=bool)
        else:
            columns[field.name] = pd.Series(values, dtype=object)
    return pd.DataFrame(columns)


def _optional_ints(values: list) -> list[int | None]:
    """Integers from an Arrow-converted column (float with NaN when it has nulls)."""
    return [None if v is None or v != v else int(v) for v in values]


def _rows(pdf: pd.DataFrame, columns: Sequence[str], ints: Collection[str] = ()) -> list[tuple]:
    """A task's frame as tuples of Python values, one per row, of ``columns`` in that
    order; ``ints`` are integer columns that may hold nulls."""
    values = [
        _optional_ints(pdf[name].tolist()) if name in ints else pdf[name].tolist()
        for name in columns
    ]
    return list(zip(*values, strict=True))
