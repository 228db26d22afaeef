"""Planning a table's partitions as ranges (from its ``partitions`` metadata table), and
the where clauses that select a merge's partitions."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dbt_merge.auto_merge.errors import setting_error
from dbt_merge.auto_merge.layout import (
    TableLayout,
    merge_columns,
    numbered,
    partition_predicates,
    plan_row,
)
from dbt_merge.auto_merge.mergeability import (
    SYSTEM,
    Mergeability,
    local_naive_to_utc,
    parse_mergeability,
)
from dbt_merge.auto_merge.options import SOURCE_PARTITIONS, AutoMergeOptions
from dbt_merge.auto_merge.planner import plan_auto_merge
from dbt_merge.auto_merge.ranges import Range, check_count, format_key, order_key
from dbt_merge.auto_merge.rules import resolve_mergeability

# The columns of <table>.partitions a range is made of.
_PARTITION_COLUMNS = ("record_count", "file_count", "total_data_file_size_in_bytes")


def ranges_from_partitions(
    rows: Sequence[Mapping[str, Any]],
    *,
    model_name: str,
    mergeability: (
        str | Mapping[str, Any] | Mergeability | Callable[[Mapping[str, Any]], Any] | None
    ) = None,
    created_by: str = SYSTEM,
) -> list[Range]:
    """Ranges from the rows of an Iceberg ``<table>.partitions`` metadata table.

    Columns read (apache/iceberg ``core/.../PartitionsTable.java``): ``partition``
    (struct; absent for an unpartitioned table), ``record_count``, ``file_count`` (data
    files), ``total_data_file_size_in_bytes`` (data files) and the optional
    ``last_updated_at`` (commit time of the last snapshot that touched the
    partition). Delete files are not counted. Pass rows as dicts, e.g.
    ``[r.asDict(recursive=True) for r in spark.table("db.t.partitions").collect()]``.

    Partitions are sorted by their values (field order, nulls first) and tile the key
    space: partition *i* covers ``(partition i-1, partition i]``, the first starts at
    -inf. A merged range ``(lower, upper]`` therefore holds exactly its member
    partitions. Each range id is ``field=value/...`` (``(unpartitioned)`` without
    fields).

    Args:
        rows: one dict per partition.
        model_name: named in error text.
        mergeability: for every partition (see ``parse_mergeability``), or a callable
            that takes the row and returns it. A DELAY is stamped with the row's
            ``last_updated_at`` unless its dict gives ``marked_at``, so ``"DELAY:1d"``
            means "a day after the partition was last written".
        created_by: default creator; Iceberg partitions are made by writes, so
            ``system`` (ALWAYS by default).

    Returns:
        The ranges in key order.

    Raises:
        AutoMergeError: a missing column, a bad count, duplicate partitions or a bad
            mergeability.
    """
    keyed: list[tuple[tuple[Any, ...], str, Mapping[str, Any]]] = []
    for row in rows:
        missing = [c for c in _PARTITION_COLUMNS if c not in row]
        if missing:
            raise setting_error(
                model_name,
                "partitions",
                f"each row needs the column(s) {', '.join(missing)}",
                repr(sorted(row)),
            )
        partition = row.get("partition")
        if partition is None:
            key: tuple[Any, ...] = ()
            range_id = "(unpartitioned)"
        elif isinstance(partition, Mapping):
            key = tuple(partition.values())
            range_id = "/".join(
                f"{name}={'null' if value is None else value}" for name, value in partition.items()
            )
        elif isinstance(partition, Sequence) and not isinstance(partition, str):
            key = tuple(partition)
            range_id = format_key(key)
        else:
            raise setting_error(
                model_name,
                "partitions",
                "partition must be a struct (dict) or a tuple of field values",
                repr(partition),
            )
        keyed.append((key, range_id or "(unpartitioned)", row))
    try:
        keyed.sort(key=lambda entry: order_key(entry[0]))
    except TypeError:
        types = sorted({type(v).__name__ for key, _, _ in keyed for v in key if v is not None})
        raise setting_error(
            model_name,
            "partitions",
            "partition values must be comparable",
            f"values of types {', '.join(types)}",
        ) from None

    if len(keyed) > 1 and any(not key for key, _, _ in keyed):
        raise setting_error(
            model_name,
            "partitions",
            "a row without partition values must be the only row (an unpartitioned table)",
            f"{len(keyed)} rows",
        )

    ranges: list[Range] = []
    previous: tuple[Any, ...] | None = None
    for key, range_id, row in keyed:
        if previous is not None and order_key(previous) == order_key(key):
            raise setting_error(
                model_name, "partitions", "each partition must appear once", range_id
            )
        value = mergeability(row) if callable(mergeability) else mergeability
        counts = {c: row[c] for c in _PARTITION_COLUMNS}
        for column, number in counts.items():
            check_count(number, f"{column} of partition {range_id}", "partitions", model_name)
        ranges.append(
            Range(
                range_id=range_id,
                lower=previous,
                upper=key or None,  # an unpartitioned table is one range (-inf,+inf)
                size_bytes=counts["total_data_file_size_in_bytes"],
                file_count=counts["file_count"],
                mergeability=parse_mergeability(
                    value,
                    created_by,
                    model_name=model_name,
                    marked_at=row.get("last_updated_at"),
                ),
                created_by=created_by,
                record_count=counts["record_count"],
            )
        )
        previous = key
    return ranges


def partitions_where_clauses(
    partitions: Sequence[Sequence[tuple[str, Any, str | None]]], layout: TableLayout
) -> tuple[str, str] | None:
    """Where clauses selecting exactly the given partitions (see ``files_where_clauses``).

    Returns None when a partition field is not an identity field: a where clause on
    the table's columns cannot name such a partition exactly.
    """
    if not partitions or any(
        name not in layout.identity_fields for part in partitions for name, _, _ in part
    ):
        return None
    clauses = []
    for metadata in (False, True):
        each = [
            " and ".join(partition_predicates(part, layout, metadata=metadata))
            for part in partitions
        ]
        clauses.append(" or ".join(f"({c})" for c in each) if len(each) > 1 else each[0])
    return clauses[0], clauses[1]


def plan_partitions(
    rows: Sequence[Mapping[str, Any]],
    options: AutoMergeOptions,
    layout: TableLayout,
    *,
    model_name: str,
) -> list[dict[str, Any]]:
    """Plan the merges of a table's partitions (ranges of ``ranges_from_partitions``).

    Iceberg keeps its partitions: executing a planned run compacts the *files* of
    its partitions (``rewrite_data_files`` never combines files of two partitions).

    Args:
        rows: one dict per partition with the columns of the ``partitions`` metadata
            table (``partition`` as a dict), plus ``partition_text`` (the values as
            Spark renders them, a dict) and ``file_paths`` (its data files).
        options: from ``read_options``, rules typed as tuples of partition values.
        layout: table names, types and identity partition fields.
        model_name: named in error text.

    Returns:
        One row (``PLAN_COLUMNS``) per partition, in key order.
    """
    by_key: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for row in rows:
        partition = row.get("partition") or {}
        by_key[tuple(partition.values())] = row
    chosen: dict[tuple[Any, ...], tuple[Mergeability, int | None]] = {}

    def mergeability_of(row: Mapping[str, Any]) -> Mergeability:
        key = tuple((row.get("partition") or {}).values())
        chosen[key] = resolve_mergeability(
            options.rules,
            key,
            key,
            created_by=options.created_by,
            written_at=local_naive_to_utc(row.get("last_updated_at")),
            range_id=_partition_label(row),
            model_name=model_name,
        )
        return chosen[key][0]

    ranges = ranges_from_partitions(
        rows, model_name=model_name, mergeability=mergeability_of, created_by=options.created_by
    )
    plan = plan_auto_merge(ranges, options.settings, options.now, model_name)
    keys = [() if item.upper is None else item.upper for item in ranges]

    def parts(key: tuple[Any, ...]) -> list[tuple[str, Any, str | None]]:
        row = by_key[key]
        texts = row.get("partition_text") or {}
        values = (row.get("partition") or {}).items()
        return [(name, value, texts.get(name)) for name, value in values]

    def text(key: tuple[Any, ...]) -> str | None:
        return "/".join("null" if t is None else str(t) for _, _, t in parts(key)) or None

    out = []
    for item, key, decision in zip(ranges, keys, plan.decisions, strict=True):
        row = by_key[key]
        merge_values: dict[str, Any] = {}
        if decision.plan_index is not None:
            merge = plan.merges[decision.plan_index]
            member_keys = [
                k for k, r in zip(keys, ranges, strict=True) if r.range_id in merge.range_ids
            ]
            clauses = partitions_where_clauses([parts(k) for k in member_keys], layout)
            merge_values = merge_columns(
                merge,
                decision.plan_index + 1,
                text(member_keys[0]),
                text(member_keys[-1]),
                clauses,
            )
            if clauses is None:
                merge_values["explanation"] += (
                    "; not executable: a where clause can only select identity partitions, "
                    f"and {layout.table_name} has partition fields "
                    + ", ".join(n for n, _, _ in parts(key) if n not in layout.identity_fields)
                )
        mergeability, rule = chosen[key]
        out.append(
            plan_row(
                layout,
                options,
                decision,
                mergeability,
                rule,
                source=SOURCE_PARTITIONS,
                range_id=item.range_id,
                partition=item.range_id if key else None,
                min_key=text(key),
                max_key=text(key),
                file_count=item.file_count,
                size_bytes=item.size_bytes,
                record_count=item.record_count,
                file_paths=sorted(row.get("file_paths") or []),
                **merge_values,
            )
        )
    return numbered(out)


def _partition_label(row: Mapping[str, Any]) -> str:
    partition = row.get("partition") or {}
    return "/".join(f"{k}={'null' if v is None else v}" for k, v in partition.items()) or (
        "(unpartitioned)"
    )
