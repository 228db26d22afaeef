"""The spark_session adapter's reading of a seed's CSV (csv_table.from_csv) gives the
agate table dbt's own function gives: the same column names, types and values (each
value of the same Python type and spelling: Decimal('1.0') is not Decimal('1.00')), on
random columns of tricky spellings, forced text columns, short rows, other
delimiters, a BOM and every CSV of this repository; and what dbt's raises where it
raises."""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import pytest

from dbt.adapters.spark_session import csv_table
from tests import sampling
from tests.conftest import ROOT

# spellings that agate reads as one type or another, or as text
POOLS = {
    "integer": ["0", "7", "-3", "007", "12345678901234567890", "-0", "42"],
    "decimal": [
        "1.5",
        "-2.25",
        "0.10",
        "3.14159265358979323846264338327950288",
        "100",
        "-0.0",
        "1e5",
        "1E-3",
        ".5",
        "5.",
    ],
    "formatted": ["1,000", "$5", "5%", " 7 ", "€1.50", "-$3", "(4)", "1 000", "١٢٣", "１２"],
    "special": ["NaN", "Infinity", "-inf", "nan", "sNaN"],
    "date": ["2024-01-31", "1999-12-01", "2024-02-29", "0001-01-01", "9999-12-31"],
    "bad_date": ["2023-02-29", "2024-1-5", "2024-13-01", "24-01-01", "2024/01/31", "0000-01-01"],
    "datetime": ["2024-01-31 08:00:00", "2000-02-29 23:59:59", "1970-01-01 00:00:00"],
    "bad_datetime": ["2024-01-31 24:00:00", "2024-01-31 23:59:60", "2024-01-31 8:00:00"],
    "iso": ["2024-01-31T08:00:00", "2024-01-31T08:00:00Z", "2024-01-31T08:00:00+02:00"],
    "boolean": ["true", "false", "True", "FALSE", "yes", "t"],
    "null": ["", "null", "NULL", " ", "none", "na"],
    "text": ["plain", 'a "quoted" word', "comma, inside", "back\\slash", "ünïcode ✓", "x"],
}
# a column is mostly one pool, sometimes with a value of another
KINDS = ["integer", "decimal", "date", "datetime", "iso", "boolean", "text", "null", "special"]


def _same(path: Path, text_columns=None, delimiter: str = ",") -> None:
    """csv_table.from_csv and dbt's function give the same table (or the same error)."""
    text_columns = text_columns or {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = csv_table.DBT_FROM_CSV(str(path), text_columns, delimiter=delimiter)
    except Exception as exc:
        with pytest.raises(type(exc)) as raised:
            csv_table.from_csv(str(path), text_columns, delimiter=delimiter)
        assert str(raised.value) == str(exc)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = csv_table.from_csv(str(path), text_columns, delimiter=delimiter)
    assert got.column_names == expected.column_names
    assert [type(t) for t in got.column_types] == [type(t) for t in expected.column_types]
    assert [vars(t) for t in got.column_types if not hasattr(t, "_parser")] == [
        vars(t) for t in expected.column_types if not hasattr(t, "_parser")
    ]
    assert len(got.rows) == len(expected.rows)
    for number, (mine, theirs) in enumerate(zip(got.rows, expected.rows, strict=True)):
        spelled = [(type(v), repr(v)) for v in mine.values()]
        assert spelled == [(type(v), repr(v)) for v in theirs.values()], f"row {number}"
        assert mine.keys() == theirs.keys()


def _write(path: Path, lines: list[list[str]], delimiter: str = ",", bom: bool = False) -> Path:
    import csv

    with path.open("w", newline="", encoding="utf-8") as handle:
        if bom:
            handle.write("\ufeff")
        csv.writer(handle, delimiter=delimiter).writerows(lines)
    return path


@pytest.mark.parametrize("seed", sampling.seeds(range(12), fresh=60))
def test_random_columns_of_tricky_spellings(tmp_path, seed):
    rng = random.Random(seed)
    width, rows = rng.randint(1, 30), rng.randint(0, 60)
    kinds = [rng.choice(KINDS) for _ in range(width)]
    lines: list[list[str]] = [[f"c{i}" for i in range(width)]]
    for _ in range(rows):
        row = []
        for kind in kinds:
            pool = rng.choice(list(POOLS)) if rng.random() < 0.08 else kind
            row.append(rng.choice(POOLS["null"] if rng.random() < 0.1 else POOLS[pool]))
        if rng.random() < 0.05:
            row = row[: rng.randint(0, width)]  # a short row
        lines.append(row)
    _same(_write(tmp_path / "seed.csv", lines))
    # the same with some columns forced to text (column_types), one of them unknown
    forced = {f"c{i}": "string" for i in range(width) if rng.random() < 0.3}
    _same(tmp_path / "seed.csv", forced)
    _same(tmp_path / "seed.csv", {**forced, "not_a_column": "string"})


@pytest.mark.parametrize("kind", sorted(POOLS))
def test_each_pool_alone(tmp_path, kind):
    """A column of each pool's values only (its type inferred from them alone), and
    each value alone in a column of its own."""
    values = POOLS[kind]
    lines = [["only", *[f"v{i}" for i in range(len(values))]]]
    for value in values:
        lines.append([value] + values)
    _same(_write(tmp_path / "seed.csv", lines))


def test_headers_delimiters_and_shapes(tmp_path):
    # duplicate and empty headers, a BOM, another delimiter
    lines = [["a", "a", "", "b"], ["1", "2", "x", "2024-01-01"], ["3", "", "y", ""]]
    _same(_write(tmp_path / "dup.csv", lines))
    _same(_write(tmp_path / "bom.csv", lines, bom=True))
    _same(_write(tmp_path / "semi.csv", lines, delimiter=";"), delimiter=";")
    _same(_write(tmp_path / "pipe.csv", lines, delimiter="|"), delimiter="|")
    # a header only; an empty file; a row longer than the header
    _same(_write(tmp_path / "header.csv", [["a", "b"]]))
    (tmp_path / "empty.csv").write_text("", encoding="utf-8")
    _same(tmp_path / "empty.csv")
    _same(_write(tmp_path / "long.csv", [["a"], ["1", "2"]]))
    # a column that no row reaches (agate tests none of its values: dbt's Integer)
    _same(_write(tmp_path / "short.csv", [["a", "b", "c"], ["1"], ["2", "x"]]))
    # a quoted newline, and a row of nothing
    (tmp_path / "newline.csv").write_text('a,b\n"x\ny",1\n\n2,3\n', encoding="utf-8")
    _same(tmp_path / "newline.csv")


def test_every_csv_of_the_repository():
    paths = sorted(
        p for p in ROOT.glob("**/*.csv") if ".venv" not in p.parts and "out" not in p.parts
    )
    assert paths, "no CSV found"
    for path in paths:
        _same(path)


def test_installed_for_the_adapter():
    """Loading the spark_session adapter makes dbt's seeds read with from_csv."""
    from dbt_common.clients import agate_helper

    import dbt.adapters.spark_session  # noqa: F401

    assert agate_helper.from_csv is csv_table.from_csv


def test_the_garbage_collector_is_held_only_while_reading(tmp_path, monkeypatch):
    import gc

    path = _write(tmp_path / "seed.csv", [["a"], ["1"]])
    seen = []
    real = csv_table._read

    def read(*args):
        seen.append(gc.isenabled())
        return real(*args)

    monkeypatch.setattr(csv_table, "_read", read)
    try:
        assert gc.isenabled()
        csv_table.from_csv(str(path), {})
        assert seen == [False] and gc.isenabled()
        # as it was after a reading that fails, and after one with the collector off
        with pytest.raises(FileNotFoundError):
            csv_table.from_csv(str(tmp_path / "missing.csv"), {})
        assert gc.isenabled()
        gc.disable()
        csv_table.from_csv(str(path), {})
        assert not gc.isenabled()
    finally:
        gc.enable()
