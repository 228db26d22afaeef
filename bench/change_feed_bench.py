"""What reading a Delta table's change data feed between two versions costs a
change-following edges run, against the pass that hashes every record into its bucket's
digest (what the run does for a dataset without a usable feed, see
docs/entity-merge.md), in one process.

For copy-on-write and for deletion vectors (``delta.enableDeletionVectors``), a Delta
table of ``--rows`` records (id, email, name, ts) with ``delta.enableChangeDataFeed``
gets a delivery in two commits: a MERGE that updates ``--share`` of the ids, spread at
random, then a MERGE that deletes a tenth of those. Between the version before and the one after
it then times (the better of two each):

- the baseline: the digest's pass, every record's node and fingerprint hashed and folded
  per bucket (65,536), as ``_entity_changed_buckets_sql`` does;
- the feed: the buckets of the ids in ``table_changes`` between the two versions, as
  ``_entity_feed_buckets_sql`` does.

What the feed gives is checked against the delivery (the buckets of its ids), so a fast
read that misses changes shows as one.

Usage:
  .venv/bin/python bench/change_feed_bench.py [--rows 3000000] [--share 0.001]
      [--json bench/out/change_feed.json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bench_project import DELTA_WAREHOUSE, OUT  # noqa: E402
from changelog_bench import digest_pass, timed  # noqa: E402
from report import Run  # noqa: E402

SCHEMA = "bench_change_feed"
MODES = {"copy-on-write": "false", "deletion vectors": "true"}
BUCKET = "pmod(xxhash64(concat('0|', cast({id} as string))), 65536)"


def delta_session():
    """This process's SparkSession on Delta tables (the profile's table_format: delta),
    local[2], its warehouse under bench/out."""
    from dbt.adapters.spark_session import session as sessions

    return sessions.get_session(
        sessions.SessionSettings(
            warehouse=DELTA_WAREHOUSE,
            log_dir=OUT / "logs",
            server_side_parameters={"spark.master": "local[2]", "spark.driver.memory": "6g"},
            table_format="delta",
        )
    )


def version(spark, table: str) -> int:
    return int(spark.sql(f"describe history {table} limit 1").first()["version"])


def deliver(spark, table: str, vectors: str, rows: int, share: float) -> tuple[list[int], set]:
    """The table, then its delivery: (the versions before and after, the changed ids)."""
    spark.sql(f"drop table if exists {table}")
    spark.sql(
        f"create table {table} (id bigint, email string, name string, ts bigint) using delta"
        " tblproperties ('delta.enableChangeDataFeed' = 'true',"
        f" 'delta.enableDeletionVectors' = '{vectors}')"
    )
    spark.sql(
        f"insert into {table} select id, concat('e', id, '@example.org'),"
        f" concat('name ', id % 9973), 1 from range({rows})"
    )
    before = version(spark, table)
    spark.sql(
        "create or replace temp view delivery as select distinct"
        f" cast(pmod(xxhash64(i, 7), {rows}) as bigint) as id from range({int(rows * share)}) r(i)"
    )
    spark.sql(
        f"merge into {table} t using delivery d on t.id = d.id"
        " when matched then update set email = concat('new', d.id, '@example.org'), ts = 2"
    )
    # Delta's DELETE takes no subquery: a MERGE that deletes
    spark.sql(
        f"merge into {table} t using (select id from delivery where id % 10 = 0) d"
        " on t.id = d.id when matched then delete"
    )
    changed = {row[0] for row in spark.sql("select id from delivery").collect()}
    return [before, version(spark, table)], changed


def feed_buckets(spark, table: str, versions: list[int], changed: set) -> dict:
    """Seconds to find the buckets of the ids in the feed after versions[0] up to
    versions[1] (the better of two), and whether they are the delivery's ids' buckets."""
    query = (
        f"select distinct {BUCKET.format(id='id')} from"
        f" table_changes('{table}', {versions[0] + 1}, {versions[1]})"
    )
    (first, found), (second, _) = (timed(lambda: spark.sql(query).collect()) for _ in range(2))
    expected = {
        row[0]
        for row in spark.createDataFrame([(i,) for i in changed], "k bigint")
        .selectExpr(BUCKET.format(id="k"))
        .distinct()
        .collect()
    }
    return {
        "seconds": min(first, second),
        "buckets": len(found),
        "same_buckets_as_the_delivery": {row[0] for row in found} == expected,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--share", type=float, default=0.001)
    parser.add_argument("--json", type=Path, default=OUT / "change_feed.json")
    args = parser.parse_args()
    run = Run()  # the machine and the loop's seconds, before (and after: run.write)
    spark = delta_session()
    spark.sql(f"create database if not exists {SCHEMA}")
    results = []
    for mode, vectors in MODES.items():
        table = f"{SCHEMA}.{mode.replace('-', '_').replace(' ', '_')}"
        versions, changed = deliver(spark, table, vectors, args.rows, args.share)
        hashed = digest_pass(spark, table)
        feed = feed_buckets(spark, table, versions, changed)
        feed["ratio_to_digest_pass"] = round(feed["seconds"] / hashed, 3)
        row = {
            "mode": mode,
            "rows": args.rows,
            "changed_ids": len(changed),
            "versions": versions,
            "digest_pass_s": hashed,
            "feed_buckets": feed,
        }
        print(f"{mode}: {len(changed):,} ids changed of {args.rows:,} (versions {versions})")
        print(f"  baseline, the digest's pass over every record: {hashed:.2f} s")
        print(
            f"  the change data feed's buckets: {feed['seconds']:.2f} s,"
            f" {feed['ratio_to_digest_pass']}x the digest's pass; {feed['buckets']} buckets,"
            f" same buckets as the delivery: {feed['same_buckets_as_the_delivery']}"
        )
        results.append(row)
        sys.stdout.flush()
    run.write(args.json, results)


if __name__ == "__main__":
    main()
