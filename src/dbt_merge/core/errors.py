"""One base class for dbt_merge's domain errors, and the wording they share."""

from __future__ import annotations


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
