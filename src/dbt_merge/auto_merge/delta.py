"""What the auto-merge planner reads of a Delta Lake table: the files of its current
snapshot, from the Delta log (``DeltaLog.forTableWithSnapshot``), with the statistics
Delta keeps per file (``numRecords``, ``minValues``, ``maxValues``) and the partition
values of each file. Delta has no metadata tables for this in SQL (no ``<table>.files``),
so the snapshot's ``allFiles`` Dataset is read through the JVM.

Delta's statistics are collected for the first ``delta.dataSkippingNumIndexedCols``
columns (32 by default) and truncate long strings; a file without them has no key
bounds and is left alone (``no_key_bounds``), as an Iceberg file without metrics is.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from dbt_merge.auto_merge.files import DataFile
from dbt_merge.auto_merge.layout import TableLayout
from dbt_merge.auto_merge.mergeability import local_naive_to_utc
from dbt_merge.auto_merge.rules import MergeabilityRule
from dbt_merge.core.sql import quote_identifier, string_literal

# the types Delta keeps min/max statistics for (StatisticsCollection): numbers, dates,
# timestamps and strings, by Spark's simpleString names
_STATS_TYPES = ("tinyint", "smallint", "int", "bigint", "float", "double", "decimal")
_STATS_TYPES += ("date", "timestamp", "timestamp_ntz", "string")


def load_table(session: Any, catalog_name: str, table_name: str) -> DeltaTableFiles | None:
    """The table as the planner reads it, if it is a Delta table of the session
    catalog; None for any other table (the caller tries Iceberg)."""
    if catalog_name != "spark_catalog":
        return None
    jss = session._jsparkSession
    try:
        identifier = jss.sessionState().sqlParser().parseTableIdentifier(table_name)
        provider = jss.sessionState().catalog().getTableMetadata(identifier).provider()
    except Exception:  # py4j: no such table; Iceberg's loader then names it
        return None
    if provider.isEmpty() or str(provider.get()).lower() != "delta":
        return None
    jvm = session._jvm
    snapshot = jvm.org.apache.spark.sql.delta.DeltaLog.forTableWithSnapshot(jss, identifier)._2()
    return DeltaTableFiles(session, catalog_name, table_name, snapshot)


class DeltaTableFiles:
    """A Delta table's properties, layout and files at one snapshot (a version)."""

    format = "delta"

    def __init__(self, session: Any, catalog_name: str, table_name: str, snapshot: Any):
        from pyspark.sql import DataFrame

        self.session = session
        self.snapshot = snapshot
        metadata = snapshot.metadata()
        self.properties = {
            str(k): str(v) for k, v in dict(_scala_map(session, metadata.configuration())).items()
        }
        schema = {f.name: f.dataType.simpleString() for f in _schema(session, metadata)}
        partition_columns = [str(c) for c in _scala_seq(metadata.partitionColumns())]
        self.schema = schema
        self.root = str(snapshot.deltaLog().dataPath().toString()).rstrip("/")
        self.all_files = DataFrame(snapshot.allFiles().toDF(), session)
        self.layout = TableLayout(
            catalog_name=catalog_name,
            table_name=table_name,
            # every Delta partition column is an identity partition of itself
            identity_fields={c: c for c in partition_columns},
            partition_types={c: schema[c] for c in partition_columns},
            snapshot_id=int(snapshot.version()),
        )

    def sort_order_column(self, model_name: str) -> str:
        from dbt_merge.auto_merge.errors import setting_error

        raise setting_error(
            model_name,
            "sort_column",
            "is required for source 'files' on a Delta table: Delta has no sort order to "
            "take it from",
            "None",
        )

    def key_types(self) -> dict[str, str]:
        partitioned = set(self.layout.partition_types)
        return {
            name: sql_type
            for name, sql_type in self.schema.items()
            if name not in partitioned and sql_type.split("(")[0] in _STATS_TYPES
        }

    def files(self, sort_column: str, rules: Sequence[MergeabilityRule]) -> list[DataFile]:
        """The snapshot's files with the sort column's bounds (``rules`` are not needed:
        a file's write time, for DELAY rules, is its ``modificationTime``)."""
        del rules
        key = quote_identifier(sort_column)
        key_type = self.schema[sort_column]
        stats = (
            f"from_json(stats, 'struct<numRecords: bigint, minValues: struct<{key}: {key_type}>,"
            f" maxValues: struct<{key}: {key_type}>>')"
        )
        columns = [
            f"{self._absolute_path_sql()} as file_path",
            "size",
            "s.numRecords - coalesce(deletionVector.cardinality, 0) as record_count",
            f"s.minValues.{key} as min_key",
            f"s.maxValues.{key} as max_key",
            f"cast(s.minValues.{key} as string) as min_key_text",
            f"cast(s.maxValues.{key} as string) as max_key_text",
            "timestamp_millis(modificationTime) as added_at",
            *self._partition_sql(),
        ]
        rows = self.all_files.selectExpr("*", f"{stats} as s").selectExpr(*columns).collect()
        return [
            DataFile(
                path=row["file_path"],
                size_bytes=int(row["size"]),
                record_count=int(row["record_count"] or 0),
                min_key=row["min_key"],
                max_key=row["max_key"],
                min_key_text=row["min_key_text"],
                max_key_text=row["max_key_text"],
                partition=self._partition(row),
                added_at=local_naive_to_utc(row["added_at"]),
            )
            for row in rows
        ]

    def partitions(self) -> list[dict[str, Any]]:
        """One row per partition, as Iceberg's ``partitions`` metadata table has them:
        ``partition`` (absent for an unpartitioned table), ``record_count``,
        ``file_count``, ``total_data_file_size_in_bytes``, ``last_updated_at`` (the
        newest file's write time), and ``file_paths``."""
        grouped: dict[tuple[Any, ...], dict[str, Any]] = {}
        rows = self.all_files.selectExpr(
            f"{self._absolute_path_sql()} as file_path",
            "size",
            "cast(get_json_object(stats, '$.numRecords') as bigint)"
            " - coalesce(deletionVector.cardinality, 0) as record_count",
            "timestamp_millis(modificationTime) as added_at",
            *self._partition_sql(),
        ).collect()
        for row in rows:
            values = row["partition"].asDict() if self.layout.partition_types else {}
            entry = grouped.setdefault(
                tuple(values.values()),
                {
                    **({"partition": values} if values else {}),
                    "record_count": 0,
                    "file_count": 0,
                    "total_data_file_size_in_bytes": 0,
                    "last_updated_at": None,
                    "file_paths": [],
                },
            )
            entry["record_count"] += int(row["record_count"] or 0)
            entry["file_count"] += 1
            entry["total_data_file_size_in_bytes"] += int(row["size"])
            added = row["added_at"]
            if entry["last_updated_at"] is None or added > entry["last_updated_at"]:
                entry["last_updated_at"] = added
            entry["file_paths"].append(row["file_path"])
        return list(grouped.values())

    def file_deletes(self) -> list[dict[str, Any]]:
        """Every file of the snapshot with what its deletion vector marks: file_path,
        size, record_count (the rows written, deleted ones included), deleted_rows
        (0 without a deletion vector) and partition (column -> value as text, None
        for an unpartitioned table), by path."""
        rows = self.all_files.selectExpr(
            f"{self._absolute_path_sql()} as file_path",
            "size",
            "cast(get_json_object(stats, '$.numRecords') as bigint) as record_count",
            "coalesce(deletionVector.cardinality, 0) as deleted_rows",
            *self._partition_sql(),
        ).collect()
        found = [
            {
                "file_path": row["file_path"],
                "size": int(row["size"]),
                "record_count": None if row["record_count"] is None else int(row["record_count"]),
                "deleted_rows": int(row["deleted_rows"]),
                "partition": row["partition_text"].asDict() if self.layout.partition_types else None,
            }
            for row in rows
        ]
        return sorted(found, key=lambda f: f["file_path"])

    def file_sizes(self) -> Any:
        partition = "cast(partition as string)" if self.layout.partition_types else "null"
        return self.all_files.selectExpr(
            f"{self._absolute_path_sql()} as file_path",
            "size as file_size_in_bytes",
            *self._partition_sql(),
        ).selectExpr("file_path", "file_size_in_bytes", f"{partition} as partition_value")

    def _absolute_path_sql(self) -> str:
        """A file's ``path`` is relative to the table's folder (and URL-encoded) unless
        it is absolute."""
        root = string_literal(self.root + "/")
        return f"if(path rlike '^[a-zA-Z][a-zA-Z0-9+.-]*:', path, concat({root}, path))"

    def _partition_sql(self) -> list[str]:
        if not self.layout.partition_types:
            return []
        typed, texts = [], []
        for name, sql_type in self.layout.partition_types.items():
            value = f"cast(partitionValues[{string_literal(name)}] as {sql_type})"
            typed.append(f"{value} as {quote_identifier(name)}")
            texts.append(f"cast({value} as string) as {quote_identifier(name)}")
        return [
            f"struct({', '.join(typed)}) as partition",
            f"struct({', '.join(texts)}) as partition_text",
        ]

    def _partition(self, row: Any) -> tuple[tuple[str, Any, str | None], ...]:
        if not self.layout.partition_types:
            return ()
        values, texts = row["partition"].asDict(), row["partition_text"].asDict()
        return tuple((name, values[name], texts[name]) for name in self.layout.partition_types)


def _schema(session: Any, metadata: Any) -> Any:
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(metadata.schemaString())).fields


def _scala_map(session: Any, scala_map: Any) -> Any:
    return session._jvm.scala.collection.JavaConverters.mapAsJavaMap(scala_map)


def _scala_seq(seq: Any) -> list[Any]:
    return [seq.apply(i) for i in range(seq.size())]
