"""Seeds through the session: a CSV's rows become one DataFrame and one table write.

dbt-spark loads a seed with batches of ``insert into ... values (cast(%s as <type>), ...)``,
every value rendered as a SQL literal that Spark parses. In the dbt process's own
SparkSession the rows can go to Spark as data instead: each column of dbt's agate table
becomes an Arrow column whose Spark type is the literal's (numbers as decimals or longs,
booleans, dates; timestamps and text as the text the literal would carry), and the
table's select casts each to the seed's column type exactly as the INSERT did.

Before anything is written, every cast that can fail is checked (``try_cast``): a value
that does not fit its column fails the seed with its row and column named, and the old
table is left as it was.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.spark_session.session import literal_text, short_error
from dbt_merge.core.sql import quote_identifier, string_literal

ROW = "_dbt_merge_seed_row"
# source types whose cast to these targets cannot fail: not checked before the write
_SAFE_CASTS = {
    "string": {"string"},
    "boolean": {"boolean", "string"},
    "date": {"date", "string", "timestamp"},
    "bigint": {"bigint", "double", "float", "string"},
}


@dataclass(frozen=True)
class SeedColumn:
    """One column of a seed: its CSV header, its name in SQL (quoted or not, as
    ``quote_columns`` says) and its Spark SQL type (``column_types`` or dbt's inference)."""

    header: str
    name: str
    type: str


def source_name(index: int) -> str:
    """The source view's name for the seed's column at ``index`` (the headers may be
    anything a CSV allows)."""
    return f"_c{index}"


def seed_columns(
    names: Sequence[str], sql_names: Sequence[str], types: Sequence[str]
) -> list[SeedColumn]:
    return [
        SeedColumn(str(h), str(n), str(t)) for h, n, t in zip(names, sql_names, types, strict=True)
    ]


def check_column_names(seed: str, columns: Sequence[SeedColumn]) -> None:
    """Spark's column names are case-insensitive: two headers that differ only in case
    would fail the table's creation, after the old table is gone on dbt-spark's path."""
    seen: dict[str, str] = {}
    for column in columns:
        key = column.header.lower()
        if key in seen:
            raise DbtRuntimeError(
                f"seed {seed}: the columns {seen[key]!r} and {column.header!r} are one column "
                "to Spark (column names are case-insensitive); rename one of them in the CSV. "
                "Nothing was written."
            )
        seen[key] = column.header


def _number_array(values: Sequence[Any]) -> tuple[Any, str]:
    """Decimals as Arrow infers them (the literal's type: an integer, or a decimal of the
    column's widest precision and scale); wider than Spark's 38 digits, their text."""
    import pyarrow as pa

    for value in values:
        if value is not None and not value.is_finite():
            raise ValueError(f"{value} is not a finite number")
    # whole numbers written without an exponent, of at most 18 digits: what Arrow
    # infers (a decimal of scale 0 and precision 18 or less) is a long, which Python
    # gives without Arrow's inference (a second for 100,000 values)
    shapes = [v.as_tuple() for v in values if v is not None]
    if all(shape.exponent == 0 and len(shape.digits) <= 18 for shape in shapes):
        longs = [None if v is None else int(v) for v in values]
        return pa.array(longs, type=pa.int64()), "bigint"
    array = pa.array(values)
    if pa.types.is_null(array.type):
        return pa.array(values, type=pa.int64()), "bigint"
    if pa.types.is_decimal128(array.type):
        precision, scale = array.type.precision, array.type.scale
        if scale == 0 and precision <= 18:
            return array.cast(pa.int64()), "bigint"
        return array, f"decimal({precision},{scale})"
    return _text_array(values), "string"


def _text_array(values: Sequence[Any]) -> Any:
    """The text each value's literal carries on dbt-spark's path (session.literal_text)."""
    import pyarrow as pa

    return pa.array([None if v is None else literal_text(v) for v in values], type=pa.string())


def source_array(data_type: Any, values: Sequence[Any]) -> tuple[Any, str]:
    """An Arrow array of one agate column and its Spark SQL type: the type of the literal
    dbt-spark's INSERT would bind for these values (``session.sql_literal``)."""
    import agate
    import pyarrow as pa
    from dbt_common.clients.agate_helper import Integer

    if isinstance(data_type, agate.Number):
        return _number_array(values)
    if isinstance(data_type, Integer):  # dbt's: a column of nothing but empty cells
        return pa.array(values, type=pa.int64()), "bigint"
    if isinstance(data_type, agate.Boolean):
        return pa.array(values, type=pa.bool_()), "boolean"
    if isinstance(data_type, agate.Date) and all(v is None or type(v) is dt.date for v in values):
        return pa.array(values, type=pa.date32()), "date"
    # timestamps (agate's DateTime, dbt's ISODateTime), text and anything else
    return _text_array(values), "string"


def _base_type(sql_type: str) -> str:
    name = sql_type.strip().lower()
    return {"int": "int", "integer": "int", "long": "bigint", "real": "float"}.get(name, name)


def _needs_check(source_type: str, target_type: str) -> bool:
    target = _base_type(target_type)
    if source_type.startswith("decimal"):
        return target not in {"double", "float", "string"}
    return target not in _SAFE_CASTS.get(source_type, set())


def source_frame(spark: Any, table: Any, columns: Sequence[SeedColumn]) -> tuple[Any, list[str]]:
    """The seed's rows as a Spark DataFrame of source columns (``_c0`` ...) and a row
    number, and the Spark type of each source column.

    The Arrow batches go to the JVM as ``createDataFrame`` sends a pandas frame's (an
    Arrow stream, one batch a partition), without the detour through pandas.
    """
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql import types as T
    from pyspark.sql.pandas.serializers import ArrowStreamSerializer

    arrays, types, fields = [], [], []
    for index, column in enumerate(columns):
        agate_column = table.columns[index]
        try:
            array, source_type = source_array(agate_column.data_type, agate_column.values())
        except (ValueError, TypeError, ArithmeticError, pa.ArrowException) as exc:
            raise DbtRuntimeError(f"column {column.header!r}: {exc}") from None
        arrays.append(array)
        types.append(source_type)
        fields.append(T.StructField(source_name(index), _spark_type(source_type), True))
    arrays.append(pa.array(range(len(table.rows)), type=pa.int64()))
    fields.append(T.StructField(ROW, T.LongType(), False))
    batches = pa.Table.from_arrays(arrays, names=[f.name for f in fields]).to_batches(
        max_chunksize=max(1, spark._jconf.arrowMaxRecordsPerBatch())
    )
    jvm = spark._jvm
    stream = spark.sparkContext._serialize_to_jvm(
        batches,
        ArrowStreamSerializer(),
        jvm.PythonSQLUtils.readArrowStreamFromFile,
        jvm.ArrowIteratorServer,
    )
    schema = T.StructType(fields)
    frame = DataFrame(
        jvm.PythonSQLUtils.toDataFrame(stream, schema.json(), spark._jsparkSession), spark
    )
    return frame, types


def _spark_type(sql_type: str) -> Any:
    from pyspark.sql import types as T

    if sql_type.startswith("decimal("):
        precision, scale = sql_type[len("decimal(") : -1].split(",")
        return T.DecimalType(int(precision), int(scale))
    return {
        "bigint": T.LongType(),
        "boolean": T.BooleanType(),
        "date": T.DateType(),
        "string": T.StringType(),
    }[sql_type]


def check_casts(
    spark: Any, seed: str, view: str, columns: Sequence[SeedColumn], source_types: Sequence[str]
) -> None:
    """Fail before anything is written when a value does not fit its column's type (a
    cast that would give null, or fail under ANSI mode); only casts that can fail are
    checked, in one Spark job."""
    checked = [
        (i, c)
        for i, (c, t) in enumerate(zip(columns, source_types, strict=True))
        if _needs_check(t, c.type)
    ]
    if not checked:
        return
    bad = [
        f"{source_name(i)} is not null and try_cast({source_name(i)} as {c.type}) is null"
        for i, c in checked
    ]
    firsts = ", ".join(f"min(case when {b} then {ROW} end)" for b in bad)
    try:
        row = spark.sql(f"select {firsts} from {view}").collect()[0]
    except Exception as exc:  # a type Spark does not know, for example
        raise DbtRuntimeError(f"seed {seed}: {short_error(exc)}. Nothing was written.") from None
    for (index, column), first in zip(checked, row, strict=True):
        if first is None:
            continue
        value = spark.sql(
            f"select {source_name(index)} from {view} where {ROW} = {first}"
        ).collect()[0][0]
        raise DbtRuntimeError(
            f"seed {seed}: the value {string_literal(str(value))} of column "
            f"{quote_identifier(column.header)} (row {first + 1} of the CSV's data) is not a "
            f"{column.type} (column_types or dbt's inferred type); nothing was written and "
            "the seed's table, if it exists, is unchanged."
        )
