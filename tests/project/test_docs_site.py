"""The README and the documentation site (mkdocs.yml, docs/) stay true.

No Spark and no network: the site is built with ``mkdocs build --strict`` (a broken
link or anchor fails), every example is either rendered into its page from a file of the
demo project (``scripts/docs_includes.py``, checked to be in sync), a copy of the file it
names, or compiled, and every configuration reference table is compared with the code
that validates the settings.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.nodes
import pytest
import yaml
from markdown.extensions.toc import slugify

from tests.conftest import ROOT

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
DOCUMENTS = [ROOT / "README.md", *PAGES]

# -- reading markdown


@dataclasses.dataclass(frozen=True)
class Block:
    """A fenced code block: its document, first line number, language and text."""

    path: Path
    line: int
    lang: str
    text: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line} ({self.lang or 'no language'})"


_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")


def code_blocks(path: Path) -> list[Block]:
    """Every fenced block of a markdown file, dedented to its fence (an include block's
    fence is the file's text, as scripts/docs_includes.py rendered it)."""
    blocks, lines, i = [], path.read_text().splitlines(), 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        indent, lang, start, body = len(opened.group(1)), opened.group(2), i + 1, []
        i += 1
        while not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][indent:])
            i += 1
        i += 1
        blocks.append(Block(path, start, lang, "\n".join(body)))
    return blocks


def _docs_includes():
    spec = importlib.util.spec_from_file_location(
        "docs_includes", ROOT / "scripts" / "docs_includes.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DOCS_INCLUDES = _docs_includes()


def reference_tables(path: Path) -> dict[str, list[dict[str, str]]]:
    """The tables that follow a ``<!-- reference: NAME -->`` line: NAME -> rows, each row
    a mapping of the header's first word to the cell (pipes escaped as ``\\|`` kept); no
    table after the marker is no rows."""
    tables, lines = {}, path.read_text().splitlines()
    for i, line in enumerate(lines):
        marker = re.match(r"^<!-- reference: ([\w.]+) -->$", line)
        if not marker:
            continue
        if not lines[i + 1].startswith("|"):
            tables[marker.group(1)] = []  # a macro without arguments: no table
            continue
        header = [c.split()[0] for c in split_row(lines[i + 1])]
        rows, j = [], i + 3
        while j < len(lines) and lines[j].startswith("|"):
            rows.append(dict(zip(header, split_row(lines[j]), strict=True)))
            j += 1
        tables[marker.group(1)] = rows
    return tables


def split_row(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [c.strip().replace("\\|", "|") for c in cells]


def code_spans(cell: str) -> list[str]:
    return [m.group(2).strip() for m in re.finditer(r"(`+)(.+?)\1", cell)]


def name_of(row: dict[str, str]) -> str:
    first = next(iter(row.values()))
    return code_spans(first)[0]


# -- the site


def test_the_site_builds_strict(tmp_path):
    """mkdocs build --strict: every link and anchor resolves."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for page in PAGES:
        # a heading glued to the table above it renders as a table row, not a heading
        folder = tmp_path if page.stem == "index" else tmp_path / page.stem
        html = folder / "index.html"
        source_headings = re.findall(r"^#{2,3} ", page.read_text(), flags=re.M)
        built = re.findall(r"<h[23] id=", html.read_text())
        assert len(built) == len(source_headings), f"{page.name}: a heading did not render"


def test_every_page_is_in_the_nav():
    """A page under docs/ that the nav leaves out is unreachable from the site."""
    config = (ROOT / "mkdocs.yml").read_text()
    for page in PAGES:
        assert f": {page.name}" in config, f"{page.name} is not in the nav of mkdocs.yml"


def test_the_readme_is_one_or_two_screens():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_the_readme_links_resolve():
    """The README is not part of the site: its relative links and anchors are checked here."""
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert links
    for link in links:
        if re.match(r"^[a-z]+://", link):
            continue
        target, _, anchor = link.partition("#")
        path = ROOT / target
        assert path.exists(), f"README links to {link}, which does not exist"
        if anchor:
            assert anchor in anchors(path), f"README links to {link}: no such heading"


def anchors(path: Path) -> set[str]:
    headings = re.findall(r"^#+\s+(.+?)\s*$", path.read_text(), flags=re.M)
    return {slugify(h.replace("`", ""), "-") for h in headings}


# -- the examples

MACROS = {
    m.group(1)
    for f in (ROOT / "macros").rglob("*.sql")
    for m in re.finditer(r"\{%-?\s*(?:macro|test)\s+(\w+)\s*\(", f.read_text())
}
ALL_BLOCKS = [b for doc in DOCUMENTS for b in code_blocks(doc)]
# a block whose first line is exactly a comment naming a file of this repository is a
# copy of (a part of) that file
_NAMES_A_FILE = re.compile(r"^(?:#|--)\s+([\w./-]+\.(?:sql|py|yml|yaml))\s*$")


def test_the_documents_have_examples():
    langs = {b.lang for b in ALL_BLOCKS}
    assert {"sql", "python", "yaml", "sh"} <= langs
    assert any(DOCS_INCLUDES.blocks(p.read_text()) for p in PAGES)


def test_every_include_resolves():
    """Each ``<!-- include: path -->`` block names a file of the repository (and a
    section it marks) and holds that file's text, and no page keeps a snippets include
    line (nothing expands one: the site would show it as it is)."""
    includes = [
        (page, *block) for page in PAGES for block in DOCS_INCLUDES.blocks(page.read_text())
    ]
    assert includes
    for page, name, body in includes:
        assert body == DOCS_INCLUDES.render(name), (
            f"{page.name}: the block of {name} differs from the file: "
            "run .venv/bin/python scripts/docs_includes.py"
        )
    for page in DOCUMENTS:
        assert not DOCS_INCLUDES.SNIPPET.search(page.read_text()), f"{page.name}: --8<-- line"


def test_the_include_check_passes():
    """``scripts/docs_includes.py --check`` (what a contributor runs) finds every page in
    sync with its files."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "docs_includes.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


_LOCAL = "<!-- include: profiles.yml:local -->\n```yaml\n"


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda page: page.replace(_LOCAL, _LOCAL + "    # added\n"), id="line"),
        pytest.param(lambda page: page.replace(":local -->", ":nowhere -->"), id="section"),
        pytest.param(lambda page: page.replace("<!-- end include -->\n", "", 1), id="end"),
    ],
)
def test_a_page_out_of_sync_with_its_file_fails_the_check(tmp_path, tamper):
    """A copy of a page with a line added to an included file's text, an include of a
    section its file does not mark, or an include without its end line fails ``--check``,
    which names the page."""
    page = DOCS / "getting-started.md"
    copy = tmp_path / page.name
    copy.write_text(tamper(page.read_text()))
    assert copy.read_text() != page.read_text()
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "docs_includes.py"), "--check", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert str(copy) in result.stderr


def named_file(block: Block) -> Path | None:
    match = _NAMES_A_FILE.match(block.text.splitlines()[0])
    if match and (ROOT / match.group(1)).is_file():
        return ROOT / match.group(1)
    return None


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if named_file(b)], ids=str)
def test_a_copied_example_matches_its_file(block):
    """Each line of the example is a line of the file it names, in the file's order
    (lines may be left out, none may be changed or added)."""
    wanted = [line.strip() for line in block.text.splitlines()[1:] if line.strip()]
    have = iter(line.strip() for line in named_file(block).read_text().splitlines())
    for line in wanted:
        assert any(line == h for h in have), (
            f"{block}: {line!r} is not in {named_file(block).relative_to(ROOT)} "
            "(or not in the file's order)"
        )


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.lang in ("yaml", "yml")], ids=str)
def test_a_yaml_example_parses(block):
    assert list(yaml.safe_load_all(block.text)), f"{block} is empty"


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.lang == "python"], ids=str)
def test_a_python_example_compiles_and_its_imports_exist(block):
    tree = ast.parse(block.text, filename=str(block))
    compile(tree, str(block), "exec")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module.startswith("dbt_merge"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{block}: {node.module}.{alias.name}"


UPSERT_KNOWN = {
    "materialized",
    "incremental_strategy",
    "file_format",
    "on_schema_change",
    "tblproperties",
    "partition_by",
    "incremental_predicates",
    "merge_update_columns",
    "merge_exclude_columns",
}


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.lang == "sql"], ids=str)
def test_a_sql_example_parses_and_names_real_macros(block):
    """dbt's Jinja parses it; every ``dbt_merge.<macro>`` it calls exists; an upsert
    model's config names only settings the strategy knows."""
    env = jinja2.Environment(extensions=[jinja2.ext.do])
    tree = env.parse(block.text)
    for called in re.findall(r"\bdbt_merge\.(\w+)\s*\(", block.text):
        assert called in MACROS, f"{block} calls dbt_merge.{called}, which is not a macro"
    for call in tree.find_all(jinja2.nodes.Call):
        if isinstance(call.node, jinja2.nodes.Name) and call.node.name == "config":
            keys = {kw.key: kw.value for kw in call.kwargs}
            strategy = keys.get("incremental_strategy")
            if isinstance(strategy, jinja2.nodes.Const) and strategy.value == "upsert":
                unknown = set(keys) - UPSERT_KNOWN - set(upsert_settings()["config_keys"])
                assert not unknown, f"{block}: upsert settings {unknown} do not exist"


MAKE_TARGETS = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), flags=re.M))


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.lang == "sh"], ids=str)
def test_a_shell_example_names_real_targets_files_and_macros(block):
    """make targets exist, scripts exist, a run-operation's macro exists and its --args
    and --vars are YAML mappings, with only the macro's arguments."""
    for line in block.text.splitlines():
        line = line.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        for target in re.findall(r"\bmake\s+([\w-]+)", line):
            assert target in MAKE_TARGETS, f"{block}: make {target} is not a target"
        for script in re.findall(r"\b((?:bench|scripts)/[\w./-]+)", line):
            if script.startswith("bench/out/"):
                continue  # what a benchmark writes: it exists once the command has run
            assert (ROOT / script).exists(), f"{block}: {script} does not exist"
        for option in ("--args", "--vars"):
            for value in re.findall(rf"{option} '([^']*)'", line):
                assert isinstance(yaml.safe_load(value), dict), f"{block}: {option} {value}"
        operation = re.search(r"run-operation .*?dbt_merge\.(\w+)(?: --args '([^']*)')?", line)
        if operation:
            assert operation.group(1) in MACROS, f"{block}: no macro {operation.group(1)}"
            arguments = macro_signature(operation.group(1))
            given = yaml.safe_load(operation.group(2) or "{}")
            assert set(given) <= set(arguments), f"{block}: {set(given) - set(arguments)}"


# -- the configuration references


def source(*patterns: str) -> str:
    """The text of the files that validate a family's settings and of the tests that
    assert its messages, whitespace collapsed (messages are split over lines)."""
    files = sorted({f for p in patterns for f in ROOT.glob(p)})
    assert files, patterns
    return re.sub(r"\s+", " ", " ".join(f.read_text() for f in files))


def jinja_list(text: str, key: str) -> list[str]:
    found = re.search(rf"'{key}':\s*\[(.*?)\]", text, flags=re.S)
    assert found, key
    return re.findall(r"'(\w+)'", found.group(1))


def upsert_settings() -> dict:
    text = (ROOT / "macros/upsert/upsert_config.sql").read_text()
    defaults = re.search(r"'defaults':\s*\{(.*?)\}", text).group(1)
    return {
        "config_keys": jinja_list(text, "config_keys"),
        "merge_modes": jinja_list(text, "merge_modes"),
        "table_types": jinja_list(text, "table_types"),
        "payloads": re.findall(r"'(\w+Payload)':", text),
        "defaults": dict(re.findall(r"'(\w+)':\s*'?(\w+)'?", defaults)),
        "table_type_default": re.search(r"'table_type_default':\s*'(\w+)'", text).group(1),
    }


def macro_signature(name: str) -> dict[str, str]:
    """A macro's (or generic test's) arguments and their defaults as written
    (``required`` for none); a generic test's implicit ``model`` is left out."""
    for f in (ROOT / "macros").rglob("*.sql"):
        found = re.search(rf"\{{%-?\s*(macro|test)\s+{name}\s*\((.*?)\)\s*-?%\}}", f.read_text())
        if found:
            args = [a.strip() for a in found.group(2).split(",") if a.strip()]
            if found.group(1) == "test":
                args.remove("model")
            return {
                a.split("=")[0].strip(): (a.split("=")[1] if "=" in a else "required") for a in args
            }
    raise AssertionError(f"no macro {name}")


def page_tables() -> dict[str, tuple[Path, list[dict[str, str]]]]:
    found = {}
    for page in PAGES:
        for name, rows in reference_tables(page).items():
            assert name not in found, f"reference {name} twice"
            found[name] = (page, rows)
    return found


TABLES = page_tables()
ERROR_SOURCES = {
    "entity_merge": ("macros/entity_merge/**/*.sql", "tests/functional/test_entity_merge*.py"),
    "upsert": ("macros/upsert/*.sql", "tests/functional/test_upsert*.py"),
    "auto_merge": ("src/dbt_merge/auto_merge/*.py", "tests/unit/test_auto_merge_*.py"),
    "spark_session_profile": ("src/dbt/adapters/spark_session/*.py",),
    "spark_session_seed": (
        "src/dbt/include/spark_session/macros/materializations/seed.sql",
        "tests/functional/test_seeds.py",
    ),
    **{
        f"dbt_merge.bin_packing.{f}": (
            "src/dbt_merge/bin_packing/*.py",
            "tests/unit/test_bin_packing.py",
            "tests/functional/test_bin_packing_spark.py",
        )
        for f in ("bin_pack", "defragment", "plan_offline", "offline_report")
    },
}


# public macros that are steps the adapter's materialization calls by name, or SQL the
# strategies render: not called by a user, so documented in architecture.md, not here
INTERNAL_MACROS = {
    "prepare_incremental_upsert",
    "finish_incremental_upsert",
    "get_first_run_upsert_sql",
    "get_incremental_entity_state_sql",
    "finish_incremental_entity_state",
    "get_upsert_merge_sql",
    "get_upsert_precombine_sql",
    "get_upsert_provenance_sql",
    "get_upsert_compaction_sql",
    "upsert_config",
    # the project's own routing on dbt-spark under dbt-spark's names (its file is shown
    # whole in upserts.md; the documented macros are what it calls)
    "dbt_spark_validate_get_incremental_strategy",
    "dbt_spark_get_incremental_sql",
}
PUBLIC_MACROS = {m for m in MACROS if not m.startswith("_") and "__" not in m} - INTERNAL_MACROS
MACRO_REFERENCES = sorted(f"dbt_merge.{m}" for m in PUBLIC_MACROS)


def test_every_family_has_its_references():
    assert set(TABLES) == {
        "entity_merge",
        "entity_state",
        "entity_components",
        "dbt_merge.closure.connected_components",
        "upsert",
        "dbt_merge.bin_packing.bin_pack",
        "dbt_merge.bin_packing.defragment",
        "dbt_merge.bin_packing.plan_offline",
        "dbt_merge.bin_packing.offline_report",
        "dbt_merge.auto_merge.table_files",
        "auto_merge",
        "spark_session_profile",
        "spark_session_seed",
        *MACRO_REFERENCES,
    }
    assert INTERNAL_MACROS <= MACROS, "an internal macro is gone: update INTERNAL_MACROS"


def rows_by_name(reference: str) -> dict[str, dict[str, str]]:
    page, rows = TABLES[reference]
    names = [name_of(r) for r in rows]
    assert len(names) == len(set(names)), f"{page.name}: a setting twice in {reference}"
    return dict(zip(names, rows, strict=True))


def assert_same_names(reference: str, code: list[str] | set[str]) -> None:
    documented = set(rows_by_name(reference))
    assert documented - set(code) == set(), f"{reference}: documented, but the code knows none"
    assert set(code) - documented == set(), f"{reference}: in the code, not documented"


def default_cell(reference: str, name: str) -> str:
    cell = rows_by_name(reference)[name]["default"]
    spans = code_spans(cell)
    return spans[0] if spans else cell


def test_the_entity_merge_reference_is_the_declaration_the_macros_check():
    text = (ROOT / "macros/entity_merge/_entity_merge_settings.sql").read_text()
    assert_same_names("entity_merge", jinja_list(text, "settings"))
    rows = rows_by_name("entity_merge")
    for identity in jinja_list(text, "identities"):
        assert f"`{identity}`" in rows["identity"]["allowed"]
    strategies = (ROOT / "macros/entity_merge/strategies/_entity_strategies.sql").read_text()
    registry = re.search(r"macro _entity_strategies\(\).*?\{(.*?)\}", strategies, re.S)
    for strategy in re.findall(r"'(\w+)':", registry.group(1)):
        assert f"`{strategy}`" in rows["strategy"]["allowed"]
    max_merged = re.search(r"'max_merged_default':\s*(\d+)", text).group(1)
    assert default_cell("entity_merge", "max_merged") == max_merged
    for setting, default in re.findall(r"decl\.get\('(\w+)', '(\w+)'\)", text):
        assert default_cell("entity_merge", setting) == default, setting


def test_the_entity_state_reference_is_the_configs_the_strategy_reads():
    text = source("macros/entity_merge/state/*.sql", "macros/entity_merge/merge_entities.sql")
    read = dict(re.findall(r"config\.get\('(\w+)', var\('\w+', ([\d.]+)\)\)", text))
    assert_same_names("entity_state", read)
    for name, default in read.items():
        assert default_cell("entity_state", name) == default
        assert f"dbt_merge_{name}" in rows_by_name("entity_state")[name]["default"]


def test_the_entity_components_reference_is_the_configs_the_materialization_reads():
    text = source("macros/entity_merge/entity_components.sql")
    read = re.findall(r"config\.get\('(\w+)'(?:, (\d+|'\w+'))?\)", text)
    assert_same_names("entity_components", {name for name, _ in read})
    for name, default in read:
        if default:
            assert default_cell("entity_components", name) == default.strip("'"), name


def test_the_upsert_reference_is_the_settings_upsert_config_knows():
    known = upsert_settings()
    assert_same_names("upsert", known["config_keys"])
    rows = rows_by_name("upsert")
    for setting, values in (
        ("merge_mode", known["merge_modes"]),
        ("table_type", known["table_types"]),
        ("payload", known["payloads"]),
    ):
        for value in values:
            assert f"`{value}`" in rows[setting]["allowed"], (setting, value)
    for setting, default in known["defaults"].items():
        assert default_cell("upsert", setting) == default, setting
    assert default_cell("upsert", "table_type") == known["table_type_default"]


@pytest.mark.parametrize("reference", MACRO_REFERENCES)
def test_a_macro_reference_is_the_macro_signature(reference):
    arguments = macro_signature(reference.split(".")[1])
    assert_same_names(reference, arguments)
    for name, default in arguments.items():
        assert default_cell(reference, name) == default, name


def python_default(parameter: inspect.Parameter) -> str:
    return "required" if parameter.default is inspect.Parameter.empty else repr(parameter.default)


@pytest.mark.parametrize(
    "reference",
    [
        "dbt_merge.bin_packing.bin_pack",
        "dbt_merge.bin_packing.defragment",
        "dbt_merge.bin_packing.plan_offline",
        "dbt_merge.bin_packing.offline_report",
        "dbt_merge.auto_merge.table_files",
        "dbt_merge.closure.connected_components",
    ],
)
def test_a_function_reference_is_its_signature(reference):
    """Names, defaults and (where the table has them) types, from inspect.signature."""
    module, _, function = reference.rpartition(".")
    parameters = inspect.signature(getattr(importlib.import_module(module), function)).parameters
    assert_same_names(reference, parameters)
    rows = rows_by_name(reference)
    for name, parameter in parameters.items():
        assert default_cell(reference, name) == python_default(parameter), name
        if "allowed" in rows[name]:
            assert code_spans(rows[name]["type"]) == [parameter.annotation], name


def test_the_auto_merge_reference_is_the_options_plan_table_reads():
    from dbt_merge.auto_merge import options, settings

    assert_same_names("auto_merge", options._CONFIG_OPTIONS)
    assert default_cell("auto_merge", "source") == options.SOURCE_DEFAULT
    assert default_cell("auto_merge", "created_by") == options.CREATED_BY_DEFAULT
    for name in settings.SETTINGS_KEYS:
        assert default_cell("auto_merge", name) == str(getattr(settings.AutoMergeSettings, name))
    rows = rows_by_name("auto_merge")
    for source_name in options.SOURCES:
        assert f"`{source_name}`" in rows["source"]["allowed"]


def test_the_profile_reference_is_the_fields_the_adapter_adds():
    from dbt.adapters.spark_session.connections import SparkSessionCredentials

    added = SparkSessionCredentials.__annotations__
    assert_same_names("spark_session_profile", added)
    for field in dataclasses.fields(SparkSessionCredentials):
        if field.name in added:
            default = getattr(field.default, "value", field.default)
            assert default_cell("spark_session_profile", field.name) == str(default)


def test_the_seed_reference_is_the_config_the_seed_macros_read():
    from dbt.adapters.spark_session.impl import SparkSessionConfig

    text = (ROOT / "src/dbt/include/spark_session/macros/materializations/seed.sql").read_text()
    read = set(re.findall(r"model\['config'\]\.get\('(\w+)'", text))
    dbt_spark = {"column_types", "quote_columns"}  # dbt-spark's own seed configs
    assert_same_names("spark_session_seed", read - dbt_spark)
    assert default_cell("spark_session_seed", "seed_load") == SparkSessionConfig.seed_load
    allowed = re.search(r"if load not in \[(.*?)\]", text).group(1)
    for value in re.findall(r"'(\w+)'", allowed):
        assert f"`{value}`" in rows_by_name("spark_session_seed")["seed_load"]["allowed"]


@pytest.mark.parametrize("reference", sorted(ERROR_SOURCES))
def test_the_documented_errors_are_the_messages_the_code_raises(reference):
    """Each message in a table's error column is in the code that validates the setting
    or in the test that asserts its message (``<...>`` stands for a value)."""
    text = source(*ERROR_SOURCES[reference])
    checked = 0
    for name, row in rows_by_name(reference).items():
        for message in code_spans(row.get("error", "")):
            for piece in re.split(r"<[^>]*>", message):
                if len(piece.strip()) >= 4:
                    assert re.sub(r"\s+", " ", piece) in text, f"{reference} {name}: {piece!r}"
                    checked += 1
    assert checked


# -- the benchmark figures


def results_rows(path: Path) -> dict[str, str]:
    """The rows of the README's table (the block ``results.json#summary``), by their
    first cell."""
    text = path.read_text()
    block = text[text.index("<!-- figures: results.json#summary -->") :]
    block = block[: block.index("<!-- end figures -->")]
    table_lines = [line for line in block.splitlines() if line.startswith("|")]
    return {split_row(line)[0]: line for line in table_lines[2:]}


def test_the_readme_table_is_the_published_sweep():
    """Every dbt_merge figure of the published ``make bench`` run at its largest size is
    in the README's table; the upsert's row is the published `make bench-upsert` run."""
    results = json.loads((DOCS / "bench" / "results.json").read_text())
    readme = (ROOT / "README.md").read_text()
    for size in json.loads((DOCS / "bench" / "upsert.json").read_text())["results"]:
        row = f"| {size['table_rows']:,} / {size['batch_rows']:,} |"
        assert row in readme, f"README.md: no upsert row {row}"
        line = next(line for line in readme.splitlines() if line.startswith(row))
        for key in ("upsert_s", "upsert_mor_s", "hudi_cow_s", "hudi_mor_s", "merge_same_work_s"):
            assert f"{size[key]:.1f} s" in line, f"README.md: upsert {key} {size[key]}"
    rows = results_rows(ROOT / "README.md")
    for name, benchmark in results["benchmarks"].items():
        if name == "upsert":  # against Hudi, from upsert.json (above)
            continue
        label = name.replace("_", " ")
        row = next((r for first, r in rows.items() if label in first), None)
        assert row, f"README.md: no row for {name}"
        for series_name, series in benchmark["series"].items():
            if series["baseline"]:
                continue
            point = series["points"][-1]
            figure = f"{point['seconds']:.1f}" if point["finished"] else "did not finish"
            assert figure in row, f"README.md: {name} {series_name} {point}"


def _publish():
    spec = importlib.util.spec_from_file_location("bench_publish", ROOT / "bench" / "publish.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_pages_figures_are_their_results_files():
    """Every figures block of the benchmark pages is what bench/publish.py renders from
    its results file in docs/bench/ (command, machine, date, table), and every results
    file there is shown by a block."""
    publish = _publish()
    shown = set()
    for page in publish.PAGES:
        blocks = publish.blocks(page.read_text())
        assert blocks, f"{page.name} has no figures block"
        for file, body in blocks:
            assert body == publish.render(file), (
                f"{page.name}: the block of {file} differs from the file: "
                "run .venv/bin/python bench/publish.py"
            )
            shown.add(file.partition("#")[0])
    files = {path.name for path in (DOCS / "bench").glob("*.json")}
    assert files <= shown, f"results files no page shows: {sorted(files - shown)}"
