"""End-to-end benchmark of an entity merge: `dbt run` of edges → components → merged.

A throw-away dbt project (bench/out/entity_merge_project) installs dbt_merge as a
package and declares one merge over three generated datasets (CRM, billing, support)
of `records` rows in all: people appear in one to three systems, match on a
lower-cased email or a phone, 1% are deleted, and a CRM record carries the phone of
the next person, so people form chains of `--chain` (default 25, 3 with --incremental):
merges that are transitive over dozens of hops, as households and shared devices make
them. The figures are the
node times dbt reports, plus the whole `dbt run`.

Baseline, in the same process on the same data: what a hand-written Spark job
typically does: pairwise edges by self-joins on each rule's values (k² edges for a
value shared by k records), naive min-label propagation until nothing changes (the
one in bench/baselines.py that the closure benchmark also uses), then collect_list
per component. It is capped in time and reported as "did not finish"
when the cap is hit.

With --incremental, the same merge follows the change (edges and components keep
state, SPEC §1 'Change-driven runs'): a full build, then deliveries that change 0.1%
and 1% of the records (a new email: one in ten takes a far person's, so components
join, the others a fresh one, so records whose email linked them split off), then one
that changes nothing (the datasets built again: new Iceberg snapshots of the same
records), and one more without building them (no new snapshot); each run's three
merge nodes are timed and divided by the full build's, and the share of the graph's
nodes the components run wrote is printed (the nodes of the changed records and those
whose component changed; what an incremental
run costs grows with the components it closes again: `--chain 25` makes every
component ~94 records).
With --change-column as well, every dataset carries `_changed_at` (the day of the
delivery that last changed a record; before the first delivery, one of the 1,000 days
before it) declared in the merge's change_columns, so a
run reads only the records changed since the last one. With --upsert-input instead,
every dataset is an upsert model with provenance (a pipeline upserts → entity merge):
its incremental runs upsert the records a delivery changes, and the edges find them
from the upsert's events rather than hashing every record. Last, the reads that any run
following a change spread at random must make (FLOOR_READS: the datasets, the edges, the
components and the merged table, once each) are timed and divided by the full build's.

Usage:
  .venv/bin/python bench/entity_merge_bench.py --sizes 100000,1000000 [--baseline-cap 600]
      [--json bench/out/entity_merge.json]
  .venv/bin/python bench/entity_merge_bench.py --incremental --sizes 1000000,3000000
      [--shares 0.001,0.01] [--change-column | --upsert-input]
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from baselines import naive_min_label  # noqa: E402
from bench_project import OUT, WAREHOUSE, BenchProject  # noqa: E402
from report import Run  # noqa: E402
from spark_metrics import ShuffleMeter  # noqa: E402

from dbt.adapters.spark_session import session as sessions  # noqa: E402
from dbt_merge.core.spark import materialize  # noqa: E402

SCHEMA = "bench_entity_merge"
PROJECT = BenchProject("bench_entity_merge", SCHEMA)

# people are numbered; a person has an email and a phone; each system holds some people
# a delivery changes the email of a share of the records (var changed_share, by a hash
# of the id and the delivery number): one in ten takes the email of a person far away
# (two components join), the others a new address of their own (a record whose email
# linked it splits off)
CHANGED = (
    "case when not ({changed}) then {email} "
    "when pmod(xxhash64(_id, {delivery}, 'join'), 10) = 0 "
    "then concat('p', pmod(_person + 7919 * {delivery}, {people}), '@example.com') "
    "else concat('new', {delivery}, '-', _id, '@example.com') end"
)
DATASETS = {
    "crm": "select concat('c', id) as _id, _person, "
    "concat('P', _person, '@Example.com') as email, "
    "case when _person % {chain} != {chain} - 1 then concat('', 10000000 + _person + 1) end"
    " as phone, id % 100 = 0 as is_deleted",
    "billing": "select concat('b', id) as _id, _person, "
    "concat('p', _person, '@example.com') as email, "
    "concat('+47 ', 10000000 + _person) as phone, "
    "false as is_deleted",
    "support": "select concat('s', id) as _id, _person, cast(null as string) as email, "
    "concat('', 10000000 + _person) as phone, id % 100 = 0 as is_deleted",
}
MERGE = {
    "datasets": ["crm c", "billing b", "support s"],
    "equality_sets": [
        [["lower", "c.email"], ["lower", "b.email"], ["lower", "s.email"]],
        [
            "right(regexp_replace(c.phone, '[^0-9]', ''), 8)",
            "right(regexp_replace(b.phone, '[^0-9]', ''), 8)",
            "right(regexp_replace(s.phone, '[^0-9]', ''), 8)",
        ],
    ],
    "strategy": "compact",
    "deleted_column": "is_deleted",
}


# the state tables and the merged model of a merge that follows the change take
# row-level deletes (merge-on-read): a run rewrites no data file for a few changed rows
MOR_PROPERTIES = {
    "format-version": "2",
    "write.merge.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.delete.mode": "merge-on-read",
}
MERGE_ON_READ = f"tblproperties={MOR_PROPERTIES}"


# a dataset as an upsert model with provenance (upsert_input): an incremental run
# upserts the records the delivery changes (and those the one before changed, whose
# change it undoes); the merge's edges find them from the upsert's events
UPSERT_DATASET = (
    "{{ config(materialized='incremental', incremental_strategy='upsert', unique_key='_id',"
    " merge_mode='commit_time_ordering', provenance=true) }}\n"
)


def write_project(
    records: int,
    chain: int,
    incremental: bool = False,
    change_column: bool = False,
    upsert_input: bool = False,
) -> None:
    """The dbt project: three generated datasets and the merge's three models (all
    three incremental, following the change, with `incremental`). With `change_column`
    every dataset has `_changed_at`, the day of the delivery that last changed a record
    (this one or the one before, whose change this one undoes), declared in the merge's
    change_columns. With `upsert_input` every dataset is an upsert model with provenance
    (UPSERT_DATASET) instead of a table."""
    models = {}
    per_dataset = records // 3
    people = max(1, int(per_dataset * 0.8))
    changed = (
        "{{ var('changed_share', 0) }} > 0 and pmod(xxhash64(_id, {{ var('delivery', 0) }}),"
        " 1000000) < {{ var('changed_share', 0) }} * 1000000"
    )
    changed_before = (
        "{{ var('prev_share', 0) }} > 0 and pmod(xxhash64(_id, {{ var('delivery', 0) }} - 1),"
        " 1000000) < {{ var('prev_share', 0) }} * 1000000"
    )
    for offset, (name, select) in enumerate(DATASETS.items()):
        generated = (
            f"select id, (id * {7 + offset * 6} + {offset}) % {people} as _person"
            f" from range({per_dataset})"
        )
        body = select.replace("{chain}", str(chain))
        email = CHANGED.format(
            changed=changed, delivery="{{ var('delivery', 0) }}", email="email", people=people
        )
        # a record no delivery changed was last changed on one of the 1,000 days before
        # the first delivery (as records of a real table were), so a run reads from the
        # last of those days the records changed then and since, not every record
        changed_at = (
            f", timestamp_seconds(case when ({changed}) or ({changed_before}) "
            "then {{ var('delivery', 0) }} * 86400"
            " else -(pmod(xxhash64(_id, 'changed_at'), 1000) + 1) * 86400 end) as _changed_at"
            if change_column
            else ""
        )
        models[f"{name}.sql"] = (
            f"with g as ({generated}),\nbase as ({body} from g)\n"
            f"select _id, _person, {email} as email, phone, is_deleted{changed_at} from base\n"
        )
        if upsert_input:
            models[f"{name}.sql"] = (
                UPSERT_DATASET
                + models[f"{name}.sql"]
                + "{% if is_incremental() %}"
                + f"where ({changed}) or ({changed_before})"
                + "{% endif %}\n"
            )
    if incremental:
        state = (
            "{{ config(materialized='incremental', incremental_strategy='entity_state', "
            f"{MERGE_ON_READ}) }}}}\n"
        )
        models["people_edges.sql"] = state + "{{ dbt_merge.equality_edges('people') }}\n"
        models["people_components.py"] = (
            "from dbt_merge.entity_merge import entity_components\n\n\n"
            "def model(dbt, session):\n"
            f"    dbt.config(materialized='incremental', incremental_strategy='entity_state',"
            f" tblproperties={MOR_PROPERTIES})\n"
            "    previous = dbt.this if dbt.is_incremental else None\n"
            "    return entity_components(dbt.ref('people_edges'), previous=previous)\n"
        )
        models["people.sql"] = (
            "{{ config(materialized='incremental', incremental_strategy='merge', unique_key='_id', "
            f"{MERGE_ON_READ}) }}}}\n"
            "{{ dbt_merge.merge_entities('people', ref('people_components')) }}\n"
        )
    else:
        models["people_edges.sql"] = "{{ dbt_merge.equality_edges('people') }}\n"
        models["people_components.py"] = (
            "from dbt_merge.entity_merge import entity_components\n\n\n"
            "def model(dbt, session):\n"
            "    dbt.config(materialized='table')\n"
            "    return entity_components(dbt.ref('people_edges'))\n"
        )
        models["people.sql"] = (
            "{{ dbt_merge.merge_entities('people', ref('people_components')) }}\n"
        )
    merge = dict(MERGE)
    if change_column:
        merge["change_columns"] = {alias: "_changed_at" for alias in ("c", "b", "s")}
    PROJECT.write(
        models,
        {
            "models": {"bench_entity_merge": {"+file_format": "iceberg", "+materialized": "table"}},
            "vars": {"dbt_merge": {"entity_merges": {"people": merge}}},
        },
    )


def dbt(*args: str):
    return PROJECT.dbt(*args)


class Said(logging.Handler):
    """What the components model's Python step logs in this process (where its state
    was read, the memory it took, the choice's constants, and the closure's method and
    why), kept for the results."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


# the modules whose log lines the results keep (Said)
SAID_BY = ("components", "components_driver", "closure")


class Statements:
    """The SQL statements dbt sends for each node of a run (its SQLQuery events; a
    Python model's own DataFrame work is not among them), by node name, and the
    slowest of each node (their seconds, from SQLQueryStatus, and their first words)."""

    KEPT = 6  # the slowest statements kept a node

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.timed: dict[str, list[tuple[float, str]]] = {}
        self.pending: dict[str, str] = {}

    def __call__(self, event) -> None:
        name = event.info.name
        if name not in ("SQLQuery", "SQLQueryStatus"):
            return
        node = event.data.node_info.unique_id.rsplit(".", 1)[-1] or "(none)"
        if name == "SQLQuery":
            self.counts[node] = self.counts.get(node, 0) + 1
            self.pending[node] = statement_head(event.data.sql)
            return
        timed = self.timed.setdefault(node, [])
        timed.append((round(event.data.elapsed, 2), self.pending.pop(node, "?")))
        timed.sort(key=lambda item: -item[0])
        del timed[self.KEPT :]


def statement_head(sql: str, length: int = 110) -> str:
    """A statement's first words: dbt's comment and the whitespace dropped."""
    text = re.sub(r"/\*.*?\*/", " ", sql, count=1, flags=re.S)
    return " ".join(text.split())[:length]


def run_dbt_merge(*args: str) -> dict:
    said, statements = Said(), Statements()
    loggers = [logging.getLogger(f"dbt_merge.entity_merge.{name}") for name in SAID_BY]
    for logger in loggers:
        logger.setLevel(logging.INFO)
        logger.addHandler(said)
    meter, started = ShuffleMeter(), time.monotonic()
    try:
        result = PROJECT.dbt("run", *args, callbacks=[statements])
    finally:
        for logger in loggers:
            logger.removeHandler(said)
    total = time.monotonic() - started
    nodes = {r.node.name: round(r.execution_time, 1) for r in result.result}
    return {
        "total_s": round(total, 1),
        "nodes_s": nodes,
        "statements": {name: statements.counts.get(name, 0) for name in nodes},
        "slowest_statements": {name: statements.timed.get(name, []) for name in nodes},
        "shuffle_bytes": meter.shuffle_bytes(),
        "components_said": said.messages,
    }


MERGE_NODES = ("people_edges", "people_components", "people")
# the run after "nothing changed" without building the datasets again: the edges read
# no dataset whose Iceberg snapshot the digest describes
NO_NEW_SNAPSHOT = "nothing changed, no new snapshot"


def incremental_runs(
    size: int,
    chain: int,
    shares: list[float],
    change_column: bool = False,
    upsert_input: bool = False,
) -> dict:
    """A full build of the merge that follows the change, then deliveries that change
    each share of the records, then one that changes nothing: the three merge nodes'
    time per run and its ratio to the full build's."""
    write_project(
        size, chain, incremental=True, change_column=change_column, upsert_input=upsert_input
    )
    dbt("deps")
    dbt("run", "--full-refresh")  # the datasets (and a first build, not timed)
    print(f"records={size:,}: full build of the merge that follows the change ...", flush=True)
    full = run_dbt_merge("--select", *MERGE_NODES, "--full-refresh")
    full_s = sum(full["nodes_s"][n] for n in MERGE_NODES)
    runs = [{"run": "full build", "changed_share": None, **full, "merge_s": round(full_s, 1)}]
    deliveries = [(share, delivery) for delivery, share in enumerate(shares, start=1)]
    deliveries.append((shares[-1], len(shares)))  # the same inputs again: nothing changed
    # and once more without building the datasets again: no dataset has a new snapshot
    deliveries.append((shares[-1], len(shares)))
    for number, (share, delivery) in enumerate(deliveries):
        before = shares[delivery - 2] if delivery > 1 else 0
        variables = json.dumps({"changed_share": share, "delivery": delivery, "prev_share": before})
        unmoved = number == len(deliveries) - 1
        if not unmoved:
            dbt("run", "--select", *DATASETS, "--vars", variables)
        label = (
            NO_NEW_SNAPSHOT
            if unmoved
            else "nothing changed"
            if number == len(deliveries) - 2
            else f"{share:.1%} changed"
            if share >= 0.001
            else f"{round(share * size):,} records changed"
        )
        print(f"records={size:,}: {label} ...", flush=True)
        seen = last_batch()
        timed = run_dbt_merge("--select", *MERGE_NODES, "--vars", variables)
        merge_s = sum(timed["nodes_s"][n] for n in MERGE_NODES)
        runs.append(
            {
                "run": label,
                "changed_share": 0 if label in ("nothing changed", NO_NEW_SNAPSHOT) else share,
                "written_share": written_share(seen),
                **timed,
                "merge_s": round(merge_s, 1),
                "ratio_to_full": round(merge_s / full_s, 3),
            }
        )
        print(json.dumps(runs[-1]), flush=True)
    floor = read_floor(full_s)
    print(json.dumps(floor), flush=True)
    return {
        "records": size,
        "chain": chain,
        "change_column": change_column,
        "upsert_input": upsert_input,
        "runs": runs,
        "read_floor": floor,
    }


def bench_session():
    """The SparkSession the benchmark's dbt runs use (the one of this process)."""
    return sessions.get_session(sessions.SessionSettings(warehouse=WAREHOUSE, log_dir=OUT / "logs"))


# what a run that follows the change must read at least once, whatever its design, when
# the change is spread at random over the ids (every data file then holds a changed
# record, so neither partitions nor file statistics skip any): every record of the
# datasets (the default change detection hashes each), and the stored rows of the
# changed records in the edges, the components and the merged table, each looked up by
# keys found in every file. Writing, the closure and the golden records come on top.
FLOOR_READS = {
    "datasets": [f"select sum(xxhash64(*)) from {SCHEMA}.{name}" for name in DATASETS],
    "edges": [f"select sum(xxhash64(src, dst, fingerprint)) from {SCHEMA}.people_edges"],
    "components": [f"select sum(xxhash64(node, component)) from {SCHEMA}.people_components"],
    "merged": [f"select sum(xxhash64(*)) from {SCHEMA}.people"],
}


def read_floor(full_s: float) -> dict:
    """The time of FLOOR_READS, in the process that timed the full build (each read
    twice, the faster kept: a lower bound), and its ratio to the full build."""
    spark = bench_session()
    reads = {}
    for table, queries in FLOOR_READS.items():
        times = []
        for _ in range(2):
            started = time.monotonic()
            for query in queries:
                spark.sql(query).collect()
            times.append(time.monotonic() - started)
        reads[table] = round(min(times), 2)
    total = sum(reads.values())
    return {"reads_s": reads, "total_s": round(total, 1), "ratio_to_full": round(total / full_s, 3)}


def components_query(sql: str):
    spark = bench_session()
    return spark.sql(sql.format(table=f"{SCHEMA}.people_components")).first()


def last_batch() -> int:
    return components_query("select max(`_batch`) from {table}")[0]


def written_share(seen: int) -> float:
    """The share of the graph's nodes that the components run wrote: the rows of batches
    after `seen` (the nodes of the changed records, and the nodes whose component
    changed; the other nodes of a component it closed again are not written)."""
    row = components_query(f"select count_if(`_batch` > {seen}), count(*) from {{table}}")
    return round(row[0] / row[1], 5)


def print_incremental(results: list[dict]) -> None:
    print()
    print(
        "| records | run | nodes written | edges | components | merged | three nodes "
        "| ÷ full build | statements |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for result in results:
        for run in result["runs"]:
            nodes = run["nodes_s"]
            ratio = run.get("ratio_to_full")
            print(
                f"| {result['records']:,} | {run['run']} "
                f"| {run.get('written_share', 1):.2%} | {nodes['people_edges']} s "
                f"| {nodes['people_components']} s | {nodes['people']} s | {run['merge_s']} s "
                f"| {'1' if ratio is None else f'{ratio:.3f}'} "
                f"| {' + '.join(str(run['statements'][n]) for n in MERGE_NODES)} |"
            )
    for result in results:
        for run in result["runs"]:
            print(f"\nrecords={result['records']:,}, {run['run']}: the slowest statements")
            for node in MERGE_NODES:
                for seconds, head in run.get("slowest_statements", {}).get(node, []):
                    print(f"  {node}: {seconds} s  {head}")
    for result in results:
        floor = result["read_floor"]
        reads = ", ".join(f"{table} {seconds} s" for table, seconds in floor["reads_s"].items())
        print(
            f"\nrecords={result['records']:,}: one read of each ({reads}) takes "
            f"{floor['total_s']} s, {floor['ratio_to_full']:.3f} of the full build"
        )


def naive_merge(spark: SparkSession, cap_seconds: float) -> dict:
    """The hand-written baseline: pairwise edges, min-label propagation, collect_list."""
    meter, started = ShuffleMeter(), time.monotonic()
    live = []
    for offset, name in enumerate(DATASETS):
        table = spark.table(f"{SCHEMA}.{name}").where(~F.col("is_deleted"))
        live.append(
            table.select(
                F.concat(F.lit(f"{offset}|"), "_id").alias("node"),
                F.lower("email").alias("email"),
                F.expr("right(regexp_replace(phone, '[^0-9]', ''), 8)").alias("phone"),
            )
        )
    records = live[0].unionByName(live[1]).unionByName(live[2])
    pairs = None
    for key in ("email", "phone"):
        valued = records.where(F.col(key).isNotNull() & (F.col(key) != "")).select("node", key)
        joined = (
            valued.alias("l")
            .join(valued.alias("r"), key)
            .select(F.col("l.node").alias("a"), F.col("r.node").alias("b"))
        )
        pairs = joined if pairs is None else pairs.union(joined)
    edges = materialize(pairs.where("a < b").distinct())
    edge_count = edges.count()
    # a self edge for every record: records that match nothing are entities too
    graph = edges.select(F.col("a").alias("src"), F.col("b").alias("dst")).union(
        records.select(F.col("node").alias("src"), F.col("node").alias("dst"))
    )
    remaining = cap_seconds - (time.monotonic() - started)
    labels, rounds = naive_min_label(graph, remaining)
    if labels is None:
        return {
            "total_s": None,
            "rounds": rounds,
            "edges": edge_count,
            "finished": False,
            "shuffle_bytes": meter.shuffle_bytes(),
        }
    merged = labels.groupBy("component").agg(F.sort_array(F.collect_list("node")).alias("members"))
    merged.write.format("iceberg").mode("overwrite").saveAsTable(f"{SCHEMA}.naive_people")
    total = time.monotonic() - started
    return {
        "total_s": round(total, 1),
        "rounds": rounds,
        "edges": edge_count,
        "finished": True,
        "shuffle_bytes": meter.shuffle_bytes(),
    }


def value_node_edges(spark: SparkSession) -> int:
    return spark.table(f"{SCHEMA}.people_edges").count()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000", help="records, comma-separated")
    parser.add_argument("--baseline-cap", type=float, default=600.0)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument(
        "--chain",
        type=int,
        default=None,
        help="people linked in a chain (a CRM phone is the next one's); default 25, "
        "3 with --incremental",
    )
    parser.add_argument(
        "--json",
        type=Path,
        help="default: bench/out/entity_merge.json, or entity_merge_incremental[...].json",
    )
    parser.add_argument(
        "--incremental",
        action="store_true",
        help="time a merge that follows the change: a full build, then deliveries",
    )
    parser.add_argument(
        "--shares", default="0.001,0.01", help="shares of records each delivery changes"
    )
    parser.add_argument(
        "--change-column",
        action="store_true",
        help="with --incremental: every dataset declares a change column (change_columns)",
    )
    parser.add_argument(
        "--upsert-input",
        action="store_true",
        help="with --incremental: every dataset is an upsert model with provenance",
    )
    args = parser.parse_args()

    run = Run()
    if args.incremental:
        chain = args.chain or 3
        shares = [float(s) for s in args.shares.split(",")]
        results = [
            incremental_runs(int(size), chain, shares, args.change_column, args.upsert_input)
            for size in args.sizes.split(",")
        ]
        suffix = ("_change_column" if args.change_column else "") + (
            "_upsert_input" if args.upsert_input else ""
        )
        run.write(args.json or OUT / f"entity_merge_incremental{suffix}.json", results)
        print_incremental(results)
        return

    results = []
    for size in [int(s) for s in args.sizes.split(",")]:
        write_project(size, args.chain or 25)
        dbt("deps")
        print(f"records={size:,}: dbt run ...", flush=True)
        ours = run_dbt_merge()
        spark = bench_session()
        merged = spark.table(f"{SCHEMA}.people")
        row = {
            "records": size,
            "dbt_merge": ours,
            "entities": merged.count(),
            "largest": merged.agg(F.max(F.size("$ids"))).first()[0],
            "value_node_edges": value_node_edges(spark),
        }
        if not args.no_baseline:
            print(f"records={size:,}: naive baseline ...", flush=True)
            row["naive"] = naive_merge(spark, args.baseline_cap)
        print(json.dumps(row), flush=True)
        results.append(row)

    run.write(args.json or OUT / "entity_merge.json", results)
    print()
    print("| records | entities | dbt run (all nodes) | edges | components | merged | naive |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in results:
        nodes = row["dbt_merge"]["nodes_s"]
        naive = row.get("naive") or {}
        naive_text = (
            f"{naive['total_s']} s ({naive['rounds']} rounds)"
            if naive.get("finished")
            else ("did not finish" if naive else "-")
        )
        print(
            f"| {row['records']:,} | {row['entities']:,} | {row['dbt_merge']['total_s']} s "
            f"| {nodes.get('people_edges')} s | {nodes.get('people_components')} s "
            f"| {nodes.get('people')} s | {naive_text} |"
        )


if __name__ == "__main__":
    main()
