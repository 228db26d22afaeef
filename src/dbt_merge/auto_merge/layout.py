"""The plan table's columns and one row of it, and what the where clauses need to know
about the planned table (names, types, identity partition fields)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dbt_merge.auto_merge.mergeability import Mergeability
from dbt_merge.auto_merge.options import AutoMergeOptions
from dbt_merge.auto_merge.planner import MergePlan, RangeDecision
from dbt_merge.core.sql import quote_identifier, typed_literal

# The plan table: one row per range (file or partition) in key order, with the
# merge it belongs to. (name, Spark SQL type) in column order.
PLAN_COLUMNS = (
    ("catalog_name", "string"),
    ("table_name", "string"),
    ("snapshot_id", "bigint"),
    ("source", "string"),
    ("sort_column", "string"),
    ("range_index", "int"),
    ("range_id", "string"),
    ("partition", "string"),
    ("min_key", "string"),
    ("max_key", "string"),
    ("file_count", "bigint"),
    ("size_bytes", "bigint"),
    ("record_count", "bigint"),
    ("file_paths", "array<string>"),
    ("mergeability", "string"),
    ("mergeability_rule", "int"),
    ("marked_at", "timestamp"),
    ("due_at", "timestamp"),
    ("action", "string"),
    ("reason", "string"),
    ("explanation", "string"),
    ("merge_index", "int"),
    ("merge_min_key", "string"),
    ("merge_max_key", "string"),
    ("merge_file_count", "bigint"),
    ("merge_size_bytes", "bigint"),
    ("merge_where", "string"),
    ("merge_files_where", "string"),
    ("target_file_size_bytes", "bigint"),
    ("planned_at", "timestamp"),
)
_PLAN_COLUMN_NAMES = tuple(name for name, _ in PLAN_COLUMNS)


@dataclass(frozen=True)
class TableLayout:
    """What the where clauses need to know about the table.

    Attributes:
        catalog_name: e.g. ``spark_catalog``.
        table_name: ``<namespace>.<table>``, e.g. ``dbt_merge.daily_events``.
        sort_column_type: Spark SQL type of the sort column, e.g. ``date``.
        identity_fields: ``{partition field: source column}`` of the identity
            partition fields (a where clause on the column selects the partition).
        partition_types: ``{partition field: Spark SQL type}``.
        snapshot_id: the current snapshot, None for a table without one.
        format: ``iceberg`` (a merge's files predicate is over the ``data_files``
            metadata table) or ``delta`` (over ``DeltaTableFiles.listing``).
    """

    catalog_name: str
    table_name: str
    sort_column_type: str | None = None
    identity_fields: Mapping[str, str] = field(default_factory=dict)
    partition_types: Mapping[str, str] = field(default_factory=dict)
    snapshot_id: int | None = None
    format: str = "iceberg"


def partition_predicates(
    partition: Sequence[tuple[str, Any, str | None]], layout: TableLayout, *, metadata: bool
) -> list[str]:
    """Equalities on the identity partition fields: on the table's columns (for the
    CALL) or on ``partition.<field>`` of the metadata table (to check the files)."""
    predicates = []
    for name, _, text in partition:
        if name not in layout.identity_fields:
            continue
        column = (
            "partition." + quote_identifier(name)
            if metadata
            else quote_identifier(layout.identity_fields[name])
        )
        if text is None:
            predicates.append(f"{column} is null")
        else:
            predicates.append(f"{column} = {typed_literal(text, layout.partition_types[name])}")
    return predicates


def plan_row(
    layout: TableLayout,
    options: AutoMergeOptions,
    decision: RangeDecision,
    mergeability: Mergeability | None,
    rule: int | None,
    **values: Any,
) -> dict[str, Any]:
    """One row of the plan table (``PLAN_COLUMNS``): the table, what the planner
    decided for the range and why, its mergeability and the rule behind it, the
    options it was planned with, then ``values`` (the range's own columns; they win)."""
    row = dict.fromkeys(_PLAN_COLUMN_NAMES)
    row.update(
        catalog_name=layout.catalog_name,
        table_name=layout.table_name,
        snapshot_id=layout.snapshot_id,
        mergeability=None if mergeability is None else str(mergeability),
        mergeability_rule=rule,
        marked_at=None if mergeability is None else mergeability.marked_at,
        action=decision.action,
        reason=decision.reason,
        explanation=decision.explanation,
        due_at=decision.due_at,
        target_file_size_bytes=options.settings.split_threshold,
        planned_at=options.now,
    )
    unknown = set(values) - set(row)
    assert not unknown, unknown
    row.update(values)
    return row


def merge_columns(
    merge: MergePlan,
    number: int,
    min_key: str | None,
    max_key: str | None,
    clauses: tuple[str, str] | None,
) -> dict[str, Any]:
    """The columns of a merged range's row that describe its merge: the merge's
    number (from 1 across the table), key range, totals and where clauses (the CALL's,
    then the files check's; None when no where clause can select it), and as the
    explanation the merge's reason."""
    return {
        "explanation": merge.reason,
        "merge_index": number,
        "merge_min_key": min_key,
        "merge_max_key": max_key,
        "merge_file_count": merge.file_count,
        "merge_size_bytes": merge.size_bytes,
        "merge_where": None if clauses is None else clauses[0],
        "merge_files_where": None if clauses is None else clauses[1],
    }


def numbered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sets ``range_index`` (1, 2, ...) of rows in key order."""
    for index, row in enumerate(rows, start=1):
        row["range_index"] = index
    return rows
