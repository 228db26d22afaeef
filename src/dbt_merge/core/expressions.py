"""Checks on the Spark SQL expression strings a merge declaration may use as operands.

An entity merge operand may be a Spark SQL expression over ``alias.column``
references, e.g. ``regexp_replace(a.phone, '[^0-9]', '')``. The dbt macros render
the expression into SQL as it is, so before that it must be proven to be one pure
row expression: no statement, no subquery, no aggregate or window, every column
qualified by a dataset alias, every function known. ``inspect_expression`` does
that with sqlglot and reports what it found; the macros then check the aliases and
columns against the declaration and word the error with the merge and rule names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlglot
from sqlglot import exp

# Node types that make an operand something other than a row expression.
_NOT_ROW_EXPRESSION: tuple[tuple[type[exp.Expression], str], ...] = (
    (exp.Query, "a subquery"),
    (exp.Subquery, "a subquery"),
    (exp.AggFunc, "an aggregate function"),
    (exp.Window, "a window function"),
    (exp.Star, "a star (*)"),
    (exp.Alias, "an alias (AS)"),
)


def inspect_expression(
    sql: str,
    *,
    dialect: str = "spark",
    function_exists: Callable[[str], bool] | None = None,
) -> dict[str, Any]:
    """Parse one operand expression and say whether it is a pure row expression.

    Args:
        sql: the expression text from the merge declaration.
        dialect: sqlglot dialect to parse with (``spark`` or ``databricks``).
        function_exists: asked about every function sqlglot does not know (for
            example the engine's own catalog); without it such functions are unknown.

    Returns:
        ``{"error": None | str, "columns": [[alias, column], ...], "functions": [...]}``.
        ``error`` says what is wrong in words that fit after "operand ... is";
        ``columns`` lists the qualified column references in order of appearance.

    Examples:
        >>> inspect_expression("lower(c.f3)")["columns"]
        [['c', 'f3']]
        >>> inspect_expression("(select 1)")["error"]
        'not a row expression: it contains a subquery'
    """
    result: dict[str, Any] = {"error": None, "columns": [], "functions": []}
    text = sql.strip() if isinstance(sql, str) else ""
    if not text:
        result["error"] = "empty"
        return result
    try:
        parsed = [node for node in sqlglot.parse(text, read=dialect) if node is not None]
    except sqlglot.errors.SqlglotError as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        result["error"] = f"not valid Spark SQL: {first_line}"
        return result
    if len(parsed) != 1:
        result["error"] = "not one expression: it holds several statements"
        return result
    root = parsed[0]
    if isinstance(root, (exp.Query, exp.Subquery)):
        result["error"] = "not a row expression: it is a subquery"
        return result
    for node in root.walk():
        for node_type, what in _NOT_ROW_EXPRESSION:
            if isinstance(node, node_type):
                result["error"] = f"not a row expression: it contains {what}"
                return result
    if not isinstance(root, exp.Condition):
        result["error"] = f"not an expression: it parses as a {root.key.upper()} statement"
        return result
    for node in root.find_all(exp.Anonymous):
        name = str(node.name)
        result["functions"].append(name)
        if function_exists is None or not function_exists(name):
            result["error"] = f"using an unknown function: {name}"
            return result
    for column in (node for node in root.walk(bfs=False) if isinstance(node, exp.Column)):
        if not column.table:
            result["error"] = (
                f"using the column {column.name} without a dataset alias "
                "(write it as <alias>.<column>)"
            )
            return result
        if column.args.get("db") or column.args.get("catalog"):
            result["error"] = (
                f"using {column.sql(dialect=dialect)}: only <alias>.<column> is allowed"
            )
            return result
        result["columns"].append([str(column.table), str(column.name)])
    return result
