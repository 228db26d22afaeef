"""Planning a table's data files, ordered by a sort column, as ranges: one range per file,
each partition on its own, and the where clauses that select a merge's files."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dbt_merge.auto_merge.errors import setting_error
from dbt_merge.auto_merge.layout import (
    TableLayout,
    merge_columns,
    numbered,
    partition_predicates,
    plan_row,
)
from dbt_merge.auto_merge.mergeability import Mergeability
from dbt_merge.auto_merge.options import SOURCE_FILES, AutoMergeOptions
from dbt_merge.auto_merge.planner import RangeDecision, plan_auto_merge
from dbt_merge.auto_merge.ranges import Range, order_key
from dbt_merge.auto_merge.rules import resolve_mergeability
from dbt_merge.core.sql import quote_identifier, typed_literal

# Why a file is left alone before planning (the planner's reasons are in planner.py).
REASON_NO_KEY_BOUNDS = "no_key_bounds"


@dataclass(frozen=True)
class DataFile:
    """One data file of an Iceberg table, from its ``data_files`` metadata table.

    Attributes:
        path: ``file_path``.
        size_bytes: ``file_size_in_bytes``.
        record_count: ``record_count``.
        min_key: lower bound of the sort column (``readable_metrics``); None when
            the file has no bound (only nulls, or metrics off for the column).
        max_key: upper bound of the sort column.
        min_key_text: ``min_key`` as Spark renders it (``cast(... as string)``).
        max_key_text: ``max_key`` as Spark renders it.
        partition: ``(field, value, value as text)`` per partition field; empty for an
            unpartitioned table.
        added_at: commit time of the snapshot that added the file (naive UTC), if known.
    """

    path: str
    size_bytes: int
    record_count: int
    min_key: Any
    max_key: Any
    min_key_text: str | None = None
    max_key_text: str | None = None
    partition: tuple[tuple[str, Any, str | None], ...] = ()
    added_at: datetime | None = None

    @property
    def partition_id(self) -> str | None:
        """``field=value/...`` (null values as ``null``); None when unpartitioned."""
        if not self.partition:
            return None
        return "/".join(
            f"{name}={'null' if text is None else text}" for name, _, text in self.partition
        )


def files_where_clauses(
    members: Sequence[DataFile], sort_column: str, layout: TableLayout
) -> tuple[str, str]:
    """The where clause of ``rewrite_data_files`` for a run of files, and the same
    selection as a predicate over the ``data_files`` metadata table (on Delta: over
    ``DeltaTableFiles.listing``).

    Iceberg plans the rewrite from file metrics: it takes every file whose key bounds
    meet ``[first min, last max]`` (and whose partition matches). The run's files are
    contiguous and no file of the table overlaps another, so within the partition
    that is exactly the run. Identity partition fields are added as equalities; a
    file of another partition that a where clause cannot exclude (a transform such
    as ``days(ts)``, whose files meet the key range) is caught by the executor's check
    of the files predicate, which then skips the merge.
    """
    first, last = members[0], members[-1]
    column = quote_identifier(sort_column)
    key_type = layout.sort_column_type or "string"
    low = typed_literal(first.min_key_text, key_type)
    high = typed_literal(last.max_key_text, key_type)
    call = [f"{column} >= {low}", f"{column} <= {high}"]
    if layout.format == "delta":
        # the bounds of DeltaTableFiles.listing (Delta's statistics of the sort column)
        files = [f"max_key >= {low}", f"min_key <= {high}"]
    else:
        # readable_metrics has one field per leaf column, named by its full (dotted) name
        metrics = "readable_metrics.`" + sort_column.replace("`", "``") + "`"
        files = [f"{metrics}.upper_bound >= {low}", f"{metrics}.lower_bound <= {high}"]
    call += partition_predicates(first.partition, layout, metadata=False)
    files += partition_predicates(first.partition, layout, metadata=True)
    return " and ".join(call), " and ".join(files)


def _file_range_id(item: DataFile) -> str:
    """A file's range id: its keys (``2024-01-08``, ``2024-01-08..2024-01-14``), after
    its partition (``region=eu:2024-01-08``). Unique, because files do not overlap."""
    keys = item.min_key_text
    if item.max_key_text != item.min_key_text:
        keys = f"{item.min_key_text}..{item.max_key_text}"
    return f"{item.partition_id}:{keys}" if item.partition else str(keys)


def plan_files(
    files: Sequence[DataFile],
    options: AutoMergeOptions,
    layout: TableLayout,
    *,
    model_name: str,
) -> list[dict[str, Any]]:
    """Plan the merges of a table's data files ordered by ``options.sort_column``.

    One range per file, holding the keys ``[min_key, max_key]`` of its metrics.
    Within a partition the files are sorted by key and tile it like tablets: file
    *i* covers ``(max of file i-1, max of file i]``, so neighbours are contiguous and
    a merged run holds exactly its files. Files of different partitions are never
    contiguous (``rewrite_data_files`` never combines them), so each partition is
    planned on its own, partitions in order of their values. Files without key
    bounds are left alone (reason ``no_key_bounds``).

    Args:
        files: the table's data files, in any order.
        options: from ``read_options``; ``sort_column`` must be set, rules typed.
        layout: table names, types and identity partition fields.
        model_name: named in error text.

    Returns:
        One row (``PLAN_COLUMNS``) per file, in key order.

    Raises:
        AutoMergeError: files that overlap on the key (they are not ranges of the
            key), bad mergeability.
    """
    assert options.sort_column is not None
    by_partition: dict[tuple[Any, ...], list[DataFile]] = {}
    for item in files:
        key = tuple(value for _, value, _ in item.partition)
        by_partition.setdefault(key, []).append(item)
    ids = {
        f.path: _file_range_id(f) if f.min_key is not None and f.max_key is not None else f.path
        for f in files
    }
    rows: list[dict[str, Any]] = []
    merge_count = 0
    for key in sorted(by_partition, key=order_key):
        group = by_partition[key]
        unbounded = sorted(
            (f for f in group if f.min_key is None or f.max_key is None), key=lambda f: f.path
        )
        bounded = sorted(
            (f for f in group if f.min_key is not None and f.max_key is not None),
            key=lambda f: (order_key(f.min_key), order_key(f.max_key), f.path),
        )
        for item in unbounded:
            explanation = (
                f"the file has no bounds for {options.sort_column} in its metrics (only nulls, "
                "or metrics turned off for the column by write.metadata.metrics.*), so it has "
                "no place in the key order"
            )
            decision = RangeDecision(item.path, "leave", REASON_NO_KEY_BOUNDS, explanation)
            rows.append(_file_row(item, ids, options, layout, decision, None, None))
        _check_no_overlap(bounded, options.sort_column, layout, model_name)
        ranges = []
        rules: dict[str, int | None] = {}
        previous = None
        for item in bounded:
            range_id = ids[item.path]
            mergeability, rules[range_id] = resolve_mergeability(
                options.rules,
                item.min_key,
                item.max_key,
                created_by=options.created_by,
                written_at=item.added_at,
                range_id=range_id,
                model_name=model_name,
            )
            ranges.append(
                Range(
                    range_id=range_id,
                    lower=None if previous is None else previous.max_key,
                    upper=item.max_key,
                    size_bytes=item.size_bytes,
                    file_count=1,
                    mergeability=mergeability,
                    created_by=options.created_by,
                    record_count=item.record_count,
                )
            )
            previous = item
        plan = plan_auto_merge(ranges, options.settings, options.now, model_name)
        members_of: dict[int, list[DataFile]] = {}
        for item, decision in zip(bounded, plan.decisions, strict=True):
            if decision.plan_index is not None:
                members_of.setdefault(decision.plan_index, []).append(item)
        clauses = {
            index: files_where_clauses(members, options.sort_column, layout)
            for index, members in members_of.items()
        }
        for item, item_range, decision in zip(bounded, ranges, plan.decisions, strict=True):
            merge_values: dict[str, Any] = {}
            if decision.plan_index is not None:
                members = members_of[decision.plan_index]
                merge_values = merge_columns(
                    plan.merges[decision.plan_index],
                    merge_count + decision.plan_index + 1,
                    members[0].min_key_text,
                    members[-1].max_key_text,
                    clauses[decision.plan_index],
                )
            mergeability, rule = item_range.mergeability, rules[item_range.range_id]
            rows.append(
                _file_row(item, ids, options, layout, decision, mergeability, rule, **merge_values)
            )
        merge_count += len(plan.merges)
    return numbered(rows)


def _file_row(
    item: DataFile,
    ids: Mapping[str, str],
    options: AutoMergeOptions,
    layout: TableLayout,
    decision: RangeDecision,
    mergeability: Mergeability | None,
    rule: int | None,
    **merge_values: Any,
) -> dict[str, Any]:
    return plan_row(
        layout,
        options,
        decision,
        mergeability,
        rule,
        source=SOURCE_FILES,
        sort_column=options.sort_column,
        range_id=ids[item.path],
        partition=item.partition_id,
        min_key=item.min_key_text,
        max_key=item.max_key_text,
        file_count=1,
        size_bytes=item.size_bytes,
        record_count=item.record_count,
        file_paths=[item.path],
        **merge_values,
    )


def _check_no_overlap(
    files: Sequence[DataFile], sort_column: str, layout: TableLayout, model_name: str
) -> None:
    """Sorted files must hold disjoint key intervals: a key on two files has no single
    range, and a where clause could not select one file without the other."""
    for previous, item in zip(files, files[1:], strict=False):
        if order_key(item.min_key) <= order_key(previous.max_key):
            where = f" in partition {item.partition_id}" if item.partition else ""
            raise setting_error(
                model_name,
                "sort_column",
                f"the data files of {layout.table_name} overlap on {sort_column}{where}, so "
                f"they are not ranges of the key: {previous.path} holds "
                f"[{previous.min_key_text}, {previous.max_key_text}] and {item.path} holds "
                f"[{item.min_key_text}, {item.max_key_text}]. Sort the table by "
                f"{sort_column} first (ALTER TABLE ... WRITE ORDERED BY {sort_column}, then "
                "CALL <catalog>.system.rewrite_data_files(..., strategy => 'sort')), "
                "choose another sort_column, or plan with source 'partitions'",
                repr(sort_column),
            )
