"""Baselines the benchmarks measure dbt_merge against, in the same process: naive
min-label propagation and the large-star/small-star loop of the well-known peers."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pyspark.sql import DataFrame, Window
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


def _checksum(edges: DataFrame) -> tuple[int, int]:
    """(rows, sum of a 32-bit hash of each row): equal sets give equal checksums."""
    row = edges.agg(
        F.count(F.lit(1)).alias("n"), F.sum(F.hash("u", "v").cast("long")).alias("h")
    ).first()
    return int(row["n"]), int(row["h"] or 0)


def _large_star(edges: DataFrame) -> DataFrame:
    """Every node links its larger neighbours to the smallest of itself and them all."""
    both = edges.select("u", "v").union(edges.select(F.col("v").alias("u"), F.col("u").alias("v")))
    smallest = both.groupBy("u").agg(F.min("v").alias("m"))
    return (
        both.where(F.col("v") > F.col("u"))
        .join(smallest, "u")
        .select(F.col("v").alias("u"), F.least("m", "u").alias("v"))
        .distinct()
    )


def _small_star(edges: DataFrame) -> DataFrame:
    """Every node links itself and its smaller neighbours to the smallest of them."""
    down = edges.select(F.greatest("u", "v").alias("u"), F.least("u", "v").alias("v"))
    smallest = down.groupBy("u").agg(F.min("v").alias("m"))
    moved = down.join(smallest, "u").select(
        F.col("v").alias("u"), F.col("m").alias("v")
    )  # each smaller neighbour to the smallest
    hooked = smallest.select("u", F.col("m").alias("v"))  # the node itself
    return moved.union(hooked).where(F.col("u") != F.col("v")).distinct()


def large_star_small_star(edges: DataFrame, cap_seconds: float) -> tuple[DataFrame | None, int]:
    """Large-star / small-star (Kiveris et al., "Connected Components in MapReduce
    and Beyond", SoCC 2014): the loop of GraphFrames' ``connectedComponents`` and of
    Splink's clustering. Names are hashed to 64-bit ids (as GraphFrames numbers its
    vertices), each round is a large-star then a small-star step, both
    materialized, until a round leaves the edge set unchanged; then every node's
    component is the smallest id it points to, and its label the smallest name in
    it (as dbt_merge labels). Rounds grow with log(n) (log^2 n proven); each is
    several full shuffles. Returns (None, rounds) once ``cap_seconds`` are spent.
    """
    names = (
        edges.select(F.col("src").alias("node"))
        .union(edges.select(F.col("dst").alias("node")))
        .where(F.col("node").isNotNull())
        .distinct()
        .withColumn("id", F.xxhash64("node"))
    )
    names = materialize(names)
    current = materialize(
        edges.where(F.col("src").isNotNull() & F.col("dst").isNotNull())
        .select(F.xxhash64("src").alias("a"), F.xxhash64("dst").alias("b"))
        .select(F.least("a", "b").alias("u"), F.greatest("a", "b").alias("v"))
        .where(F.col("u") != F.col("v"))
        .distinct()
    )
    started, rounds, previous = time.monotonic(), 0, _checksum(current)
    while True:
        rounds += 1
        current = materialize(_small_star(materialize(_large_star(current))))
        checksum = _checksum(current)
        if checksum == previous:
            break
        previous = checksum
        if time.monotonic() - started > cap_seconds:
            return None, rounds
    # converged: every edge is (node, its component's smallest id)
    root = (
        current.select(F.greatest("u", "v").alias("id"), F.least("u", "v").alias("root"))
        .groupBy("id")
        .agg(F.min("root").alias("root"))
    )
    labelled = names.join(root, "id", "left").select("node", F.coalesce("root", "id").alias("root"))
    window = Window.partitionBy("root")
    return labelled.select("node", F.min("node").over(window).alias("component")), rounds
