"""The limits of one merge (Accumulo ``table.mergeability.threshold``,
``table.split.threshold``, ``table.merge.file.max``), each with its documented default."""

from __future__ import annotations

from dataclasses import dataclass

from dbt_merge.auto_merge.errors import setting_error

# One documented default per option (Accumulo table.mergeability.threshold = .25,
# table.split.threshold = 1G, table.merge.file.max = 10000; SEMANTICS.md D.1).
THRESHOLD_DEFAULT = 0.25
SPLIT_THRESHOLD_DEFAULT = 1024**3
FILE_MAX_DEFAULT = 10_000
# The options that are fields of AutoMergeSettings.
SETTINGS_KEYS = ("threshold", "split_threshold", "file_max")


@dataclass(frozen=True)
class AutoMergeSettings:
    """Limits of one merge.

    Attributes:
        threshold: fraction of ``split_threshold`` a merged range may reach, in
            ``(0, 1]`` (Accumulo ``table.mergeability.threshold``, default 0.25).
        split_threshold: size in bytes at which a range is considered full
            (Accumulo ``table.split.threshold``, default 1 GiB).
        file_max: most files a merged range may hold (Accumulo
            ``table.merge.file.max``, default 10000).
    """

    threshold: float = THRESHOLD_DEFAULT
    split_threshold: int = SPLIT_THRESHOLD_DEFAULT
    file_max: int = FILE_MAX_DEFAULT

    @property
    def max_total_size(self) -> int:
        """Largest merged size in bytes: ``int(split_threshold * threshold)``.

        Truncated like Accumulo's ``(long) (threshold * mergeabilityThreshold)``
        (SEMANTICS.md D.1), so float rounding can cost a byte.
        """
        return int(self.split_threshold * self.threshold)

    def validate(self, model_name: str) -> AutoMergeSettings:
        """Check every setting; returns ``self`` so calls can chain.

        Raises:
            AutoMergeError: a setting is of the wrong type or out of range.
        """
        threshold = self.threshold
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            raise setting_error(model_name, "threshold", "must be a number", repr(threshold))
        if not 0 < threshold <= 1:
            raise setting_error(model_name, "threshold", "must be > 0 and <= 1", repr(threshold))
        for name in ("split_threshold", "file_max"):
            number = getattr(self, name)
            if isinstance(number, bool) or not isinstance(number, int):
                raise setting_error(model_name, name, "must be a whole number", repr(number))
            if number <= 0:
                raise setting_error(model_name, name, "must be > 0", repr(number))
        return self
