"""``plan_table``: the only part of auto-merge that needs Spark. It reads an Iceberg
table's own metadata (properties, sort order, ``data_files``, ``partitions``, ``entries``),
plans with ``plan_files`` or ``plan_partitions`` and returns the plan as a DataFrame."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from dbt_merge.auto_merge import delta
from dbt_merge.auto_merge.errors import setting_error
from dbt_merge.auto_merge.files import DataFile, plan_files
from dbt_merge.auto_merge.layout import PLAN_COLUMNS, TableLayout
from dbt_merge.auto_merge.mergeability import local_naive_to_utc, utc_naive
from dbt_merge.auto_merge.options import PROPERTY_PREFIX, SOURCE_FILES, read_options
from dbt_merge.auto_merge.partitions import plan_partitions
from dbt_merge.auto_merge.ranges import order_key
from dbt_merge.auto_merge.rules import MergeabilityRule
from dbt_merge.core.sql import quote_identifier, string_literal

logger = logging.getLogger(__name__)


def plan_table(
    session: Any,
    table: Any,
    *,
    model_name: str,
    config: Mapping[str, Any] | None = None,
) -> Any:
    """Plan the auto-merge of an Iceberg table from its own metadata tables (of a Delta
    table from its log: ``dbt_merge.auto_merge.delta``).

    The ranges are the table's data files ordered by a sort column (``source:
    files``, the default; from ``<table>.data_files`` and its ``readable_metrics``) or
    its partitions (``source: partitions``, from ``<table>.partitions``). Options come
    from ``config`` (a dbt model's ``auto_merge`` config), else from the table
    properties ``dbt_merge.auto_merge.<option>``, else their defaults:

    ================  ========================================================
    ``source``        ``files`` (default) or ``partitions``
    ``sort_column``   files only; default: the first field of the table's sort
                      order (``ALTER TABLE ... WRITE ORDERED BY``)
    ``threshold``     0.25; a merge may reach ``threshold x split_threshold``
    ``split_threshold``  1 GiB; also the ``target-file-size-bytes`` of the rewrite
    ``file_max``      10000 files per merge
    ``mergeability``  one mergeability for every range, or a list of rules by key
                      range (``parse_rules``); property value: JSON
    ``created_by``    ``system`` (ranges without a rule are ALWAYS) or ``user``
                      (NEVER)
    ``now``           config only: ISO timestamp DELAYs are compared with;
                      empty: the current time
    ================  ========================================================

    Args:
        session: the SparkSession.
        table: the table's name (``db.tbl`` or ``catalog.db.tbl``) or a DataFrame
            that reads it, e.g. ``dbt.ref("daily_events")``.
        model_name: named in error text.
        config: the options.

    Returns:
        A DataFrame with one row per range in key order (``PLAN_COLUMNS``): its
        mergeability, whether it is merged or left alone and why, and for merged
        ranges the merge's number, totals and the where clauses the executor
        (``dbt_merge.execute_auto_merge``) uses.

    Raises:
        AutoMergeError: bad options, a table that is neither Iceberg nor Delta, files
            that overlap on the sort column.

    Examples:
        >>> plan = plan_table(spark, "db.events", model_name="events_plan",
        ...                   config={"sort_column": "event_date", "threshold": 0.5})
    """
    stored = _stored_table(session, table, model_name)
    catalog_name, table_name = stored.layout.catalog_name, stored.layout.table_name
    options = read_options(config, stored.properties, model_name=model_name, table_name=table_name)
    layout = stored.layout
    partition_types = layout.partition_types
    if options.source == SOURCE_FILES:
        sort_column = options.sort_column or stored.sort_order_column(model_name)
        key_types = stored.key_types()
        if sort_column not in key_types:
            raise setting_error(
                model_name,
                "sort_column"
                if options.origins["sort_column"] != "table property"
                else f"{PROPERTY_PREFIX}sort_column",
                f"{table_name} has no column {sort_column!r} with metrics; columns: "
                + ", ".join(key_types),
                repr(sort_column),
            )
        key_type = key_types[sort_column]
        layout = replace(layout, sort_column_type=key_type)
        rules = _typed_rules(session, options.rules, [key_type], model_name, scalar=True)
        options = replace(options, sort_column=sort_column, rules=rules)
        files = stored.files(sort_column, options.rules)
        rows = plan_files(files, options, layout, model_name=model_name)
    else:
        types = list(partition_types.values())
        rules = _typed_rules(session, options.rules, types, model_name, scalar=len(types) == 1)
        if len(types) == 1:  # partition keys are tuples, also with one field
            rules = tuple(
                replace(
                    r,
                    lower=None if r.lower is None else (r.lower,),
                    upper=None if r.upper is None else (r.upper,),
                )
                for r in rules
            )
        options = replace(options, rules=rules)
        rows = plan_partitions(stored.partitions(), options, layout, model_name=model_name)
    merges = {row["merge_index"] for row in rows if row["merge_index"] is not None}
    logger.info(
        "auto-merge plan of %s.%s (%s, %s): %d ranges, %d merges",
        catalog_name,
        table_name,
        stored.format,
        options.source,
        len(rows),
        len(merges),
    )
    return _plan_dataframe(session, rows)


def table_files(session: Any, table: Any, *, model_name: str) -> Any:
    """The data files of an Iceberg or a Delta table as a DataFrame: ``file_path``,
    ``file_size_in_bytes`` and ``partition_value`` (the file's partition values as
    Spark renders a struct, e.g. ``{2024-01-01}``; null for an unpartitioned table).

    ``table`` is a name or a DataFrame that reads a table, as for ``plan_table``.
    """
    return _stored_table(session, table, model_name).file_sizes()


def _stored_table(session: Any, table: Any, model_name: str) -> Any:
    """The planner's reader of ``table``: Delta's when it is a Delta table, else Iceberg's
    (which names a table of neither format)."""
    catalog_name, table_name = _table_identity(session, table, model_name)
    return delta.load_table(session, catalog_name, table_name) or _IcebergTable(
        session, catalog_name, table_name, model_name
    )


def _table_identity(session: Any, table: Any, model_name: str) -> tuple[str, str]:
    """``(catalog, namespace.table)`` of a table name or of a DataFrame reading a table."""
    jvm = session._jvm
    if isinstance(table, str):
        try:
            found = jvm.org.apache.iceberg.spark.Spark3Util.catalogAndIdentifier(
                session._jsparkSession, table
            )
        except Exception:  # py4j raises the JVM's parse error
            raise setting_error(model_name, "table", "is not a table name", repr(table)) from None
        identifier = found.identifier()
        parts = [*list(identifier.namespace()), identifier.name()]
        return str(found.catalog().name()), ".".join(str(p) for p in parts)
    plan = getattr(getattr(table, "_jdf", None), "queryExecution", None)
    if plan is None:
        raise setting_error(
            model_name,
            "table",
            "must be a table name or a DataFrame that reads a table",
            repr(table),
        )
    node = table._jdf.queryExecution().analyzed()
    while node.getClass().getSimpleName() == "SubqueryAlias":
        node = node.child()
    if node.getClass().getSimpleName() == "LogicalRelation" and node.catalogTable().isDefined():
        # a table of the session catalog read through its V1 relation (Delta's, parquet)
        identifier = node.catalogTable().get().identifier()
        database = identifier.database()
        if database.isDefined():
            return "spark_catalog", f"{database.get()}.{identifier.table()}"
    if node.getClass().getSimpleName() != "DataSourceV2Relation" or node.identifier().isEmpty():
        raise setting_error(
            model_name,
            "table",
            "a DataFrame must read one table as it is (dbt.ref or spark.table, no "
            "filters or projections)",
            node.getClass().getSimpleName(),
        )
    identifier = node.identifier().get()
    parts = [*list(identifier.namespace()), identifier.name()]
    return str(node.catalog().get().name()), ".".join(str(p) for p in parts)


class _IcebergTable:
    """What the planner reads of an Iceberg table: its properties, layout, sort order,
    and its ``data_files`` and ``partitions`` metadata tables."""

    format = "iceberg"

    def __init__(self, session: Any, catalog_name: str, table_name: str, model_name: str):
        self.session = session
        self.iceberg = _load_iceberg_table(session, f"{catalog_name}.{table_name}", model_name)
        self.properties = {str(k): str(v) for k, v in dict(self.iceberg.properties()).items()}
        self.metadata = f"{quote_identifier(catalog_name)}.{quote_identifier(table_name)}"
        self.data_files = session.table(f"{self.metadata}.data_files")
        snapshot = self.iceberg.currentSnapshot()
        schema = self.iceberg.schema()
        partition_types = {}
        if "partition" in self.data_files.columns:
            partition_types = {
                f.name: f.dataType.simpleString()
                for f in self.data_files.schema["partition"].dataType
            }
        self.layout = TableLayout(
            catalog_name=catalog_name,
            table_name=table_name,
            identity_fields={
                str(f.name()): str(schema.findColumnName(f.sourceId()))
                for f in self.iceberg.spec().fields()
                if f.transform().isIdentity()
            },
            partition_types=partition_types,
            snapshot_id=None if snapshot is None else int(snapshot.snapshotId()),
        )

    def sort_order_column(self, model_name: str) -> str:
        return _sort_order_column(self.iceberg, self.iceberg.schema(), model_name)

    def key_types(self) -> dict[str, str]:
        """``{column: Spark type}`` of the columns with lower and upper bounds."""
        metrics = self.data_files.schema["readable_metrics"].dataType
        return {f.name: f.dataType["lower_bound"].dataType.simpleString() for f in metrics.fields}

    def files(self, sort_column: str, rules: Sequence[MergeabilityRule]) -> list[DataFile]:
        return _read_files(
            self.session, self.metadata, sort_column, self.layout.partition_types, rules
        )

    def partitions(self) -> list[dict[str, Any]]:
        return _read_partitions(self.session, self.metadata, self.layout.partition_types)

    def file_sizes(self) -> Any:
        files = self.session.table(f"{self.metadata}.files")  # delete files too
        partition = "partition" if "partition" in files.columns else "null"
        return files.selectExpr(
            "file_path", "file_size_in_bytes", f"cast({partition} as string) as partition_value"
        )


def _load_iceberg_table(session: Any, name: str, model_name: str) -> Any:
    try:
        return session._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            session._jsparkSession, name
        )
    except Exception as exc:  # a Py4JJavaError: no such table, or not Iceberg
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise setting_error(
            model_name,
            "table",
            f"must be an Iceberg or a Delta table ({message[:200]})",
            repr(name),
        ) from None


def _sort_order_column(iceberg: Any, schema: Any, model_name: str) -> str:
    fields = list(iceberg.sortOrder().fields())
    if fields and fields[0].transform().isIdentity():
        return str(schema.findColumnName(fields[0].sourceId()))
    raise setting_error(
        model_name,
        "sort_column",
        "is required for source 'files': the table has no sort order to take it from "
        "(ALTER TABLE ... WRITE ORDERED BY <column> sets one)",
        "None",
    )


def _typed_rules(
    session: Any,
    rules: Sequence[MergeabilityRule],
    types: Sequence[str],
    model_name: str,
    *,
    scalar: bool,
) -> tuple[MergeabilityRule, ...]:
    """Rule bounds read as the key's Spark type (``try_cast``), so they compare with
    the keys Spark returns. ``scalar``: one key column, bounds are single values;
    otherwise a bound is a list with one value per partition field."""
    wanted: list[tuple[MergeabilityRule, str, Any]] = []
    for rule in rules:
        for end, value in (("from", rule.lower), ("to", rule.upper)):
            if value is None:
                continue
            values = [value] if scalar else value
            if (
                not types
                or isinstance(values, str | bytes)
                or not isinstance(values, Sequence)
                or len(values) != len(types)
            ):
                expected = (
                    "no keys: the table is not partitioned"
                    if not types
                    else "one value"
                    if scalar
                    else f"a list of {len(types)} values, one per partition field"
                )
                raise setting_error(
                    model_name,
                    "mergeability",
                    f"'{end}' of {rule.label} must be {expected}",
                    repr(value),
                )
            wanted.append((rule, end, values))
    if not wanted:
        return tuple(rules)
    expressions = [
        f"try_cast({string_literal(str(v))} as {t})"
        for _, _, values in wanted
        for v, t in zip(values, types, strict=True)
    ]
    cast = list(session.sql("select " + ", ".join(expressions)).first())
    typed: dict[tuple[int, str], Any] = {}
    for rule, end, values in wanted:
        parts = [cast.pop(0) for _ in values]
        for value, part, sql_type in zip(values, parts, types, strict=True):
            if part is None:
                raise setting_error(
                    model_name,
                    "mergeability",
                    f"'{end}' of {rule.label} cannot be read as {sql_type}",
                    repr(value),
                )
        typed[(rule.index, end)] = parts[0] if scalar else tuple(parts)
    out = []
    for rule in rules:
        lower = typed.get((rule.index, "from"), rule.lower)
        upper = typed.get((rule.index, "to"), rule.upper)
        if lower is not None and upper is not None and order_key(lower) > order_key(upper):
            raise setting_error(
                model_name,
                "mergeability",
                f"{rule.label} must have from <= to",
                f"from {rule.lower!r}, to {rule.upper!r}",
            )
        out.append(replace(rule, lower=lower, upper=upper))
    return tuple(out)


def _read_files(
    session: Any,
    metadata: str,
    sort_column: str,
    partition_types: Mapping[str, str],
    rules: Sequence[MergeabilityRule],
) -> list[DataFile]:
    metrics = "readable_metrics.`" + sort_column.replace("`", "``") + "`"
    columns = [
        "file_path",
        "file_size_in_bytes",
        "record_count",
        f"{metrics}.lower_bound as min_key",
        f"{metrics}.upper_bound as max_key",
        f"cast({metrics}.lower_bound as string) as min_key_text",
        f"cast({metrics}.upper_bound as string) as max_key_text",
    ]
    if partition_types:
        columns += ["partition", _partition_text_sql(partition_types)]
    rows = session.sql(f"select {', '.join(columns)} from {metadata}.data_files").collect()
    added: dict[str, datetime | None] = {}
    if any(rule.counts_from_write for rule in rules):
        # DELAY rules without marked_at count from the commit that added each file
        written = session.sql(
            f"select e.data_file.file_path as file_path, s.committed_at "
            f"from {metadata}.entries as e "
            f"left join {metadata}.snapshots as s on e.snapshot_id = s.snapshot_id "
            f"where e.status < 2 and e.data_file.content = 0"
        ).collect()
        added = {r["file_path"]: local_naive_to_utc(r["committed_at"]) for r in written}
    files = []
    for row in rows:
        partition: tuple[tuple[str, Any, str | None], ...] = ()
        if partition_types:
            values, texts = row["partition"].asDict(), row["partition_text"].asDict()
            partition = tuple((name, values[name], texts[name]) for name in partition_types)
        files.append(
            DataFile(
                path=row["file_path"],
                size_bytes=int(row["file_size_in_bytes"]),
                record_count=int(row["record_count"]),
                min_key=row["min_key"],
                max_key=row["max_key"],
                min_key_text=row["min_key_text"],
                max_key_text=row["max_key_text"],
                partition=partition,
                added_at=added.get(row["file_path"]),
            )
        )
    return files


def _read_partitions(
    session: Any, metadata: str, partition_types: Mapping[str, str]
) -> list[dict[str, Any]]:
    if not partition_types:
        rows = [
            r.asDict(recursive=True)
            for r in session.sql(f"select * from {metadata}.partitions").collect()
        ]
        paths = [
            r["file_path"]
            for r in session.sql(f"select file_path from {metadata}.data_files").collect()
        ]
        for row in rows:
            row["file_paths"] = paths
        return rows
    text_sql = _partition_text_sql(partition_types)
    rows = [
        r.asDict(recursive=True)
        for r in session.sql(f"select *, {text_sql} from {metadata}.partitions").collect()
    ]
    paths: dict[tuple[Any, ...], list[str]] = {}
    for r in session.sql(
        f"select partition, collect_list(file_path) as file_paths from {metadata}.data_files "
        "group by partition"
    ).collect():
        paths[tuple(r["partition"].asDict().values())] = list(r["file_paths"])
    for row in rows:
        row["file_paths"] = paths.get(tuple(row["partition"].values()), [])
    return rows


def _partition_text_sql(partition_types: Mapping[str, str]) -> str:
    """The column ``partition_text``: the partition's values as Spark renders them, the
    text of the plan's keys and of the where clauses' literals."""
    texts = ", ".join(
        f"cast(partition.{quote_identifier(name)} as string) as {quote_identifier(name)}"
        for name in partition_types
    )
    return f"struct({texts}) as partition_text"


def _plan_dataframe(session: Any, rows: Sequence[Mapping[str, Any]]) -> Any:
    from pyspark.sql.types import _parse_datatype_string

    schema = _parse_datatype_string(
        "struct<" + ", ".join(f"`{name}`: {sql_type}" for name, sql_type in PLAN_COLUMNS) + ">"
    )

    def value(item: Any) -> Any:
        # naive UTC datetimes: aware, so Spark stores them as UTC whatever the local zone
        if isinstance(item, datetime):
            return utc_naive(item).replace(tzinfo=UTC)
        return item

    data = [tuple(value(row[name]) for name, _ in PLAN_COLUMNS) for row in rows]
    return session.createDataFrame(data, schema)
