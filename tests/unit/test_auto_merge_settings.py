"""The limits of one merge: each bad value refused with its message."""

from __future__ import annotations

import pytest

from dbt_merge.auto_merge.errors import AutoMergeError
from dbt_merge.auto_merge.settings import AutoMergeSettings


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            AutoMergeSettings(threshold=0),
            "setting 'threshold': must be > 0 and <= 1 (got 0)",
        ),
        (
            AutoMergeSettings(threshold=1.01),
            "setting 'threshold': must be > 0 and <= 1 (got 1.01)",
        ),
        (
            AutoMergeSettings(threshold=-0.5),
            "setting 'threshold': must be > 0 and <= 1 (got -0.5)",
        ),
        (
            AutoMergeSettings(threshold="0.25"),
            "setting 'threshold': must be a number (got '0.25')",
        ),
        (
            AutoMergeSettings(threshold=True),
            "setting 'threshold': must be a number (got True)",
        ),
        (
            AutoMergeSettings(split_threshold=0),
            "setting 'split_threshold': must be > 0 (got 0)",
        ),
        (
            AutoMergeSettings(split_threshold=-1),
            "setting 'split_threshold': must be > 0 (got -1)",
        ),
        (
            AutoMergeSettings(split_threshold=1.5),
            "setting 'split_threshold': must be a whole number (got 1.5)",
        ),
        (AutoMergeSettings(file_max=0), "setting 'file_max': must be > 0 (got 0)"),
        (AutoMergeSettings(file_max=-3), "setting 'file_max': must be > 0 (got -3)"),
    ],
)
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(AutoMergeError) as info:
        settings.validate("orders")
    assert str(info.value) == f"dbt_merge auto-merge in model orders, {message}"


def test_threshold_one_is_allowed():
    assert AutoMergeSettings(threshold=1, split_threshold=100).validate("m").max_total_size == 100
