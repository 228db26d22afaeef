"""One base class for dbt_merge's domain errors, the wording they share, and the
failure-injection points of the Python steps."""

from __future__ import annotations

import os


class DbtMergeError(ValueError):
    """Bad input to a dbt_merge algorithm: the text names what, where and the value.

    Each family raises its own subclass (``ClosureError``, ``BinPackingError``,
    ``AutoMergeError``), so ``except DbtMergeError`` catches them all.
    """


def setting_message(what: str, model_name: str, setting: str, problem: str, got: str) -> str:
    """``dbt_merge <what> in model <m>, setting '<s>': <problem> (got <value>)``.

    Args:
        what: the family, as the user knows it (``bin packing``, ``auto-merge``).
        model_name: the dbt model whose settings are wrong.
        setting: the setting's name.
        problem: what is wrong, in words that fit after the setting.
        got: the offending value as it should be shown (already ``repr``-ed if needed).
    """
    return f"dbt_merge {what} in model {model_name}, setting '{setting}': {problem} (got {got})"


class InjectedFailure(RuntimeError):
    """Raised at a failure point that ``DBT_MERGE_FAIL_AT`` names (tests only)."""


def failpoint(name: str) -> None:
    """A failure-injection point at a commit boundary, the Python twin of the macro
    ``_failpoint`` (macros/core/_failpoint.sql): raises when the environment variable
    ``DBT_MERGE_FAIL_AT`` names this point, does nothing otherwise."""
    if os.environ.get("DBT_MERGE_FAIL_AT", "") == name:
        raise InjectedFailure(f"dbt_merge: injected failure at {name} (DBT_MERGE_FAIL_AT)")
