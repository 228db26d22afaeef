"""Another process that writes to the test run's Iceberg tables: a plain pyspark
session with its own JVM, which reaches the warehouse's tables through an Iceberg
catalog `other` of type hadoop (no metastore, so the test run's Derby is not touched).

    python tests/functional/other_writer.py <warehouse> "<statement on other.<schema>.<table>>"

Prints the statement's rows, one per line, and exits 1 with the error on failure.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from dbt.adapters.spark_session.session import ICEBERG_EXTENSIONS, iceberg_runtime_jar


def main(warehouse: str, statement: str) -> int:
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("dbt_merge_other_writer")
        .config("spark.jars", iceberg_runtime_jar())
        .config("spark.sql.extensions", ICEBERG_EXTENSIONS)
        .config("spark.sql.catalog.other", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.other.type", "hadoop")
        .config("spark.sql.catalog.other.warehouse", warehouse)
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for row in spark.sql(statement).collect():
            print(row)
    except Exception as exc:  # noqa: BLE001 - reported to the test, which asserts on it
        print(f"other_writer failed: {exc}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
