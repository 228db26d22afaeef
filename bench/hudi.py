"""Apache Hudi's own upserts, as a user writes them: the DataFrame writer of Hudi's Spark
bundle (``df.write.format("hudi")`` with ``hoodie.datasource.write.operation=upsert``),
for the upsert benchmark (bench/upsert_bench.py) and `make test-long`'s comparison
(tests/functional/test_upsert_against_hudi.py).

Hudi runs in the session dbt's adapter starts, beside Iceberg (and Delta): the
benchmark's own session settings add Hudi's bundle (``jars.BENCH``, pinned from Maven
Central like the other jars), Hudi's SQL extension after the table format's, and the
Kryo serializer with Hudi's registrator, as Hudi's Spark quick start sets them. The
session catalog stays the adapter's (Iceberg's ``SparkSessionCatalog``, or Delta's): a
Hudi table is written and read by its path, so it needs no catalog. None of this
changes the adapter's defaults; only a session built with ``session_parameters`` has it.

Every Hudi write setting is Hudi 1.0.2's default except the ones a user of this table
must give: the table name, the record key (``id``), the ordering field
(``hoodie.datasource.write.precombine.field``, ``ts``), the merge mode (event-time
ordering, or commit-time ordering) or the payload class of partial updates, the table
type and the operation. Deletes are Hudi's delete marker, a boolean column
``_hoodie_is_deleted`` (the batch's delete column under that name). ``settings_used``
reports what Hudi resolved from them (index type, metadata table, parallelism...).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from dbt.adapters.spark_session import jars  # noqa: E402
from dbt.adapters.spark_session import session as sessions  # noqa: E402

HUDI_EXTENSIONS = "org.apache.spark.sql.hudi.HoodieSparkSessionExtension"
KRYO = "org.apache.spark.serializer.KryoSerializer"
KRYO_REGISTRATOR = "org.apache.spark.HoodieSparkKryoRegistrar"
# the columns Hudi adds to every record (HoodieRecord.HOODIE_META_COLUMNS)
META_COLUMNS = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)
DELETE_MARKER = "_hoodie_is_deleted"  # HoodieRecord.HOODIE_IS_DELETED_FIELD
TABLE_TYPES = {"copy_on_write": "COPY_ON_WRITE", "merge_on_read": "MERGE_ON_READ"}
MERGE_MODES = {
    "event_time_ordering": "EVENT_TIME_ORDERING",
    "commit_time_ordering": "COMMIT_TIME_ORDERING",
}
PARTIAL_UPDATE_PAYLOAD = "org.apache.hudi.common.model.PartialUpdateAvroPayload"
# the table properties of hoodie.properties worth reporting beside the figures
REPORTED_TABLE_PROPERTIES = (
    "hoodie.table.version",
    "hoodie.table.type",
    "hoodie.record.merge.mode",
    "hoodie.compaction.payload.class",
    "hoodie.table.keygenerator.type",
    "hoodie.table.metadata.partitions",
    "hoodie.table.base.file.format",
)


def bundle() -> str:
    """The local path of Hudi's pinned bundle, fetched once if it is missing (stderr says
    so)."""
    return jars.jar_paths(jars.BENCH, say=lambda line: print(line, file=sys.stderr))[0]


def session_parameters(settings: sessions.SessionSettings) -> dict[str, str]:
    """Spark settings that add Hudi to the session of ``settings``, on top of its
    ``server_side_parameters``: Hudi's bundle beside the jars they list, Hudi's extension
    after the table format's (Iceberg's, or Delta's and Iceberg's), Kryo with Hudi's
    registrator."""
    given = settings.server_side_parameters
    listed = [j for j in given.get("spark.jars", "").split(",") if j]
    extensions = (
        given.get("spark.sql.extensions") or sessions.catalog_conf(settings)["spark.sql.extensions"]
    )
    return {
        **given,
        "spark.jars": ",".join([*listed, bundle()]),
        "spark.sql.extensions": f"{extensions},{HUDI_EXTENSIONS}",
        "spark.serializer": KRYO,
        "spark.kryo.registrator": KRYO_REGISTRATOR,
    }


def write_options(
    table: str,
    table_type: str = "copy_on_write",
    merge_mode: str = "event_time_ordering",
    partial_update: bool = False,
    operation: str = "upsert",
    key: str = "id",
    ordering: str = "ts",
) -> dict[str, str]:
    """The options of one Hudi DataFrame write: Hudi's defaults but for the table, its
    record key, its ordering field, its merge mode (or PartialUpdateAvroPayload, which
    Hudi 1.0 runs as merge mode CUSTOM), its type and the operation."""
    options = {
        "hoodie.table.name": table,
        "hoodie.datasource.write.recordkey.field": key,
        "hoodie.datasource.write.precombine.field": ordering,
        "hoodie.datasource.write.table.type": TABLE_TYPES[table_type],
        "hoodie.datasource.write.operation": operation,
    }
    if partial_update:
        options["hoodie.datasource.write.payload.class"] = PARTIAL_UPDATE_PAYLOAD
    else:
        options["hoodie.write.record.merge.mode"] = MERGE_MODES[merge_mode]
    return options


def write(frame, path: Path, options: dict[str, str], overwrite: bool = False) -> None:
    """One Hudi write of ``frame`` to the table at ``path`` (``overwrite``: a new table)."""
    writer = frame.write.format("hudi").options(**options)
    writer.mode("overwrite" if overwrite else "append").save(str(path))


def read(spark, path: Path):
    """Hudi's snapshot read of the table at ``path`` (merge-on-read: base files merged with
    their logs), without Hudi's meta columns."""
    return spark.read.format("hudi").load(str(path)).drop(*META_COLUMNS)


def settings_used(spark, path: Path, options: dict[str, str]) -> dict:
    """What Hudi made of ``options`` for the table at ``path``: the options given, the
    write config Hudi resolves from them on Spark (index type, metadata table, shuffle
    parallelism, compaction, file sizing), the table's properties and its timeline (the
    completed instants by action)."""
    jvm = spark._jvm
    hudi = jvm.org.apache.hudi
    properties = jvm.java.util.Properties()
    for name, value in options.items():
        properties.setProperty(name, value)
    config = (
        hudi.config.HoodieWriteConfig.newBuilder()
        .withPath(str(path))
        .withProperties(properties)
        .withEngineType(hudi.common.engine.EngineType.SPARK)
        .build()
    )
    metadata = config.getMetadataConfig()
    resolved = {
        "hoodie.index.type": config.getIndexType().name(),
        "hoodie.metadata.enable": config.isMetadataTableEnabled(),
        "hoodie.metadata.record.index.enable": metadata.isRecordIndexEnabled(),
        "hoodie.upsert.shuffle.parallelism": config.getUpsertShuffleParallelism(),
        "hoodie.bulkinsert.shuffle.parallelism": config.getBulkInsertShuffleParallelism(),
        "hoodie.combine.before.upsert": config.shouldCombineBeforeUpsert(),
        "hoodie.compact.inline": config.inlineCompactionEnabled(),
        "hoodie.compact.inline.max.delta.commits": config.getInlineCompactDeltaCommitMax(),
        "hoodie.parquet.small.file.limit": config.getParquetSmallFileLimit(),
        "hoodie.parquet.max.file.size": config.getParquetMaxFileSize(),
    }
    table = {}
    properties_file = path / ".hoodie" / "hoodie.properties"
    for line in properties_file.read_text().splitlines():
        name, _, value = line.partition("=")
        if name in REPORTED_TABLE_PROPERTIES:
            table[name] = value
    timeline: dict[str, int] = {}
    for instant in (path / ".hoodie" / "timeline").iterdir():
        name = instant.name
        if "_" in name and not name.startswith("."):  # a completed one: <begin>_<end>.<action>
            action = name.split(".", 1)[1]
            timeline[action] = timeline.get(action, 0) + 1
    return {
        "hudi": jars.HUDI.coordinates,
        "options": options,
        "resolved": resolved,
        "table": table,
        "timeline": timeline,
        "spark": {
            name: spark.conf.get(name, None)
            for name in (
                "spark.serializer",
                "spark.sql.extensions",
                "spark.sql.shuffle.partitions",
                "spark.default.parallelism",
            )
        },
    }
