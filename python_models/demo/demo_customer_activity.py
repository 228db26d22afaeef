"""Per-customer activity, kept up to date incrementally.

On an incremental run only customers with events newer than the newest
``last_event_at`` already stored are recomputed and merged in.
"""

from pyspark.sql import functions as F


def model(dbt, session):
    dbt.config(
        materialized="incremental",
        incremental_strategy="merge",
        unique_key="customer_id",
    )
    events = dbt.ref("stg_demo_events")

    if dbt.is_incremental:
        stored_max = session.table(str(dbt.this)).agg(F.max("last_event_at")).first()[0]
        changed = events.where(F.col("event_at") > F.lit(stored_max)).select("customer_id")
        events = events.join(changed.distinct(), "customer_id", "left_semi")

    return events.groupBy("customer_id").agg(
        F.max("customer_name").alias("customer_name"),
        F.count(F.lit(1)).alias("count_events"),
        F.sum(F.when(F.col("event_type") == "order", 1).otherwise(0)).alias("count_orders"),
        F.coalesce(F.sum("amount"), F.lit(0)).cast("decimal(12,2)").alias("net_amount"),
        F.min("event_at").alias("first_event_at"),
        F.max("event_at").alias("last_event_at"),
    )
