"""What reading an Iceberg table's changes between two snapshots costs, against the pass
that hashes every record into its bucket's digest (how a change-following edges run
finds what changed in a dataset whose snapshot moved, see docs/entity-merge.md), in one
process.

For each write mode (merge-on-read, copy-on-write) a table of ``--rows`` records (id,
email, name, ts) gets a delivery of updates and deletes in two commits: a MERGE that
updates ``--share`` of the ids, spread at random, then a DELETE of a tenth of those.
Between the snapshot before and the one after, it then times:

- the baseline: the digest's pass, every record's node and fingerprint hashed and
  folded per bucket (65,536), as ``_entity_changed_buckets_sql`` does (the better of
  two passes);
- Iceberg's changelog (``create_changelog_view`` with ``compute_updates``, and with
  ``net_changes``), read in full;
- Iceberg's incremental read (``start-snapshot-id``), which reads appended rows only;
- the buckets of the changed ids read from a table of events shaped as an upsert
  model's provenance (``get_upsert_provenance_sql``: one event per changed key, with
  the key, the rows before and after as JSON and the table version; the first
  commit's CREATE events included), filtered to the delivery's two versions (the
  better of two reads).

A read that Iceberg refuses is printed with its error. What is read is checked against
the delivery (the ids read, the events' buckets), so a fast read that misses changes
shows as one.

Usage:
  .venv/bin/python bench/changelog_bench.py [--rows 3000000] [--share 0.001]
      [--json bench/out/changelog.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bench_project import OUT, local_session  # noqa: E402

SCHEMA = "bench_changelog"
MODES = ("merge-on-read", "copy-on-write")


def timed(work) -> tuple[float, object]:
    started = time.perf_counter()
    result = work()
    return round(time.perf_counter() - started, 2), result


def refused(error: Exception) -> str:
    """The first line of Iceberg's (or Spark's) message."""
    return str(error).strip().splitlines()[0][:200]


def current_snapshot(spark, table: str) -> int:
    return spark.sql(
        f"select snapshot_id from {table}.history where is_current_ancestor"
        " order by made_current_at desc limit 1"
    ).first()[0]


def deliver(spark, table: str, mode: str, rows: int, share: float) -> tuple[list[int], set]:
    """The table, then its delivery: (its snapshots, first to last, the changed ids);
    each commit's events in the table <table>_events."""
    spark.sql(f"drop table if exists {table}")
    props = ", ".join(f"'write.{kind}.mode' = '{mode}'" for kind in ("merge", "update", "delete"))
    spark.sql(
        f"create table {table} (id bigint, email string, name string, ts bigint) using iceberg"
        f" tblproperties ('format-version' = '2', {props})"
    )
    spark.sql(
        f"insert into {table} select id, concat('e', id, '@example.org'),"
        f" concat('name ', id % 9973), 1 from range({rows})"
    )
    snapshots = [current_snapshot(spark, table)]
    record_events(spark, table, None, snapshots[0])
    spark.sql(
        "create or replace temp view delivery as select distinct"
        f" cast(pmod(xxhash64(i, 7), {rows}) as bigint) as id from range({int(rows * share)}) r(i)"
    )
    spark.sql(
        f"merge into {table} t using delivery d on t.id = d.id"
        " when matched then update set email = concat('new', d.id, '@example.org'), ts = 2"
    )
    snapshots.append(current_snapshot(spark, table))
    record_events(spark, table, snapshots[-2], snapshots[-1])
    spark.sql(f"delete from {table} where id in (select id from delivery where id % 10 = 0)")
    snapshots.append(current_snapshot(spark, table))
    record_events(spark, table, snapshots[-2], snapshots[-1])
    changed = {row[0] for row in spark.sql("select id from delivery").collect()}
    return snapshots, changed


def record_events(spark, table: str, before: int | None, after: int) -> None:
    """The events of the commit from before to after, as an upsert model with provenance
    records them: the diff of the two versions, one row per changed key."""
    spark.sql(
        f"create table if not exists {table}_events (event_type string, record_key string,"
        " old_row string, new_row string, table_version string) using iceberg"
    )
    old = (
        f"select id, to_json(struct(*)) as row_json from {table} version as of {before}"
        if before is not None
        else "select cast(null as bigint) as id, cast(null as string) as row_json where false"
    )
    spark.sql(
        f"""insert into {table}_events
        select case when o.row_json is null then 'CREATE' when n.row_json is null then 'DELETE'
                    else 'UPDATE' end,
               cast(coalesce(n.id, o.id) as string), o.row_json, n.row_json, '{after}'
        from ({old}) o
        full outer join (select id, to_json(struct(*)) as row_json
                         from {table} version as of {after}) n on o.id = n.id
        where not (o.row_json <=> n.row_json)"""
    )


def digest_pass(spark, table: str) -> float:
    """Seconds of the digest's pass over every record (the baseline), the better of two."""
    node = "concat('0|', cast(id as string))"
    query = (
        f"select count(*), sum(digest) from (select pmod(xxhash64({node}), 65536) as bucket,"
        f" count(*) as records, bit_xor(xxhash64({node}, xxhash64(id, email, name, ts)))"
        f" as digest from {table} group by 1)"
    )
    return min(timed(lambda: spark.sql(query).collect())[0] for _ in range(2))


def event_buckets(spark, table: str, versions: list[int], changed: set) -> dict:
    """Seconds to find the buckets of the ids whose events carry one of versions (the
    better of two), and whether they are the buckets of the delivery's ids."""
    listed = ", ".join(f"'{version}'" for version in versions)
    bucket = "pmod(xxhash64(concat('0|', record_key)), 65536)"
    query = f"select distinct {bucket} from {table}_events where table_version in ({listed})"
    (first, rows), (second, _) = (timed(lambda: spark.sql(query).collect()) for _ in range(2))
    ids = spark.createDataFrame([(i,) for i in changed], "k bigint")
    expected = ids.selectExpr(bucket.replace("record_key", "cast(k as string)")).distinct()
    return {
        "seconds": min(first, second),
        "rows": {"buckets": len(rows)},
        "same_buckets_as_the_delivery": {r[0] for r in rows} == {r[0] for r in expected.collect()},
    }


def changelog(spark, table: str, snapshots: list[int], changed: set, **how: bool) -> dict:
    """Seconds to read the changelog between the snapshots in full, its rows by change
    type, and whether its ids are the delivery's; or why Iceberg refused it."""
    before, after = snapshots[0], snapshots[-1]
    options = f"map('start-snapshot-id', '{before}', 'end-snapshot-id', '{after}')"
    flags = "".join(f", {name} => {str(value).lower()}" for name, value in how.items())
    keys = ", identifier_columns => array('id')" if how.get("compute_updates") else ""
    try:
        seconds, _ = timed(
            lambda: spark.sql(
                f"call spark_catalog.system.create_changelog_view(table => '{table}',"
                f" options => {options}, changelog_view => 'changes'{keys}{flags})"
            ).collect()
        )
        read, rows = timed(
            lambda: spark.sql(
                "select _change_type, count(*), collect_set(id) from changes group by 1"
            ).collect()
        )
    except Exception as error:  # noqa: BLE001 - the refusal is the figure
        return {"refused": refused(error)}
    ids = set().union(*(set(row[2]) for row in rows)) if rows else set()
    return {
        "seconds": round(seconds + read, 2),
        "rows": {row[0]: row[1] for row in rows},
        "same_ids_as_the_delivery": ids == changed,
    }


def incremental_read(spark, table: str, snapshots: list[int], changed: set) -> dict:
    """Seconds to read the rows Iceberg's incremental read gives between the snapshots,
    how many, and whether their ids are the delivery's."""
    before, after = snapshots[0], snapshots[-1]
    try:
        seconds, rows = timed(
            lambda: (
                spark.read.format("iceberg")
                .option("start-snapshot-id", str(before))
                .option("end-snapshot-id", str(after))
                .load(table)
                .select("id")
                .collect()
            )
        )
    except Exception as error:  # noqa: BLE001 - the refusal is the figure
        return {"refused": refused(error)}
    return {
        "seconds": seconds,
        "rows": len(rows),
        "same_ids_as_the_delivery": {row[0] for row in rows} == changed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--share", type=float, default=0.001)
    parser.add_argument("--json", type=Path, default=OUT / "changelog.json")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    spark = local_session()
    spark.sql(f"create database if not exists {SCHEMA}")
    results = []
    for mode in MODES:
        table = f"{SCHEMA}.{mode.replace('-', '_')}"
        spark.sql(f"drop table if exists {table}_events")
        snapshots, changed = deliver(spark, table, mode, args.rows, args.share)
        files = spark.sql(f"select count(*) from {table}.files").first()[0]
        hashed = digest_pass(spark, table)
        row = {
            "mode": mode,
            "rows": args.rows,
            "changed_ids": len(changed),
            "files_after": files,
            "digest_pass_s": hashed,
            "changelog_updates": changelog(spark, table, snapshots, changed, compute_updates=True),
            "changelog_net_changes": changelog(spark, table, snapshots, changed, net_changes=True),
            "incremental_read": incremental_read(spark, table, snapshots, changed),
            "event_buckets": event_buckets(spark, table, snapshots[1:], changed),
        }
        print(f"{mode}: {len(changed):,} ids changed of {args.rows:,}; {files} files after")
        print(f"  baseline, the digest's pass over every record: {hashed:.2f} s")
        for name in (
            "changelog_updates",
            "changelog_net_changes",
            "incremental_read",
            "event_buckets",
        ):
            found = row[name]
            if "refused" in found:
                print(f"  {name}: refused: {found['refused']}")
                continue
            found["ratio_to_digest_pass"] = round(found["seconds"] / hashed, 2)
            same = [
                f", {key.replace('_', ' ')}: {value}"
                for key, value in found.items()
                if key.startswith("same_")
            ]
            print(
                f"  {name}: {found['seconds']:.2f} s, {found['ratio_to_digest_pass']}x the"
                f" digest's pass; rows {found['rows']}" + "".join(same)
            )
        results.append(row)
        sys.stdout.flush()
    report = {
        "benchmark": "changelog",
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.machine()}, {platform.system()}, local[2]",
        "command": "bench/changelog_bench.py " + " ".join(sys.argv[1:]),
        "results": results,
    }
    args.json.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
