"""Auto-merge's error: every message names the model, the setting and the value."""

from __future__ import annotations

from dbt_merge.core.errors import DbtMergeError, setting_message


class AutoMergeError(DbtMergeError):
    """Bad auto-merge input; the text names the model, the setting and the value."""


def setting_error(model_name: str, setting: str, problem: str, got: str) -> AutoMergeError:
    """``dbt_merge auto-merge in model <model>, setting '<setting>': <problem> (got <got>)``."""
    return AutoMergeError(setting_message("auto-merge", model_name, setting, problem, got))


def renamed_setting(exc: AutoMergeError, setting: str, label: str) -> AutoMergeError:
    """The same error with the setting named as ``label`` (e.g. a table property)."""
    return AutoMergeError(str(exc).replace(f"setting '{setting}'", f"setting '{label}'", 1))
