"""The shared core: Spark SQL literals and identifiers, the error base class."""

from __future__ import annotations

import pytest

from dbt_merge.auto_merge import AutoMergeError
from dbt_merge.bin_packing import BinPackingError
from dbt_merge.closure import ClosureError
from dbt_merge.core.errors import DbtMergeError, setting_message
from dbt_merge.core.sql import quote_identifier, string_literal, typed_literal


def test_sql_literals_and_identifiers():
    assert typed_literal("it's", "string") == "'it\\'s'"
    assert typed_literal("2024-01-01 10:00:00", "timestamp") == (
        "cast('2024-01-01 10:00:00' as timestamp)"
    )
    assert typed_literal(None, "int") == "null"
    assert quote_identifier("a.b`c") == "`a`.`b``c`"


def test_string_literal_escapes_backslashes_before_quotes():
    assert string_literal("a\\'b") == "'a\\\\\\'b'", "each backslash doubled, the quote escaped"


@pytest.mark.parametrize("error", [AutoMergeError, BinPackingError, ClosureError])
def test_every_family_error_is_a_dbt_merge_error(error):
    assert issubclass(error, DbtMergeError), "one except clause catches every family's errors"
    assert issubclass(error, ValueError), "and they stay ValueErrors, as before"


def test_setting_message_names_model_setting_and_value():
    assert setting_message("bin packing", "bundles", "max_entries", "must be > 0", "0") == (
        "dbt_merge bin packing in model bundles, setting 'max_entries': must be > 0 (got 0)"
    )
