"""docs/getting-started.md's "Use dbt_merge from your own project", as a newcomer follows
it: the page's files, exactly (the clone's path and the test run's warehouse put in),
written as a project of their own that installs dbt_merge.

The project uses the names the documentation uses, which are the demo's names too
(`customers`, `customers_edges`, `crm_customers`, `orders` ...): none of the demo's nodes
or YAML properties reaches it, and its own YAML with the package's generic tests parses.
Its first build gives the page's rows; a second build with nothing new commits no
snapshot; a table stored in another format than its model's is refused by name, with
`--full-refresh`, before anything is written.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from dbt.cli.main import dbtRunner

from tests.conftest import LOG_DIR, ROOT, WAREHOUSE

PAGE = ROOT / "docs" / "getting-started.md"
SECTION = "## Use dbt_merge from your own project"
# a block whose first line names a file of the project acme is that whole file
_NAMES = re.compile(r"^(?:#|--)\s+acme/([\w./-]+)\s*$")
_FENCE = re.compile(r"^```(\w*)\s*$")
SCHEMA = "acme"
INCREMENTAL = ("customers_edges", "customers_components", "customers", "orders")
# the rows the page says the first build gives
CUSTOMERS = {
    ("0|crm-1|1|bill-1", False),
    ("0|crm-2", False),
    ("0|crm-3", True),
    ("1|bill-2", False),
}
ORDERS = {("o1", "paid", 100.0), ("o2", "placed", 40.0)}


def recipe() -> tuple[dict[str, str], list[str]]:
    """The section's files (path in acme -> text) and its shell commands."""
    text = PAGE.read_text()
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", len(SECTION))]
    files, commands, lines, i = {}, [], section.splitlines(), 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        body = lines[i + 1 : end]
        named = _NAMES.match(body[0]) if body else None
        if named:
            # a CSV's first line is its header: the comment naming it is not in the file
            kept = body[1:] if fence.group(1) == "csv" else body
            files[named.group(1)] = "\n".join(kept) + "\n"
        elif fence.group(1) == "sh":
            commands += [line.split(" #")[0].strip() for line in body if line.strip()]
        i = end + 1
    return files, commands


def write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        if name == "packages.yml":
            text = text.replace("local: ../dbt_merge", f"local: {ROOT}")
        if name == "profiles.yml":
            # one JVM, one warehouse: the test run's; and spark.log with the test logs
            text = text.replace("warehouse: warehouse", f"warehouse: {WAREHOUSE}")
            text = text.replace("threads: 2", f"threads: 2\n      log_dir: {LOG_DIR}")
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def dbt(folder: Path, *args: str):
    return dbtRunner().invoke([*args, "--project-dir", str(folder), "--profiles-dir", str(folder)])


def snapshot_count(spark, name: str) -> int:
    return spark.sql(f"select count(*) from {SCHEMA}.{name}.snapshots").first()[0]


@pytest.fixture(scope="module")
def acme(tmp_path_factory, spark):
    """The recipe's project after its commands (dbt deps, dbt build), as the page says."""
    files, commands = recipe()
    assert {"dbt_project.yml", "profiles.yml", "packages.yml", "models/customers.yml"} <= set(files)
    assert commands[-2:] == ["dbt deps --profiles-dir .", "dbt build --profiles-dir ."]
    folder = tmp_path_factory.mktemp("recipe") / "acme"
    write(folder, files)
    spark.sql(f"drop schema if exists {SCHEMA} cascade")
    assert dbt(folder, "deps").success
    build = dbt(folder, "build")
    assert build.success, [(r.node.name, r.status, r.message) for r in build.result or []]
    return folder, build


def test_the_first_build_gives_the_pages_rows(acme, spark):
    _, build = acme
    statuses = {r.node.name: r.status for r in build.result}
    assert {statuses[name] for name in INCREMENTAL} == {"success"}
    tests = [name for name in statuses if name.startswith("dbt_merge_")]
    assert len(tests) == 2 and {statuses[t] for t in tests} == {"pass"}, statuses
    customers = spark.sql(f"select `_id`, `$deleted` from {SCHEMA}.customers").collect()
    assert {tuple(r) for r in customers} == CUSTOMERS
    orders = spark.sql(f"select order_id, status, double(amount) from {SCHEMA}.orders").collect()
    assert {tuple(r) for r in orders} == ORDERS


def test_the_project_has_only_its_own_nodes_and_properties(acme):
    """Every node of the manifest is the project's own, with only the properties of its
    own YAML: the page's description of `customers`, none on the others, and no
    `column_types` on a seed (the demo's YAML gives crm_customers some)."""
    folder, _ = acme
    parsed = dbt(folder, "parse")
    assert parsed.success, parsed.exception
    manifest = parsed.result
    nodes = {n.name: n for n in manifest.nodes.values() if n.resource_type in ("model", "seed")}
    assert {n.package_name for n in manifest.nodes.values()} == {"acme"}
    assert nodes["customers"].description.startswith("One row per customer id")
    assert set(nodes["customers"].columns) == {"_id"}
    for name, node in nodes.items():
        if name != "customers":
            assert node.description == "" and not node.columns, name
    for seed in ("crm_customers", "billing_accounts", "order_changes"):
        assert not nodes[seed].config.column_types, seed


def test_every_demo_name_in_a_project_of_its_own_gets_none_of_the_demo(acme, tmp_path):
    """A project with a node of every name the demo has (models and seeds): dbt parses it
    (no second YAML entry for any of them), and no node has a description or a column."""
    folder, _ = acme
    other = tmp_path / "acme"
    write(other, recipe()[0])
    demo_models = {
        p.stem
        for top in ("models", "python_models")
        for p in (ROOT / top).rglob("*")
        if p.suffix in (".sql", ".py")
    }
    demo_seeds = {p.stem for p in (ROOT / "seeds").rglob("*.csv")}
    for name in demo_models - {p.stem for p in (folder / "models").glob("*")}:
        (other / "models" / f"{name}.sql").write_text("select 1 as id")
    for name in demo_seeds - {p.stem for p in (folder / "seeds").glob("*")}:
        (other / "seeds" / f"{name}.csv").write_text("id\n1\n")
    (other / "models" / "customers.yml").unlink()
    assert dbt(other, "deps").success
    parsed = dbt(other, "parse")
    assert parsed.success, parsed.exception
    nodes = [n for n in parsed.result.nodes.values() if n.resource_type in ("model", "seed")]
    assert {n.name for n in nodes} >= demo_models | demo_seeds
    for node in nodes:
        assert node.package_name == "acme", node.unique_id
        assert node.description == "" and not node.columns, node.unique_id
        assert not node.config.column_types, node.unique_id


def test_a_second_build_with_nothing_new_writes_nothing(acme, spark):
    folder, _ = acme
    before = {name: snapshot_count(spark, name) for name in INCREMENTAL}
    build = dbt(folder, "build")
    assert build.success
    assert {name: snapshot_count(spark, name) for name in INCREMENTAL} == before


def test_a_table_stored_in_another_format_is_refused_with_full_refresh(acme, spark):
    """orders stored as a parquet table (built before +file_format was set): the next run
    fails by name, before anything is written; --full-refresh rebuilds it as Iceberg."""
    folder, _ = acme
    rows = sorted(tuple(r) for r in spark.sql(f"select * from {SCHEMA}.orders").collect())
    spark.sql(f"create table {SCHEMA}.orders_kept using parquet as select * from {SCHEMA}.orders")
    spark.sql(f"drop table {SCHEMA}.orders purge")
    spark.sql(f"alter table {SCHEMA}.orders_kept rename to {SCHEMA}.orders")
    run = dbt(folder, "run", "--select", "orders")
    assert not run.success
    message = " ".join(" ".join(r.message.split()) for r in run.result if r.message)
    assert "Model orders: config file_format is iceberg, but" in message, message
    assert "is stored as parquet" in message and "--full-refresh" in message, message
    stored = spark.sql(f"describe extended {SCHEMA}.orders").collect()
    assert any(r[0] == "Provider" and r[1] == "parquet" for r in stored), "nothing written"
    assert sorted(tuple(r) for r in spark.sql(f"select * from {SCHEMA}.orders").collect()) == rows

    assert dbt(folder, "run", "--select", "orders", "--full-refresh").success
    stored = spark.sql(f"describe extended {SCHEMA}.orders").collect()
    assert any(r[0] == "Provider" and r[1] == "iceberg" for r in stored)
    assert sorted(tuple(r) for r in spark.sql(f"select * from {SCHEMA}.orders").collect()) == rows
