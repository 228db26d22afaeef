"""Small Spark helpers shared by dbt_merge's algorithms."""

from __future__ import annotations

from pyspark.sql import DataFrame


def materialize(df: DataFrame) -> DataFrame:
    """Compute ``df`` once and cut its lineage *and* its size estimate.

    ``Dataset.localCheckpoint`` keeps the original plan's statistics, and a join's
    estimate is the product of its inputs': carried from round to round the
    estimate's BigInt grows exponentially and planning alone takes minutes after a
    few rounds (Spark 3.5, ``LogicalRDD.fromDataset``). A DataFrame rebuilt from the
    locally checkpointed JVM rows starts with fresh statistics; no row passes
    through Python.
    """
    rows = df._jdf.javaRDD()
    rows.rdd().localCheckpoint()
    rows.count()
    spark = df.sparkSession
    return DataFrame(spark._jsparkSession.createDataFrame(rows, df._jdf.schema()), spark)
