"""Sixty days of events written as sixty tiny Parquet files, one file per day.

The auto-merge demo's input: an Iceberg table like one that a daily append job
leaves behind. Each of the 60 Spark partitions (one row per day from
``session.range``, exploded into that day's events) is written as one file, so the
files do not overlap on ``event_date``. Most days are quiet (a few dozen events, a
file of about 2 KB); 2024-01-10 and 2024-02-05 are busy (3,000 events) and their
files are too big to merge. The data is generated, the same on every run.
"""

from pyspark.sql import functions as F

FIRST_DAY = "2024-01-01"
DAYS = 60
BUSY_DAYS = {9: 3000, 35: 3000}  # day index (0 = 2024-01-01) -> events
EVENT_TYPES = ["view", "click", "order", "refund"]


def model(dbt, session):
    dbt.config(materialized="table")

    # one Spark partition per day, so the write makes one file per day
    days = session.range(0, DAYS, 1, DAYS).withColumnRenamed("id", "day")
    count = F.lit(20) + (F.col("day") % 7) * 5
    for day, busy in BUSY_DAYS.items():
        count = F.when(F.col("day") == day, F.lit(busy)).otherwise(count)
    events = days.select("day", F.explode(F.sequence(F.lit(1), count.cast("int"))).alias("n"))

    event_id = F.col("day") * 10_000 + F.col("n")
    return events.select(
        event_id.alias("event_id"),
        F.date_add(F.lit(FIRST_DAY).cast("date"), F.col("day").cast("int")).alias("event_date"),
        (
            F.lit(FIRST_DAY).cast("timestamp")
            + F.make_dt_interval(
                F.col("day").cast("int"), F.lit(0), F.lit(0), (F.col("n") * 37) % 86_400
            )
        ).alias("event_at"),
        F.concat(F.lit("c"), F.lpad(((event_id * 7919) % 97).cast("string"), 3, "0")).alias(
            "customer_id"
        ),
        F.element_at(
            F.array(*[F.lit(t) for t in EVENT_TYPES]), (F.col("n") % 4 + 1).cast("int")
        ).alias("event_type"),
        ((event_id * 31) % 10_000 / 100).cast("decimal(10,2)").alias("amount"),
    ).sortWithinPartitions("event_date", "event_id")
