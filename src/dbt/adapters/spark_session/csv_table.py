"""dbt's agate table of a seed's CSV, the same table in a fraction of the time.

Before an adapter sees a seed's rows, dbt reads its CSV into an agate table
(``dbt_common.clients.agate_helper.from_csv``): agate's type inference tests every
value of every column against each candidate type, then the table casts every value
again, each test and cast a Python call that strips, lower-cases and parses the
text. At 100,000 rows of 11 columns that took 6.3 s, half of the seed's time.

``from_csv`` here returns the same table (the same column names, the same type
objects, equal values of the same Python types): it reads the CSV the same way, runs
the same inference, and casts with the same type objects, but

* tests and casts each distinct value of a column once;
* parses the common spellings of numbers (``-12.50``), dates (``2024-01-31``) and
  timestamps (``2024-01-31 08:00:00``) with a regular expression and the constructor
  that agate's own parse ends in, and leaves every other spelling to agate's cast;
* builds the rows without agate casting them a second time;
* holds Python's cyclic garbage collector while it reads: the millions of objects of a
  large table made it scan the heap again and again (a 1M-row CSV took 27 s with it
  and 16 s without).

A CSV it does not read the ordinary way (no header row, a row longer than the header)
goes to dbt's own function, which raises what it raises. The spark_session adapter
uses it for its seeds (``install``); ``tests/unit/test_seed_csv.py`` holds it to dbt's
on tricky values.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import re
import threading
from collections.abc import Callable, Sequence
from decimal import Decimal
from io import StringIO
from typing import Any

import agate
from agate import csv as agate_csv
from agate.exceptions import CastError
from dbt_common.clients import agate_helper

# dbt's own function, kept before install replaces it
DBT_FROM_CSV = agate_helper.from_csv

_NUMBER = re.compile(r"(-?)([0-9]+(?:\.[0-9]+)?)")
_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_DATETIME = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2}) ([0-9]{2}):([0-9]{2}):([0-9]{2})")


def _number(cast: Callable[[Any], Any]) -> Callable[[str], Any]:
    """agate's Number cast of a text: ``-`` and digits as agate computes them (the
    digits' Decimal times the sign, in the context's precision), else agate's cast."""
    positive, negative = Decimal(1), Decimal(-1)

    def fast(value: str) -> Any:
        found = _NUMBER.fullmatch(value) if type(value) is str else None
        if found is None:
            return cast(value)
        return Decimal(found.group(2)) * (negative if found.group(1) else positive)

    return fast


def _parsed(pattern: re.Pattern, build: Callable[..., Any], cast: Callable[[Any], Any]):
    """agate's Date cast with ``%Y-%m-%d`` (pattern _DATE, build date) or DateTime cast
    with ``%Y-%m-%d %H:%M:%S`` (_DATETIME, datetime): a text of the format's digits is
    the value strptime's parse ends in; any other text, or a date that does not exist,
    goes to agate's cast."""

    def fast(value: str) -> Any:
        found = pattern.fullmatch(value) if type(value) is str else None
        if found is not None:
            try:
                return build(*map(int, found.groups()))
            except ValueError:
                pass
        return cast(value)

    return fast


def _caster(data_type: agate.DataType) -> Callable[[Any], Any]:
    """The cast of data_type, quicker where the spelling is the common one (the same
    result: see the module's docstring)."""
    kind = type(data_type)
    if (
        kind is agate_helper.Number
        and data_type.group_symbol == ","
        and data_type.decimal_symbol == "."
        and not any(set(symbol) & set("0123456789.-") for symbol in data_type.currency_symbols)
    ):
        # nothing of agate's cleaning (strip, nulls, '%', currency, grouping) changes
        # a text of a sign and digits
        return _number(data_type.cast)
    if kind is agate.Date and data_type.date_format == "%Y-%m-%d" and not data_type.locale:
        return _parsed(_DATE, dt.date, data_type.cast)
    if (
        kind is agate.DateTime
        and data_type.datetime_format == "%Y-%m-%d %H:%M:%S"
        and not data_type.locale
    ):
        return _parsed(_DATETIME, dt.datetime, data_type.cast)
    return data_type.cast


class _Cast:
    """A type's cast of one column's values, each distinct value cast once."""

    def __init__(self, data_type: agate.DataType):
        self.data_type, self.cast, self.done = data_type, _caster(data_type), {}

    def passes(self, value: Any) -> bool:
        """Whether the value casts (agate's DataType.test), keeping what it casts to."""
        try:
            self.done[value] = self.cast(value)
        except CastError:
            return False
        return True

    def column(self, values: Sequence[Any]) -> list[Any]:
        """The values cast."""
        done = self.done
        for value in dict.fromkeys(values):
            if value not in done:
                done[value] = self.cast(value)
        return list(map(done.__getitem__, values))


def _read(abspath: str, delimiter: str) -> tuple[list[str], tuple[list[str], ...]] | None:
    """The header and rows of the CSV, read as agate_helper.from_csv reads them (a
    UTF-8 BOM skipped, agate's CSV reader); None without a header row."""
    with open(abspath, encoding="utf-8") as handle:
        if handle.read(1) != agate_helper.BOM:
            handle.seek(0)
        contents = StringIO(handle.read())
    reader = agate_csv.reader(contents, header=True, delimiter=delimiter)
    header = next(reader, None)
    if header is None:
        return None
    return header, tuple(reader)


def _column_types(tester: agate.TypeTester, columns: Sequence[Sequence[Any]], names):
    """tester.run over the columns (a row shorter than the header has None for the
    values it lacks, which agate does not test), and each column's cast. agate keeps,
    per column, the types that every value passes and takes the first of them in its
    order of preference: the same as the first type, in that order, that every
    distinct value passes. A type is tested until a value fails it, and agate's Text,
    last in that order, casts every value."""
    types, casts = [], []
    for name, column in zip(names, columns, strict=True):
        if name in tester._force:
            chosen = _Cast(tester._force[name])
        else:
            distinct = [value for value in dict.fromkeys(column) if value is not None]
            for data_type in tester._possible_types:
                chosen = _Cast(data_type)
                if type(data_type) is agate.Text or all(map(chosen.passes, distinct)):
                    break
        types.append(chosen.data_type)
        casts.append(chosen)
    return tuple(types), casts


class _Collector:
    """The readers that hold Python's cyclic garbage collector, and whether it ran
    before the first of them took it."""

    lock = threading.Lock()
    holders = 0
    was_enabled = False


@contextlib.contextmanager
def _collector_held():
    """Python's cyclic garbage collector off while the block runs (and while any other
    thread's reading holds it), then as it was."""
    with _Collector.lock:
        if _Collector.holders == 0:
            _Collector.was_enabled = gc.isenabled()
            gc.disable()
        _Collector.holders += 1
    try:
        yield
    finally:
        with _Collector.lock:
            _Collector.holders -= 1
            if _Collector.holders == 0 and _Collector.was_enabled:
                gc.enable()


def from_csv(abspath: str, text_columns: Any, delimiter: str = ",") -> agate.Table:
    """``agate_helper.from_csv(abspath, text_columns, delimiter)``: the same table."""
    with _collector_held():
        return _from_csv(abspath, text_columns, delimiter)


def _from_csv(abspath: str, text_columns: Any, delimiter: str) -> agate.Table:
    read = _read(abspath, delimiter)
    if read is None:
        return DBT_FROM_CSV(abspath, text_columns, delimiter=delimiter)
    header, rows = read
    names = agate.utils.deduplicate(header, column_names=True)
    width = len(names)
    if not width or any(len(row) > width for row in rows):
        return DBT_FROM_CSV(abspath, text_columns, delimiter=delimiter)
    tester = agate_helper.build_type_tester(text_columns=text_columns)
    if any(name not in names for name in tester._force):  # agate warns of it
        return DBT_FROM_CSV(abspath, text_columns, delimiter=delimiter)
    padding = [None] * width
    full = [row if len(row) == width else row + padding[len(row) :] for row in rows]
    columns = list(zip(*full, strict=True)) if full else [() for _ in names]
    types, casts = _column_types(tester, columns, names)
    values = [cast.column(column) for cast, column in zip(casts, columns, strict=True)]
    table_rows = [agate.Row(row, names) for row in zip(*values, strict=True)]
    return agate.Table(table_rows, names, types, _is_fork=True)


def install() -> None:
    """dbt reads every seed's CSV with ``from_csv`` from now on, in this process (the
    spark_session adapter's: dbt loads one adapter per invocation)."""
    agate_helper.from_csv = from_csv
