"""The options of plan_table: model config, then table properties, then defaults."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dbt_merge.auto_merge.errors import AutoMergeError
from dbt_merge.auto_merge.options import read_options
from dbt_merge.auto_merge.rules import MergeabilityRule
from dbt_merge.auto_merge.settings import AutoMergeSettings
from tests.unit.auto_merge_fixtures import options


def test_options_default_then_table_property_then_config():
    got = read_options(None, None, model_name="m")
    assert (got.source, got.sort_column, got.created_by, got.rules) == ("files", None, "system", ())
    assert got.settings == AutoMergeSettings(), "threshold .25, split 1 GiB, file_max 10000"

    properties = {
        "dbt_merge.auto_merge.threshold": "0.5",
        "dbt_merge.auto_merge.file_max": "7",
        "dbt_merge.auto_merge.mergeability": '[{"to": "2024-01-03", "mergeability": "NEVER"}]',
        "write.format.default": "parquet",  # other properties are ignored
    }
    got = read_options({"file_max": 3}, properties, model_name="m")
    assert got.settings == AutoMergeSettings(threshold=0.5, file_max=3), "config wins"
    assert got.origins["threshold"] == "table property" and got.origins["file_max"] == "config"
    assert got.rules == (MergeabilityRule(1, None, "2024-01-03", "NEVER"),), "JSON property"
    assert (
        read_options(None, {"dbt_merge.auto_merge.mergeability": "NEVER"}, model_name="m")
        .rules[0]
        .mergeability
        == "NEVER"
    ), "a bare mergeability needs no JSON quotes"


def test_numbers_rendered_to_text_by_dbt_are_read():
    got = read_options(
        {"threshold": "1", "split_threshold": "4000", "file_max": " 9 "}, None, model_name="m"
    )
    assert got.settings == AutoMergeSettings(threshold=1.0, split_threshold=4000, file_max=9)


def test_now_is_utc():
    assert options({"now": "2024-03-01T00:00:00"}).now == datetime(2024, 3, 1)
    assert options({"now": "2024-03-01T02:00:00+02:00"}).now == datetime(2024, 3, 1), "converted"
    before = datetime.now(UTC).replace(tzinfo=None)
    assert options({"now": ""}).now >= before, "empty: the current time"


@pytest.mark.parametrize(
    "config, properties, message",
    [
        ({"treshold": 0.5}, None, "setting 'auto_merge': unknown options [treshold], supported: "),
        (
            {"source": "tablets"},
            None,
            "setting 'source': must be one of files, partitions (got 'tablets')",
        ),
        (
            {"created_by": "admin"},
            None,
            "setting 'created_by': must be 'system' or 'user' (got 'admin')",
        ),
        ({"threshold": 0}, None, "setting 'threshold': must be > 0 and <= 1 (got 0)"),
        ({"threshold": "lots"}, None, "setting 'threshold': must be a number (got 'lots')"),
        ({"now": "yesterday"}, None, "setting 'now': must be an ISO-8601 timestamp"),
        (
            None,
            {"dbt_merge.auto_merge.threshold": "2"},
            "setting 'dbt_merge.auto_merge.threshold': must be > 0 and <= 1 (got 2.0)",
        ),
        (
            None,
            {"dbt_merge.auto_merge.split_threshold": "1G"},
            "setting 'dbt_merge.auto_merge.split_threshold': must be a whole number (got '1G')",
        ),
        (
            None,
            {"dbt_merge.auto_merge.file_max": "0"},
            "setting 'dbt_merge.auto_merge.file_max': must be > 0 (got 0)",
        ),
        (
            None,
            {"dbt_merge.auto_merge.treshold": "0.5"},
            "setting 'dbt_merge.auto_merge.treshold': unknown table property of db.t, supported: ",
        ),
        (
            None,
            {"dbt_merge.auto_merge.mergeability": "SOMETIMES"},
            "setting 'dbt_merge.auto_merge.mergeability (the single value)': unknown mergeability, "
            "expected NEVER, "
            "ALWAYS or DELAY:<duration> (got 'SOMETIMES')",
        ),
    ],
)
def test_bad_options_are_refused(config, properties, message):
    with pytest.raises(AutoMergeError) as info:
        read_options(config, properties, model_name="orders_plan", table_name="db.t")
    assert str(info.value).startswith(f"dbt_merge auto-merge in model orders_plan, {message}")


def test_the_auto_merge_config_is_a_dict_of_known_options():
    with pytest.raises(AutoMergeError) as info:
        read_options({"treshold": 0.5}, None, model_name="m")
    assert str(info.value) == (
        "dbt_merge auto-merge in model m, setting 'auto_merge': unknown options [treshold], "
        "supported: source, sort_column, threshold, split_threshold, file_max, mergeability, "
        "created_by, now (got {'treshold': 0.5})"
    )
    with pytest.raises(AutoMergeError) as info:
        read_options("fast", None, model_name="m")
    assert str(info.value) == (
        "dbt_merge auto-merge in model m, setting 'auto_merge': must be a dict of options "
        "(got 'fast')"
    )
