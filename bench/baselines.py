"""Naive baselines the benchmarks measure dbt_merge against, in the same process."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from dbt_merge.core.spark import materialize  # noqa: E402


def naive_min_label(edges: DataFrame, cap_seconds: float) -> tuple[DataFrame | None, int]:
    """Min-label propagation without shortcuts: one round per hop of the diameter."""
    both = edges.select(F.col("src").alias("x"), F.col("dst").alias("y")).union(
        edges.select(F.col("dst").alias("x"), F.col("src").alias("y"))
    )
    both = materialize(both)
    labels = both.select(F.col("x").alias("node")).distinct()
    labels = materialize(labels.select("node", F.col("node").alias("label")))
    started, rounds = time.monotonic(), 0
    while True:
        rounds += 1
        proposed = (
            both.join(labels.withColumnRenamed("node", "y"), "y")
            .groupBy("x")
            .agg(F.min("label").alias("proposed"))
        )
        nxt = materialize(
            labels.join(proposed.withColumnRenamed("x", "node"), "node", "left").select(
                "node",
                F.least("label", F.coalesce("proposed", "label")).alias("label"),
                (F.col("proposed") < F.col("label")).alias("changed"),
            )
        )
        if nxt.where("changed").isEmpty():
            return nxt.select("node", F.col("label").alias("component")), rounds
        labels = nxt.select("node", "label")
        if time.monotonic() - started > cap_seconds:
            return None, rounds
