"""Operand expressions of entity merges, checked with sqlglot (no Spark)."""

from __future__ import annotations

import pytest

from dbt_merge.core.expressions import inspect_expression

KNOWN_TO_ENGINE = {"my_udf"}


def engine_knows(name: str) -> bool:
    return name.lower() in KNOWN_TO_ENGINE


@pytest.mark.parametrize(
    "sql, columns",
    [
        ("lower(c.f3)", [["c", "f3"]]),
        ("right(regexp_replace(a.phone, '[^0-9]', ''), 8)", [["a", "phone"]]),
        ("transform(a.emails, e -> lower(trim(e)))", [["a", "emails"]]),
        ("case when a.kind = 'x' then a.code end", [["a", "kind"], ["a", "code"]]),
        ("a.`odd column` || '-'", [["a", "odd column"]]),
        ("my_udf(b.v)", [["b", "v"]]),  # unknown to sqlglot, known to the engine
        ("cast(a.n as string)", [["a", "n"]]),
    ],
)
def test_row_expressions_pass_with_their_columns(sql, columns):
    result = inspect_expression(sql, function_exists=engine_knows)
    assert result["error"] is None, f"{sql} is a row expression"
    assert result["columns"] == columns, "qualified columns in order of appearance"


@pytest.mark.parametrize(
    "sql, error",
    [
        ("", "empty"),
        ("lower(a.x", "not valid Spark SQL"),
        ("a.x; drop table t", "not one expression: it holds several statements"),
        ("drop table t", "not an expression: it parses as a DROP statement"),
        ("(select 1)", "not a row expression: it is a subquery"),
        ("a.x in (select y from t)", "not a row expression: it contains a subquery"),
        ("max(a.x)", "not a row expression: it contains an aggregate function"),
        ("row_number() over (order by a.x)", "not a row expression: it contains a window"),
        ("a.*", "not a row expression: it contains a star (*)"),
        ("a.x as y", "not a row expression: it contains an alias (AS)"),
        ("soundex9(a.x)", "using an unknown function: soundex9"),
        ("lower(x)", "using the column x without a dataset alias"),
        ("db.t.x", "only <alias>.<column> is allowed"),
    ],
)
def test_anything_else_is_rejected_with_a_reason(sql, error):
    result = inspect_expression(sql, function_exists=engine_knows)
    assert result["error"] is not None and error in result["error"], result["error"]


def test_without_an_engine_every_function_sqlglot_does_not_know_is_unknown():
    assert inspect_expression("my_udf(b.v)")["error"] == "using an unknown function: my_udf"
