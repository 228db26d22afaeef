"""The repository's own dbt project: `dbt build` twice (full, then incremental), docs, and
the walkthroughs of the README (orders, bundles, the customers merge's delivery 2)."""

from __future__ import annotations

import csv
import json

import pytest

from tests.conftest import ROOT
from tests.demo import SCHEMA, TARGET, dbt


def rows(spark, sql: str) -> list[tuple]:
    return [tuple(r) for r in spark.sql(sql).collect()]


@pytest.fixture(scope="module")
def first_build(demo_build):
    """Each node's status in the run's first demo build (conftest.py)."""
    statuses, _ = demo_build
    return statuses


def test_first_build_runs_every_node(first_build):
    for name in (
        "demo_events",
        "stg_demo_events",
        "demo_event_log",
        "demo_customer_activity",
        "customers_edges",
        "customers_components",
        "customers",
        "sesam_golden",
    ):
        assert first_build[name] == "success", name
    tests = [name for name in first_build if name.startswith(("unique_", "not_null_", "accepted"))]
    assert len(tests) >= 11 and all(first_build[t] == "pass" for t in tests)
    merge_tests = [name for name in first_build if name.startswith("dbt_merge_")]
    assert len(merge_tests) == 4, "both generic tests on both demo merges"
    assert all(first_build[t] == "pass" for t in merge_tests)
    assert first_build["sesam_golden_matches_expected"] == "pass", "the Sesam example, row for row"


def _seed_rows(file: str) -> list[dict[str, str]]:
    with open(ROOT / "seeds" / file, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _crm_records(delivery: int) -> list[dict[str, str]]:
    """The CRM as stg_crm_customers delivers it: crm_customers with the latest version
    from crm_customer_changes up to ``delivery`` in the place of each changed record."""
    records = {row["_id"]: row for row in _seed_rows("crm_customers.csv")}
    changes = [
        row for row in _seed_rows("crm_customer_changes.csv") if int(row["delivery"]) <= delivery
    ]
    for change in sorted(changes, key=lambda row: (int(row["delivery"]), int(row["change_id"]))):
        records[change["_id"]] = change
    return list(records.values())


def _reference_customers(delivery: int = 1) -> set[frozenset[str]]:
    """The customers merge recomputed in plain Python from the seed files (union-find)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    sources = [
        ("0", _crm_records(delivery), "emails", "phone"),
        ("1", _seed_rows("billing_accounts.csv"), "email", "phone"),
        ("2", _seed_rows("support_contacts.csv"), "contact_email", "phone"),
    ]
    for offset, records, email_column, phone_column in sources:
        for row in records:
            if row.get("is_deleted") == "true":
                continue
            node = f"{offset}|{row['_id']}"
            find(node)
            values = [f"email:{e.strip().lower()}" for e in row[email_column].split(";")]
            digits = "".join(ch for ch in row[phone_column] if ch.isdigit())[-8:]
            values.append(f"phone:{digits}")
            for value in values:
                if value.split(":", 1)[1]:
                    parent[find(node)] = find(value)
    groups: dict[str, set[str]] = {}
    for node in list(parent):
        if not node.startswith(("email:", "phone:")):
            groups.setdefault(find(node), set()).add(node)
    return {frozenset(group) for group in groups.values()}


def _live_customers(spark) -> set[frozenset[str]]:
    """The stored live customers, each as the set of its members' `<offset>|<id>`."""
    merged = set()
    for (entity_id,) in rows(spark, f"select `_id` from {SCHEMA}.customers where not `$deleted`"):
        parts = entity_id.split("|")
        merged.add(frozenset(f"{o}|{i}" for o, i in zip(parts[::2], parts[1::2], strict=True)))
    return merged


def test_customers_merge_matches_a_reference_union_find(spark, first_build):
    reference = _reference_customers()
    assert _live_customers(spark) == reference
    sizes = sorted(len(group) for group in reference)
    assert sizes.count(3) >= 200 and sizes[-1] <= 4, "three-system customers, no giant cluster"
    deleted = rows(
        spark, f"select count(*), max(size(`$ids`)) from {SCHEMA}.customers where `$deleted`"
    )
    assert deleted == [(50, 1)], "the 50 deleted records are stored alone"


def test_python_model_output(spark, first_build):
    got = rows(
        spark,
        f"select customer_id, customer_name, count_events, count_orders, cast(net_amount as string)"
        f" from {SCHEMA}.demo_customer_activity where customer_id in ('c02', 'c06') order by 1",
    )
    assert got == [
        ("c02", "Seán O'Brien", 4, 2, "23.75"),
        ("c06", 'Zoë "Zed" Okafor', 3, 1, "0.00"),
    ]


# The incremental models whose inputs a second build leaves as they were (seeds are
# reloaded, with the same rows): an entity merge's four models, the upserts of the same
# batch and the upsert's events, and a SQL merge of no new event.
UNCHANGED_BY_A_SECOND_BUILD = (
    "customers_edges",
    "customers_components",
    "customers",
    "customers_provenance",
    "orders",
    "orders__provenance",
    "orders_commit_time",
    "demo_event_log",
)


def snapshot_count(spark, name: str) -> int:
    return rows(spark, f"select count(*) from {SCHEMA}.{name}.snapshots")[0][0]


def test_second_build_takes_the_incremental_path(spark, first_build):
    # Mark a customer with no new events; a full rebuild would restore 2, the
    # incremental branch (only customers with newer events) leaves it alone.
    spark.sql(
        f"update {SCHEMA}.demo_customer_activity set count_events = 999 where customer_id = 'c07'"
    )
    spark.sql(f"update {SCHEMA}.demo_event_log set amount = -1 where event_id = 'e001'")
    state_batches = (
        f"select (select max(`_batch`) from {SCHEMA}.customers_edges),"
        f" (select max(`_batch`) from {SCHEMA}.customers_components)"
    )
    batches = rows(spark, state_batches)
    snapshots = {name: snapshot_count(spark, name) for name in UNCHANGED_BY_A_SECOND_BUILD}
    result = dbt("build")
    assert {r.node.name: r.status for r in result.result}["demo_customer_activity"] == "success"
    assert rows(
        spark, f"select count_events from {SCHEMA}.demo_customer_activity where customer_id = 'c07'"
    ) == [(999,)], "the Python model's dbt.is_incremental branch ran"
    assert rows(spark, f"select amount from {SCHEMA}.demo_event_log where event_id = 'e001'") == [
        (-1,)
    ], "the SQL model merged nothing new into old rows"
    assert rows(spark, f"select count(*) from {SCHEMA}.demo_customer_activity") == [(7,)]
    assert rows(spark, f"select count(*), max(`_updated`) from {SCHEMA}.customers") == [
        (2330, 2329)
    ], "unchanged inputs: the incremental merge emitted nothing"
    assert rows(spark, state_batches) == batches, "and its state models wrote no row"
    assert {name: snapshot_count(spark, name) for name in UNCHANGED_BY_A_SECOND_BUILD} == (
        snapshots
    ), "nothing new, nothing written: no incremental model committed a snapshot"
    assert rows(spark, f"select count(*) from {SCHEMA}.demo_event_log") == [(20,)]


@pytest.fixture(scope="module")
def docs(first_build):
    """`dbt docs generate`, once: (catalog, manifest)."""
    dbt("docs", "generate", "--write-json")
    catalog = json.loads((TARGET / "catalog.json").read_text())
    manifest = json.loads((TARGET / "manifest.json").read_text())
    return catalog, manifest


def test_docs_generate_describes_every_node(docs):
    catalog, manifest = docs
    for name in ("demo_customer_activity", "demo_event_log", "stg_demo_events"):
        node = catalog["nodes"][f"model.dbt_merge.{name}"]
        assert node["columns"], f"{name} has columns in the catalog"
        assert manifest["nodes"][f"model.dbt_merge.{name}"]["description"]
    assert "seed.dbt_merge.demo_events" in catalog["nodes"]
    assert catalog["nodes"]["model.dbt_merge.stg_demo_events"]["metadata"]["type"] == "view"


def test_every_node_and_column_is_described(docs):
    _, manifest = docs
    undocumented = []
    for uid, node in manifest["nodes"].items():
        if node["resource_type"] not in ("model", "seed") or node["package_name"] != "dbt_merge":
            continue
        if not node["description"].strip():
            undocumented.append(uid)
        undocumented += [
            f"{uid}.{c}" for c, col in node["columns"].items() if not col["description"].strip()
        ]
    assert undocumented == []


def test_every_catalog_column_and_macro_is_described(docs):
    catalog, manifest = docs
    missing = []
    for uid, stored in catalog["nodes"].items():
        documented = manifest["nodes"][uid]["columns"]
        missing += [
            f"{uid}.{name}"
            for name in stored["columns"]
            if not documented.get(name, {}).get("description", "").strip()
        ]
    assert missing == [], "every stored column has a YAML description"
    macros = [m for m in manifest["macros"].values() if m["package_name"] == "dbt_merge"]
    assert macros, "the package has macros"
    assert [m["name"] for m in macros if not m["description"].strip()] == []


def test_orders_feed_event_time_against_commit_time(spark, first_build):
    """The README's walkthrough: deliveries 2 and 3 after the build applied delivery 1."""

    def state(model):
        return rows(
            spark,
            f"select order_id, status, cast(amount as string), customer_id,"
            f" date_format(updated_at, 'HH:mm') from {SCHEMA}.{model} order by order_id",
        )

    after_first = [
        ("o1", "paid", "100.00", "c1", "09:30"),  # two versions in one batch, partial
        ("o2", "placed", "50.00", "c2", "09:10"),
        ("o3", "placed", "75.00", "c3", "09:20"),
    ]
    dbt(
        "build",
        "--select",
        "order_changes",
        "stg_order_changes",
        "orders",
        "orders_commit_time",
        "--full-refresh",
    )
    assert state("orders") == after_first
    assert state("orders_commit_time") == after_first
    recorded = set(rows(spark, f"select * from {SCHEMA}.orders_provenance"))
    changes = {}
    for batch in (2, 3):
        dbt(
            "run",
            "--select",
            "stg_order_changes",
            "orders",
            "orders_commit_time",
            "--vars",
            json.dumps({"orders_batch": batch}),
        )
        events = set(rows(spark, f"select * from {SCHEMA}.orders_provenance")) - recorded
        recorded |= events
        changes[batch] = sorted((event[0], event[2]) for event in events)
    assert changes == {
        2: [("CREATE", "o4"), ("DELETE", "o3"), ("UPDATE", "o1")],
        3: [("UPDATE", "o4")],
    }, "provenance: the late o1/o2 changes and o5's insert-then-delete changed nothing"
    assert state("orders") == [
        ("o1", "shipped", "100.00", "c1", "10:30"),  # the late 10:00 'paid' is ignored
        ("o2", "placed", "50.00", "c2", "09:10"),  # the late 09:05 version is ignored
        ("o4", "paid", "20.00", "c4", "11:30"),  # partial: amount and customer kept
    ], "o3 deleted; o5 inserted and deleted in one batch never stored"
    assert state("orders_commit_time") == [
        ("o1", "paid", "100.00", "c1", "10:00"),  # the late change wins and rolls back
        ("o2", "placed", "45.00", "c2", "09:05"),
        ("o4", "paid", "20.00", "c4", "11:30"),
    ]


BUNDLES = (
    f"select correlation_value, concat_ws(' ', members), status, merge_reason"
    f" from {SCHEMA}.message_bundles order by opened_at"
)
# the bundles sent by delivery 1, in the order they were opened
SENT = {
    "c1": ("m01 m02 m03 m04 m05", "merged", "MAX_ENTRIES_THRESHOLD_REACHED"),
    "c2": ("m06 m07 m08", "merged", "MAX_BYTES_THRESHOLD_REACHED"),
    "c3": ("m09", "merged", "MAX_BYTES_THRESHOLD_REACHED"),  # larger than max bytes
    "c4": ("m10 m11", "merged", "TIMEOUT"),  # 31 minutes old when m16 arrives
    "c10": ("m12", "merged", "BIN_MANAGER_FULL"),  # a fifth bundle opens at 10:43
    "c5": ("m13 m14 m15", "merged", "MIN_THRESHOLDS_REACHED"),  # at the run's end
}
AFTER_DELIVERY_1 = [(c, *v) for c, v in SENT.items()] + [
    ("c6", "m16", "pending", None),
    ("c7", "m17", "pending", None),
    ("c8", "m18", "pending", None),
]
AFTER_DELIVERY_2 = [(c, *v) for c, v in SENT.items()] + [
    ("c6", "m16 m19 m20", "merged", "MIN_THRESHOLDS_REACHED"),  # resumed and sent
    ("c7", "m17 m21 m22 m23 m24", "merged", "MAX_ENTRIES_THRESHOLD_REACHED"),
    ("c8", "m18", "pending", None),  # nothing new for c8 and not yet 30 minutes old
    ("c11", "m25", "pending", None),
]


def assert_every_message_once_and_one_event_per_sent_bundle(spark):
    members = rows(spark, f"select explode(members) from {SCHEMA}.message_bundles")
    every = rows(spark, f"select message_id from {SCHEMA}.message_events")
    assert sorted(members) == sorted(every), "every message in exactly one bundle"
    events = rows(
        spark, f"select child_id, count(*) from {SCHEMA}.message_bundles_provenance group by 1"
    )
    assert len(events) == 8 and all(count == 1 for _, count in events), "one JOIN per sent bundle"


def test_message_bundles_and_uploads_across_two_deliveries(spark, first_build):
    """The README's bin packing walkthrough: delivery 1 (the build), then delivery 2."""
    uploads = (
        f"select fragment_identifier, concat_ws(' ', members), status,"
        f" coalesce(failure_reason, merge_reason), bytes"
        f" from {SCHEMA}.upload_reassembly order by fragment_identifier, opened_at"
    )
    models = ["stg_message_events+", "stg_upload_fragments+"]
    dbt("build", "--select", "message_events", "upload_fragments", *models, "--full-refresh")
    assert rows(spark, BUNDLES) == AFTER_DELIVERY_1
    dbt("run", "--select", *models, "--vars", json.dumps({"stream_delivery": 2}))
    assert rows(spark, BUNDLES) == AFTER_DELIVERY_2
    assert_every_message_once_and_one_event_per_sent_bundle(spark)

    assert rows(spark, uploads) == [
        ("u1", "u1-1 u1-2 u1-3 u1-4", "merged", "MAX_ENTRIES_THRESHOLD_REACHED", 3700),
        ("u2", "u2-1 u2-2 u2-3", "merged", "MAX_ENTRIES_THRESHOLD_REACHED", 2200),
        ("u3", "u3-1 u3-2 u3-3", "failed", "CONFLICTING_FRAGMENT_COUNT", 3000),
        ("u4", "u4-1 u4-2 u4-3", "merged", "MAX_ENTRIES_THRESHOLD_REACHED", 3000),
        ("u4", "u4-5", "failed", "FRAGMENT_INDEX_OUT_OF_RANGE", 1000),
        ("u5", "u5-1 u5-2 u5-3", "merged", "MAX_ENTRIES_THRESHOLD_REACHED", 2500),
        ("u5", "u5-2b", "failed", "DUPLICATE_FRAGMENT_INDEX", 1000),
        ("u6", "u6-1 u6-2", "failed", "INCOMPLETE_AFTER_MAX_BIN_AGE", 2000),
        ("u7", "u7-1 u7-2", "merged", "MAX_ENTRIES_THRESHOLD_REACHED", 1300),  # delivery 2
    ]
    failures = rows(spark, f"select upload_id, failure_reason from {SCHEMA}.upload_failures")
    assert len(failures) == 4


def test_offline_plan_of_a_tables_files(spark, first_build):
    """plan_offline over daily_events' data files reaches the lower bound."""
    total = rows(
        spark,
        f"select items, bins, lower_bound from {SCHEMA}.daily_events_compaction_report"
        f" where level = 'total'",
    )
    files = rows(spark, f"select count(*) from {SCHEMA}.daily_events.files")[0][0]
    assert total[0][0] == files == 60, "every data file of daily_events is planned"
    assert total[0][1] == total[0][2], "first-fit-decreasing meets ceil(total / 64 KiB) here"
    planned = rows(spark, f"select sum(entries) from {SCHEMA}.daily_events_compaction_plan")
    assert planned == [(60,)]


def test_a_run_that_died_between_the_bundles_and_their_provenance(spark, first_build):
    """Delivery 2 died after the bundles' commit and before their provenance's (the
    state such a run leaves: the bundles model ran, its provenance model did not), then
    the next plain run: the same bundles and events as a run that never died."""
    models = ["stg_message_events+"]
    dbt("run", "--select", *models, "--full-refresh")
    assert rows(spark, BUNDLES) == AFTER_DELIVERY_1
    delivery_2 = ["--vars", json.dumps({"stream_delivery": 2})]
    dbt("run", "--select", "stg_message_events", "message_bundles", *delivery_2)
    assert rows(spark, BUNDLES) == AFTER_DELIVERY_2
    recorded = rows(spark, f"select count(*) from {SCHEMA}.message_bundles_provenance")
    assert recorded == [(6,)], "delivery 2's two sent bundles are not recorded yet"

    dbt("run", "--select", *models, *delivery_2)
    assert rows(spark, BUNDLES) == AFTER_DELIVERY_2, "the re-run changed no bundle"
    assert_every_message_once_and_one_event_per_sent_bundle(spark)


# The customers merge follows the change: delivery 2 of the CRM (seed
# crm_customer_changes), the README's walkthrough in "Following the change". These tests
# come last in this module, because their fixture leaves the customers models built from
# scratch with delivery 2.
DELIVERY_2 = ["--vars", json.dumps({"customers_delivery": 2})]
JOINED = "0|crm-00726|1|bill-00063|2|sup-00920"
SPLIT = "0|crm-00272|0|crm-00752|1|bill-01143|2|sup-00904"
UPDATED = "0|crm-00160|1|bill-00154"
# what delivery 2 emits, in _updated order (that is, by _id): _id, $deleted, $replaced, $ids
DELIVERY_2_EMITS = [
    (UPDATED, False, False, ["crm-00160", "bill-00154"]),  # crm-00160 moved to Bergen
    ("0|crm-00272", False, False, ["crm-00272"]),  # a part of the split
    (SPLIT, True, True, ["crm-00272", "crm-00752", "bill-01143", "sup-00904"]),
    ("0|crm-00726", True, True, ["crm-00726"]),  # joined into JOINED
    (JOINED, False, False, ["crm-00726", "bill-00063", "sup-00920"]),
    ("0|crm-00752", True, False, ["crm-00752"]),  # the deleted bridge, stored alone
    ("1|bill-00063|2|sup-00920", True, True, ["bill-00063", "sup-00920"]),  # joined
    ("1|bill-01143|2|sup-00904", False, False, ["bill-01143", "sup-00904"]),  # a part
]
# the records whose components row delivery 2 writes: the three it changed, and those
# whose component changed (bill-00063 and sup-00920 joined crm-00726's, whose name is
# smaller; bill-01143 and sup-00904 split from crm-00272's). The other records of the
# three components it touched keep their rows (bill-00154 stays in crm-00160's,
# crm-00272 keeps its own)
WRITTEN_RECORDS = [
    "0|crm-00160",
    "0|crm-00726",
    "0|crm-00752",
    "1|bill-00063",
    "1|bill-01143",
    "2|sup-00904",
    "2|sup-00920",
]


def _customers_rows(spark) -> dict[str, dict]:
    """Every stored customer without its _updated, by _id."""
    table = spark.table(f"{SCHEMA}.customers").drop("_updated")
    return {row["_id"]: row for row in map(json.loads, table.toJSON().collect())}


def _state_rows(spark, model: str) -> set[str]:
    """A state model's rows without _batch and previous_component (what a run wrote
    when, and a component's label before that run), as JSON; a row without a component
    (a record that left the graph, which only a change-following run keeps) left out."""
    table = spark.table(f"{SCHEMA}.{model}").drop("_batch", "previous_component")
    if "component" in table.columns:
        table = table.where("component is not null")
    return set(table.toJSON().collect())


@pytest.fixture(scope="module")
def customers_delivery_2(spark, first_build):
    """The customers merge at delivery 1 (as the module's builds left it), delivery 2
    applied by an incremental run, then the same inputs built from scratch."""
    before = dict(rows(spark, f"select `_id`, `_updated` from {SCHEMA}.customers"))
    recorded = rows(spark, f"select count(*) from {SCHEMA}.customers_provenance")[0][0]
    last_batch = {
        model: rows(spark, f"select max(`_batch`) from {SCHEMA}.{model}")[0][0]
        for model in ("customers_edges", "customers_components")
    }
    dbt("run", "--select", "stg_crm_customers+", *DELIVERY_2)
    after = {
        "updated": dict(rows(spark, f"select `_id`, `_updated` from {SCHEMA}.customers")),
        "emitted": rows(
            spark,
            f"select `_id`, `$deleted`, `$replaced`, `$ids`, `_updated` from {SCHEMA}.customers"
            f" where `_updated` > {max(before.values())} order by `_updated`",
        ),
        "events": rows(
            spark,
            f"select event_type, child_id, parent_ids, child_updated"
            f" from {SCHEMA}.customers_provenance order by child_updated",
        )[recorded:],
        "live": _live_customers(spark),
        # the records whose rows each state model wrote in this run (a newer _batch)
        "written": {
            model: [
                node
                for (node,) in rows(
                    spark,
                    f"select distinct {key} from {SCHEMA}.{model}"
                    f" where `_batch` > {last_batch[model]} and {key} not like '=%' order by 1",
                )
            ]
            for model, key in (("customers_edges", "src"), ("customers_components", "node"))
        },
        # the merged model's change-following path stages the rows it emits
        "staged": rows(spark, f"select count(*) from {SCHEMA}.customers__dbt_merge_emitted"),
        "customers": _customers_rows(spark),
        "edges": _state_rows(spark, "customers_edges"),
        "components": _state_rows(spark, "customers_components"),
    }
    models = ["stg_crm_customers", "customers_edges", "customers_components", "customers"]
    dbt("run", "--select", *models, "--full-refresh", *DELIVERY_2)
    from_scratch = {
        "customers": _customers_rows(spark),
        "edges": _state_rows(spark, "customers_edges"),
        "components": _state_rows(spark, "customers_components"),
    }
    return before, after, from_scratch


def test_delivery_2_joins_two_customers_and_splits_one(customers_delivery_2):
    before, after, _ = customers_delivery_2
    assert max(before.values()) == 2329 and len(before) == 2330, "delivery 1, numbered from 0"
    assert [row[:4] for row in after["emitted"]] == DELIVERY_2_EMITS
    assert [row[4] for row in after["emitted"]] == list(range(2330, 2338)), (
        "_updated continues after delivery 1's maximum, in _id order"
    )
    emitted = {row[0] for row in DELIVERY_2_EMITS}
    assert {i: u for i, u in after["updated"].items() if i not in emitted} == {
        i: u for i, u in before.items() if i not in emitted
    }, "every other customer is left as it was"
    assert len(after["updated"]) == 2334, "new ids: the joined one, two parts, the deleted bridge"
    assert after["live"] == _reference_customers(delivery=2) != _reference_customers()
    joined, updated = after["customers"][JOINED], after["customers"][UPDATED]
    assert json.loads(joined["entity"])["emails"] == [
        "sven.nystrom72@mail.example",
        "Sven_Nyst877@Mail.example",
    ], "the CRM's new address is the billing account's, in another case"
    assert updated["city"] == ["Bergen"] and json.loads(updated["entity"])["city"] == "Bergen"


def test_delivery_2_closes_again_only_what_it_touched(customers_delivery_2):
    _, after, _ = customers_delivery_2
    assert after["written"] == {
        "customers_edges": ["0|crm-00160", "0|crm-00726", "0|crm-00752"],  # the changed records
        "customers_components": WRITTEN_RECORDS,
    }
    assert after["staged"] == [(8,)], "the merged model took the change-following path"


def test_delivery_2_provenance(customers_delivery_2):
    _, after, _ = customers_delivery_2
    assert after["events"] == [
        ("JOIN", UPDATED, ["crm-00160", "bill-00154"], 2330),
        ("JOIN", "0|crm-00272", ["crm-00272"], 2331),
        ("REPLACED", SPLIT, ["crm-00272", "crm-00752", "bill-01143", "sup-00904"], 2332),
        ("REPLACED", "0|crm-00726", ["crm-00726"], 2333),
        ("JOIN", JOINED, ["crm-00726", "bill-00063", "sup-00920"], 2334),
        ("DELETE", "0|crm-00752", ["crm-00752"], 2335),
        ("REPLACED", "1|bill-00063|2|sup-00920", ["bill-00063", "sup-00920"], 2336),
        ("JOIN", "1|bill-01143|2|sup-00904", ["bill-01143", "sup-00904"], 2337),
    ], "one event per emitted version, and only delivery 2's"


def test_delivery_2_equals_a_from_scratch_build(customers_delivery_2):
    _, after, from_scratch = customers_delivery_2
    incremental = after["customers"]
    retired = {i: incremental[i] for i in set(incremental) - set(from_scratch["customers"])}
    assert set(retired) == {"0|crm-00726", "1|bill-00063|2|sup-00920", SPLIT}
    assert all(row["$deleted"] and row["$replaced"] for row in retired.values())
    assert {i: incremental[i] for i in from_scratch["customers"]} == from_scratch["customers"], (
        "every id a from-scratch build has, row for row but _updated"
    )
    assert after["edges"] == from_scratch["edges"], "the state too, but _batch"
    assert after["components"] == from_scratch["components"]
