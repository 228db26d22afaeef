"""What appending a change-following merge's state would save and cost, against the MERGE
that writes it today, replayed on the state tables of the entity merge benchmark
(``make bench-entity-merge BENCH_ARGS="--incremental --sizes 3000000 ..."`` first), in
one process.

Each state table (the components: key ``node``; the edges: key ``src, dst``, a changed
record rewriting every row of its ``src``) is copied twice, merge-on-read as the
benchmark's: one written as today, one as an appended log. Then for ``--rounds``
batches of changed keys spread at random (``--components-share`` of the nodes, as many
as the components run of a 0.1% delivery writes; ``--edges-share`` of the records), it
times:

- the write: today's MERGE (the batch's keys listed in its condition, as the
  ``entity_state`` strategy writes a batch of at most 20,000 keys) against an append
  of the batch (``insert into``);
- each read a change-following run makes of that table, on the merged table as it is
  and on the log folded as a reader must fold it: the rows a later row of the same key
  supersedes left out, by an anti join with the log's latest batch per key (the log is
  every row after the copy's last batch, which Iceberg finds from its files' bounds).
  The components are also read into the driver as Arrow, where the fold is a mask.

The folded reads are checked to return what the merged table returns (count and a hash
of the rows). The log grows by one batch a round, as between two compactions.

Usage:
  .venv/bin/python bench/state_log_bench.py [--rounds 4] [--components-share 0.0035]
      [--edges-share 0.001] [--json bench/out/state_log.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bench_project import OUT, WAREHOUSE, local_session  # noqa: E402

SOURCE = "bench_entity_merge"
SCHEMA = "bench_state_log"
MERGE_ON_READ = (
    "tblproperties ('format-version' = '2', 'write.merge.mode' = 'merge-on-read',"
    " 'write.update.mode' = 'merge-on-read', 'write.delete.mode' = 'merge-on-read')"
)
# name -> (the benchmark's table, its key, the column a batch groups its keys by)
TABLES = {
    "components": ("people_components", ("node",), "node"),
    "edges": ("people_edges", ("src", "dst"), "src"),
}


def timed(work) -> tuple[float, object]:
    started = time.perf_counter()
    result = work()
    return time.perf_counter() - started, result


def folded(table: str, group: str, last: int) -> str:
    """The live rows of the log table: a row that a later row of its key (or, for the
    edges, of its record) supersedes is left out."""
    return (
        f"(select stored.* from {table} as stored left anti join ("
        f"select {group}, max(`_batch`) as latest from {table} where `_batch` > {last}"
        f" group by {group}) as log on log.{group} = stored.{group}"
        " and stored.`_batch` < log.latest)"
    )


def reads(name: str, source: str, batch: int) -> dict[str, str]:
    """The reads a change-following run makes of the state table, as queries of source
    (the table, or the folded log) that return a count and a hash of what they read."""
    if name == "components":
        return {
            "the rows of the last batch": (
                f"select count(*), sum(hash(node, component)) from {source}"
                f" where `_batch` = {batch}"
            ),
            "every node of the changed components": (
                f"select /*+ BROADCAST(changed) */ count(*), sum(hash(s.node, s.component))"
                f" from {source} as s left semi join (select distinct component from {source}"
                f" where `_batch` = {batch}) as changed on changed.component = s.component"
            ),
            "every row": f"select count(*), sum(hash(node, component, `_batch`)) from {source}",
        }
    return {
        "the stored rows of the changed buckets": (
            f"select /*+ BROADCAST(buckets) */ count(*), sum(hash(s.src, s.dst, s.fingerprint))"
            f" from {source} as s left semi join {SCHEMA}.buckets as buckets"
            " on buckets.dataset_offset = cast(substring_index(s.src, '|', 1) as int)"
            " and buckets.bucket = pmod(xxhash64(s.src), 65536)"
        ),
        "the live edges of the affected nodes": (
            f"select /*+ BROADCAST(nodes) */ count(*), sum(hash(s.src, s.dst)) from {source} as s"
            f" left semi join {SCHEMA}.nodes as nodes on nodes.node = s.src where s.dst is not null"
        ),
        "the rows of the last batch": (
            f"select count(*), sum(hash(src, dst)) from {source} where `_batch` = {batch}"
        ),
    }


def make_batch(spark, name: str, merged: str, share: float, batch: int, seed: int) -> int:
    """Stage the round's batch (every column of the table, new values, `$drop` false): for
    the components, share of the nodes; for the edges, every row of share of the
    records. For the edges, also the buckets and nodes the run's reads look up."""
    spark.sql(f"drop table if exists {SCHEMA}.batch")
    if name == "components":
        select = (
            f"select node, concat(component, '~{seed}') as component, cast({batch} as bigint)"
            f" as `_batch`, component as previous_component, false as `$drop` from {merged}"
            f" where rand({seed}) < {share}"
        )
    else:
        select = (
            f"select src, dst, fingerprint + {seed} as fingerprint, cast({batch} as bigint)"
            f" as `_batch`, declaration, change_mark, false as `$drop` from {merged}"
            f" where pmod(xxhash64(src, {seed}), 1000000) < {round(share * 1_000_000)}"
        )
    spark.sql(f"create table {SCHEMA}.batch using iceberg as {select}")
    if name == "edges":
        for part, query in (
            (
                "buckets",
                "select distinct cast(substring_index(src, '|', 1) as int) as dataset_offset,"
                f" pmod(xxhash64(src), 65536) as bucket from {SCHEMA}.batch",
            ),
            (
                "nodes",
                f"select src as node from {SCHEMA}.batch"
                f" union select dst from {SCHEMA}.batch where dst is not null",
            ),
        ):
            spark.sql(f"drop table if exists {SCHEMA}.{part}")
            spark.sql(f"create table {SCHEMA}.{part} using iceberg as {query}")
    return spark.sql(f"select count(*) from {SCHEMA}.batch").first()[0]


def merge_sql(target: str, keys: tuple[str, ...], columns: list[str]) -> str:
    """Today's MERGE of the batch, its first key's values listed in the condition."""
    first = keys[0]
    return (
        f"merge into {target} as t using {SCHEMA}.batch as s on "
        + " and ".join(f"t.{key} <=> s.{key}" for key in keys)
        + f" and t.{first} in ({{keys}})"
        + " when matched and s.`$drop` then delete when matched then update set "
        + ", ".join(f"t.`{c}` = s.`{c}`" for c in columns)
        + " when not matched and not s.`$drop` then insert ("
        + ", ".join(f"`{c}`" for c in columns)
        + ") values ("
        + ", ".join(f"s.`{c}`" for c in columns)
        + ")"
    )


def driver_read(spark, table: str, last: int | None) -> int:
    """The components' state read into the driver as Arrow, as the components run reads
    it; with last, the log folded by a mask (the stored rows of a key the log holds,
    and the log rows a later one supersedes). Returns the live rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    state = pa.Table.from_batches(
        spark.sql(
            f"select node, component, `_batch`, previous_component from {table}"
        )._collect_as_arrow()
    )
    if last is None:
        return state.num_rows
    in_log = pc.greater(state.column("_batch"), last)
    log = state.filter(in_log)
    latest = log.group_by("node").aggregate([("_batch", "max")])
    superseded = pc.and_(
        pc.invert(in_log), pc.is_in(state.column("node"), value_set=latest.column("node"))
    )
    return state.num_rows - (pc.sum(superseded).as_py() or 0) - (log.num_rows - latest.num_rows)


def replay(spark, name: str, rounds: int, share: float) -> dict:
    """The rounds on one state table: each round's write both ways, then each read on
    the merged table and on the folded log, checked equal. Returns the seconds."""
    source, keys, group = TABLES[name]
    merged, log = f"{SCHEMA}.{name}_merged", f"{SCHEMA}.{name}_log"
    for table in (merged, log):
        spark.sql(f"drop table if exists {table}")
        spark.sql(
            f"create table {table} using iceberg {MERGE_ON_READ} as select * from {SOURCE}.{source}"
        )
    columns = [f.name for f in spark.table(merged).schema.fields]
    last = spark.sql(f"select max(`_batch`) from {log}").first()[0]
    rows = spark.table(merged).count()
    times: dict[str, list[float]] = {}
    batches = []
    for number in range(1, rounds + 1):
        batch = last + number
        batches.append(make_batch(spark, name, merged, share, batch, number))
        key_list = spark.sql(
            f"select array_join(collect_list(concat('\\'', {keys[0]}, '\\'')), ', ')"
            f" from (select distinct {keys[0]} from {SCHEMA}.batch)"
        ).first()[0]
        merge = merge_sql(merged, keys, columns).replace("{keys}", key_list)
        times.setdefault("write: MERGE", []).append(timed(lambda q=merge: spark.sql(q))[0])
        append = f"insert into {log} select {', '.join(columns)} from {SCHEMA}.batch"
        times.setdefault("write: append", []).append(timed(lambda q=append: spark.sql(q))[0])
        plain_reads = reads(name, merged, batch)
        log_reads = reads(name, folded(log, group, last), batch)
        for label, query in plain_reads.items():
            plain_s, plain = timed(lambda q=query: tuple(spark.sql(q).first()))
            log_s, from_log = timed(lambda q=log_reads[label]: tuple(spark.sql(q).first()))
            if plain != from_log:
                raise SystemExit(f"{name}: {label}: the folded log read {from_log}, not {plain}")
            times.setdefault(f"read {label}: merged table", []).append(plain_s)
            times.setdefault(f"read {label}: folded log", []).append(log_s)
        if name == "components":
            plain_s, plain = timed(lambda: driver_read(spark, merged, None))
            log_s, from_log = timed(lambda: driver_read(spark, log, last))
            if plain != from_log:
                raise SystemExit(f"components: the driver's fold kept {from_log} rows, not {plain}")
            times.setdefault("read into the driver: merged table", []).append(plain_s)
            times.setdefault("read into the driver: folded log", []).append(log_s)
    return {
        "table": name,
        "rows": rows,
        "batch_rows": batches,
        "seconds": {label: [round(s, 2) for s in values] for label, values in times.items()},
        "median_s": {label: round(statistics.median(v), 2) for label, v in times.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--components-share", type=float, default=0.0035)
    parser.add_argument("--edges-share", type=float, default=0.001)
    parser.add_argument("--json", type=Path, default=OUT / "state_log.json")
    args = parser.parse_args()
    spark = local_session()
    missing = [t for t, *_ in TABLES.values() if not spark.catalog.tableExists(f"{SOURCE}.{t}")]
    if missing:
        raise SystemExit(
            f"{SOURCE}.{', '.join(missing)} not found in {WAREHOUSE}: run `make bench-entity-merge"
            ' BENCH_ARGS="--incremental --sizes 3000000 --shares 0.001"` first'
        )
    spark.sql(f"create database if not exists {SCHEMA}")
    results = [
        replay(spark, "components", args.rounds, args.components_share),
        replay(spark, "edges", args.rounds, args.edges_share),
    ]
    for result in results:
        sizes = result["batch_rows"]
        print(f"\n{result['table']}: {result['rows']:,} rows, batches of {sizes} rows")
        for label, median in result["median_s"].items():
            print(f"  {label}: median {median:.2f} s  (rounds: {result['seconds'][label]})")
        medians = result["median_s"]
        saved = medians["write: MERGE"] - medians["write: append"]
        print(f"  the append saves {saved:.2f} s a batch; each folded read costs, over the table:")
        for label in medians:
            if label.endswith(": folded log"):
                read = label.removesuffix(": folded log")
                extra = medians[label] - medians[f"{read}: merged table"]
                print(f"    {read}: {extra:+.2f} s")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "date": dt.date.today().isoformat(),
                "machine": platform.platform(),
                "rounds": args.rounds,
                "results": results,
            },
            indent=2,
        )
    )
    print(f"\n{args.json}")


if __name__ == "__main__":
    main()
