"""Spark SQL text: string literals and identifiers, escaped one way everywhere."""

from __future__ import annotations


def string_literal(text: str) -> str:
    """A Spark SQL string literal: single quotes, with backslashes and quotes escaped.

    Examples:
        >>> string_literal("O'Brien")
        "'O\\\\'Brien'"
    """
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote_identifier(name: str) -> str:
    """A Spark SQL identifier in backticks; a dotted name is a path of struct fields."""
    return ".".join("`" + part.replace("`", "``") + "`" for part in name.split("."))


def typed_literal(text: str | None, sql_type: str) -> str:
    """A Spark SQL literal for a value that Spark rendered as ``text``.

    Strings are quoted; every other type is ``cast('<text>' as <type>)``, which reads
    back exactly the value Spark rendered (dates, timestamps in the session time
    zone, decimals, doubles).
    """
    if text is None:
        return "null"
    if sql_type == "string":
        return string_literal(text)
    return f"cast({string_literal(text)} as {sql_type})"
