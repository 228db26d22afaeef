"""What the auto-merge planner reads of a Delta Lake table: the files of its current
snapshot, from the Delta log (``DeltaLog.forTableWithSnapshot``), with the statistics
Delta keeps per file (``numRecords``, ``minValues``, ``maxValues``) and the partition
values of each file. Delta has no metadata tables for this in SQL (no ``<table>.files``),
so the snapshot's ``allFiles`` Dataset is read through the JVM. And how a planned merge
is carried out there (``rewrite_merge``): its files rewritten and committed through
Delta's own transaction, as its OPTIMIZE does, since OPTIMIZE's SQL selects whole
partitions and a planned merge is a key range of files.

Delta's statistics are collected for the first ``delta.dataSkippingNumIndexedCols``
columns (32 by default) and truncate long strings; a file without them has no key
bounds and is left alone (``no_key_bounds``), as an Iceberg file without metrics is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from dbt_merge.auto_merge.files import DataFile
from dbt_merge.auto_merge.layout import TableLayout
from dbt_merge.auto_merge.mergeability import local_naive_to_utc
from dbt_merge.auto_merge.rules import MergeabilityRule
from dbt_merge.core.errors import failpoint
from dbt_merge.core.sql import quote_identifier, string_literal

# the types Delta keeps min/max statistics for (StatisticsCollection): numbers, dates,
# timestamps and strings, by Spark's simpleString names
_STATS_TYPES = ("tinyint", "smallint", "int", "bigint", "float", "double", "decimal")
_STATS_TYPES += ("date", "timestamp", "timestamp_ntz", "string")
# a path of the log that is absolute (has a scheme); others are relative to the table
# (Java's regex in _absolute_path_sql, Python's in commit_actions)
_URI_PATTERN = "^[a-zA-Z][a-zA-Z0-9+.-]*:"
_URI = re.compile(_URI_PATTERN)


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
            format="delta",
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

    def listing(self, sort_column: str | None = None) -> Any:
        """The snapshot's files as a DataFrame, one row each: ``file_path`` (absolute),
        ``size``, ``record_count`` (rows not deleted), ``added_at``, with a partitioned
        table ``partition`` (the typed values, as Iceberg's ``data_files`` has them) and
        ``partition_text``, and with a sort column ``min_key``, ``max_key`` and their
        texts (its bounds from Delta's statistics). A plan's ``merge_files_where`` on a
        Delta table is a predicate over these columns."""
        columns = [
            f"{self._absolute_path_sql()} as file_path",
            "size",
            "s.numRecords - coalesce(deletionVector.cardinality, 0) as record_count",
            "timestamp_millis(modificationTime) as added_at",
            *self._partition_sql(),
        ]
        stats = "struct<numRecords: bigint>"
        if sort_column is not None:
            key = quote_identifier(sort_column)
            key_type = self.schema[sort_column]
            stats = (
                f"struct<numRecords: bigint, minValues: struct<{key}: {key_type}>,"
                f" maxValues: struct<{key}: {key_type}>>"
            )
            columns += [
                f"s.minValues.{key} as min_key",
                f"s.maxValues.{key} as max_key",
                f"cast(s.minValues.{key} as string) as min_key_text",
                f"cast(s.maxValues.{key} as string) as max_key_text",
            ]
        with_stats = self.all_files.selectExpr(
            "*", f"from_json(stats, {string_literal(stats)}) as s"
        )
        return with_stats.selectExpr(*columns)

    def files(self, sort_column: str, rules: Sequence[MergeabilityRule]) -> list[DataFile]:
        """The snapshot's files with the sort column's bounds (``rules`` are not needed:
        a file's write time, for DELAY rules, is its ``modificationTime``)."""
        del rules
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
            for row in self.listing(sort_column).collect()
        ]

    def selected_files(self, files_where: str, sort_column: str | None) -> list[str]:
        """The paths of the files of ``listing`` that a plan's ``merge_files_where``
        selects, sorted."""
        rows = self.listing(sort_column).where(files_where).select("file_path").collect()
        return sorted(row[0] for row in rows)

    def compact(self, paths: Sequence[str], sort_column: str | None, marker: str) -> int:
        """Rewrites the files ``paths`` (absolute, as ``listing`` has them) of this
        snapshot into one file per partition, their rows sorted by ``sort_column``, and
        commits that as Delta's OPTIMIZE does: a transaction that starts from this
        snapshot and tracks exactly these files as read (a concurrent commit that
        removes or rewrites one of them makes it fail; appends do not), the new files
        and the removals marked ``dataChange=false`` (a rearrangement, which the change
        feed and streaming readers skip), an OPTIMIZE operation in the history, and
        ``marker`` as the commit's userMetadata. Returns the commit's version."""
        from pyspark.sql import DataFrame

        jvm = self.session._jvm
        scala = jvm.scala.collection.JavaConverters

        def seq(items: Any) -> Any:
            return scala.asScalaBuffer(items).toSeq()

        wanted = ", ".join(string_literal(path) for path in paths)
        chosen = self.snapshot.allFiles().where(f"{self._absolute_path_sql()} in ({wanted})")
        files = chosen.collectAsList()
        if files.size() != len(set(paths)):
            raise ValueError(f"{len(paths)} files to compact, {files.size()} found in the snapshot")
        read = seq(files)
        log = self.snapshot.deltaLog()
        txn = log.startTransaction(
            jvm.scala.Option.apply(None), jvm.scala.Option.apply(self.snapshot)
        )
        txn.trackFilesRead(read)
        rows = DataFrame(
            log.createDataFrame(txn.snapshot(), read, False, jvm.scala.Option.apply("Optimize")),
            self.session,
        )
        partitioned = list(self.layout.partition_types)
        rows = rows.repartition(*partitioned) if partitioned else rows.repartition(1)
        if sort_column is not None:
            rows = rows.sortWithinPartitions(sort_column)
        written = txn.writeFiles(
            rows._jdf, jvm.scala.Option.apply(None), True, seq(jvm.java.util.ArrayList())
        )
        actions = jvm.java.util.ArrayList()
        for index in range(written.size()):
            action = json.loads(written.apply(index).json())
            if set(action) != {"add"}:  # a compaction writes data files only
                raise ValueError(f"unexpected action of a compaction's write: {list(action)}")
            action["add"]["dataChange"] = False
            actions.add(jvm.org.apache.spark.sql.delta.actions.Action.fromJson(json.dumps(action)))
        now = int(jvm.java.lang.System.currentTimeMillis())
        for index in range(files.size()):
            actions.add(files.get(index).removeWithTimestamp(now, False))
        optimize = getattr(jvm.org.apache.spark.sql.delta, "DeltaOperations$Optimize")
        empty = seq(jvm.java.util.ArrayList())
        operation = optimize(empty, empty, False, jvm.scala.Option.apply(None), False)
        setting = "spark.databricks.delta.commitInfo.userMetadata"
        before = self.session.conf.get(setting, None)
        self.session.conf.set(setting, marker)
        try:
            return int(txn.commit(seq(actions), operation))
        finally:
            if before is None:
                self.session.conf.unset(setting)
            else:
                self.session.conf.set(setting, before)

    def partitions(self) -> list[dict[str, Any]]:
        """One row per partition, as Iceberg's ``partitions`` metadata table has them:
        ``partition`` (absent for an unpartitioned table), ``record_count``,
        ``file_count``, ``total_data_file_size_in_bytes``, ``last_updated_at`` (the
        newest file's write time), and ``file_paths``."""
        grouped: dict[tuple[Any, ...], dict[str, Any]] = {}
        for row in self.listing().collect():
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
                "partition": row["partition_text"].asDict()
                if self.layout.partition_types
                else None,
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
        return f"if(path rlike '{_URI_PATTERN}', path, concat({root}, path))"

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


def commit_actions(session: Any, table: DeltaTableFiles, version: int) -> dict[str, Any]:
    """What commit ``version`` of the table did, from its file in ``_delta_log``: its
    version, the files it removed and added (absolute paths, as ``listing`` has them)
    and the bytes it removed."""
    path = f"{table.root}/_delta_log/{version:020d}.json"
    actions = [json.loads(row[0]) for row in session.read.text(path).collect()]

    def absolute(path: str) -> str:  # as _absolute_path_sql makes it
        return path if _URI.match(path) else f"{table.root}/{path}"

    removed = [a["remove"] for a in actions if "remove" in a]
    return {
        "version": version,
        "removed": sorted(absolute(r["path"]) for r in removed),
        "added": sorted(absolute(a["add"]["path"]) for a in actions if "add" in a),
        "removed_bytes": sum(int(r.get("size") or 0) for r in removed),
    }


def find_merge_commit(
    session: Any, catalog_name: str, table_name: str, marker: str
) -> dict[str, Any] | None:
    """The commit whose userMetadata is ``marker`` (``commit_actions``), or None. A
    planned merge's marker names its plan, the merge and the version it was planned on
    (the macro ``_auto_merge_delta_marker``), so a run that died before recording the
    merge's event finds its commit again."""
    table = load_table(session, catalog_name, table_name)
    if table is None:
        return None
    history = session.sql(f"describe history {catalog_name}.{table_name}")
    found = history.where(history.userMetadata == marker).select("version").collect()
    return commit_actions(session, table, int(found[0][0])) if found else None


def rewrite_merge(
    session: Any,
    catalog_name: str,
    table_name: str,
    *,
    files_where: str,
    sort_column: str | None,
    planned: Sequence[str],
    marker: str,
    execute: bool,
) -> dict[str, Any]:
    """One planned merge of a Delta table: its check, then (``execute``) its rewrite.

    The check: the files ``files_where`` selects in the current version
    (``selected_files``) must be exactly ``planned``; otherwise the merge is stale
    (``gone``: planned files no longer there, ``extra``: files it would also rewrite).
    The rewrite (``DeltaTableFiles.compact``) replaces exactly the planned files, as
    Delta's OPTIMIZE does, in a transaction that starts from the version checked.

    Returns status (``stale``, ``planned``, ``merged``), version (the one checked),
    gone, extra, for a merge its commit (``commit_actions``), and for a commit that
    another writer's commit made fail, ``conflict`` (Delta's exception, e.g.
    ``ConcurrentDeleteReadException``; nothing was committed).
    """
    table = load_table(session, catalog_name, table_name)
    if table is None:
        raise ValueError(f"{catalog_name}.{table_name} is not a Delta table")
    version = int(table.layout.snapshot_id)
    selected = set(table.selected_files(files_where, sort_column))
    gone, extra = sorted(set(planned) - selected), sorted(selected - set(planned))
    outcome: dict[str, Any] = {"version": version, "gone": gone, "extra": extra}
    if gone or extra or not execute:
        return {**outcome, "status": "stale" if gone or extra else "planned"}
    failpoint("auto_merge.before_rewrite")
    try:
        committed = table.compact(planned, sort_column, marker)
    except Exception as exc:  # py4j: Delta's ConcurrentModificationException and kin
        java = getattr(exc, "java_exception", None)
        name = "" if java is None else str(java.getClass().getName())
        if "Concurrent" not in name:
            raise
        # another writer removed or rewrote a planned file after the check: nothing of
        # this merge was committed
        return {**outcome, "status": "stale", "conflict": name.rsplit(".", 1)[-1]}
    return {**outcome, "status": "merged", "commit": commit_actions(session, table, committed)}


def _schema(session: Any, metadata: Any) -> Any:
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(metadata.schemaString())).fields


def _scala_map(session: Any, scala_map: Any) -> Any:
    return session._jvm.scala.collection.JavaConverters.mapAsJavaMap(scala_map)


def _scala_seq(seq: Any) -> list[Any]:
    return [seq.apply(i) for i in range(seq.size())]
