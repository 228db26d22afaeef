"""The Arrow columns a seed's agate columns become (no Spark: the types and the checks)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import agate
import pyarrow as pa
import pytest
from dbt_common.clients.agate_helper import Integer, Number
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.spark_session import seeds


@pytest.mark.parametrize(
    "data_type, values, spark_type, arrow_values",
    [
        # a whole number is the literal's integer, however wide its decimals were written
        (Number(), [Decimal("1"), None, Decimal("-42")], "bigint", [1, None, -42]),
        (Number(), [Decimal("1E+3"), Decimal("5")], "bigint", [1000, 5]),
        (
            Number(),
            [Decimal("1.5"), Decimal("10.25")],
            "decimal(4,2)",
            [Decimal("1.50"), Decimal("10.25")],
        ),
        # wider than 18 digits: a decimal, not a long that would overflow
        (
            Number(),
            [Decimal("1234567890123456789012")],
            "decimal(22,0)",
            [Decimal("1234567890123456789012")],
        ),
        # wider than Spark's 38 digits: the literal's text
        (Number(), [Decimal("1" * 40)], "string", ["1" * 40]),
        (Integer(), [None, None], "bigint", [None, None]),
        (agate.Boolean(), [True, None, False], "boolean", [True, None, False]),
        (agate.Date(), [dt.date(2020, 2, 29), None], "date", [dt.date(2020, 2, 29), None]),
        (
            agate.DateTime(),
            [dt.datetime(2020, 1, 2, 3, 4, 5, 6), None],
            "string",
            ["2020-01-02 03:04:05.000006", None],
        ),
        (agate.Text(), ["a 'b' \\ c", None, ""], "string", ["a 'b' \\ c", None, ""]),
    ],
)
def test_a_column_is_the_literal_dbt_spark_would_bind(data_type, values, spark_type, arrow_values):
    array, source_type = seeds.source_array(data_type, values)
    assert source_type == spark_type
    assert array.to_pylist() == arrow_values


@pytest.mark.parametrize(
    "texts",
    [
        ["0", "-0", "007", "-42", None],
        ["999999999999999999", "-999999999999999999"],  # 18 digits: longs
        ["1000000000000000000"],  # 19 digits: a decimal
        ["1E+3", "12"],
        ["1.0", "2"],
        [None, None],
    ],
)
def test_whole_numbers_are_what_arrow_infers(texts):
    """The longs of whole numbers are what Arrow's inference of the decimals gives."""
    values = [None if t is None else Decimal(t) for t in texts]
    array, source_type = seeds.source_array(Number(), values)
    inferred = pa.array(values)
    if pa.types.is_null(inferred.type) or (
        inferred.type.scale == 0 and inferred.type.precision <= 18
    ):
        assert (source_type, array.type) == ("bigint", pa.int64())
        assert array.to_pylist() == inferred.cast(pa.int64()).to_pylist()
    else:
        assert source_type == f"decimal({inferred.type.precision},{inferred.type.scale})"
        assert array.equals(inferred)


@pytest.mark.parametrize("value", [Decimal("NaN"), Decimal("Infinity")])
def test_a_number_that_is_not_finite_is_named(value):
    with pytest.raises(ValueError, match="is not a finite number"):
        seeds.source_array(Number(), [Decimal("1"), value])


def test_headers_that_differ_only_in_case_are_named():
    columns = seeds.seed_columns(["id", "Name", "name"], ["`id`", "`Name`", "`name`"], ["a"] * 3)
    with pytest.raises(DbtRuntimeError, match="'Name' and 'name' are one column to Spark"):
        seeds.check_column_names("people (seeds/people.csv)", columns)
    seeds.check_column_names("people", columns[:2])


@pytest.mark.parametrize(
    "source, target, checked",
    [
        ("string", "string", False),
        ("string", "int", True),
        ("string", "timestamp", True),
        ("bigint", "double", False),
        ("bigint", "int", True),
        ("decimal(4,2)", "double", False),
        ("decimal(4,2)", "decimal(3,1)", True),
        ("boolean", "boolean", False),
        ("date", "timestamp", False),
    ],
)
def test_only_casts_that_can_fail_are_checked(source, target, checked):
    assert seeds._needs_check(source, target) is checked
