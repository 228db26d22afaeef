"""Entity merge macros rendered with plain Jinja (no dbt, no Spark)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import jinja2

from dbt_merge.entity_merge import VALUE_NODE_PREFIX
from tests.conftest import ROOT


class _Returned(Exception):
    """dbt's return(): the value a macro hands back."""


def _return(value):
    raise _Returned(value)


def _returning(macro):
    def call(*args):
        try:
            return str(macro(*args))
        except _Returned as returned:
            return returned.args[0]

    return call


def macros(*paths: Path, **context) -> SimpleNamespace:
    """The macros of the files as a `dbt_merge` namespace, each callable as dbt calls it;
    context: more names the macros see (dbt's run_query, adapter, config, var)."""
    env = jinja2.Environment(extensions=["jinja2.ext.do"])
    env.globals.update(context)
    env.globals["return"] = _return
    namespace = SimpleNamespace()
    env.globals["dbt_merge"] = namespace
    for path in paths:
        template = env.from_string(path.read_text())
        context = template.new_context()
        for _ in template.root_render_func(context):  # defines the macros
            pass
        # context.vars, not template.module: a module leaves out names starting with _
        for name, value in context.vars.items():
            if isinstance(value, jinja2.runtime.Macro):
                setattr(namespace, name, _returning(value))
    return namespace


def test_macros_and_python_share_the_value_node_prefix():
    dbt_merge = macros(
        ROOT / "macros" / "entity_merge" / "_entity_nodes.sql",
        ROOT / "macros" / "core" / "_sql_string.sql",
    )
    assert dbt_merge._entity_value_node_prefix() == VALUE_NODE_PREFIX, (
        "equality_edges writes value nodes with the prefix entity_components drops"
    )
    assert dbt_merge._is_entity_node_sql("node") == (
        f"not startswith(node, '{VALUE_NODE_PREFIX}')"
    ), "merge_entities drops the same value nodes in SQL"
    assert dbt_merge._entity_value_node_sql(0, "string", "v") == (
        f"concat('{VALUE_NODE_PREFIX}0:string:', cast(v as string))"
    ), "a value node is the prefix, the group, the type and the value"


def test_spark_size_settings_in_bytes():
    """The state MERGE raises the broadcast threshold only above the user's value, read
    as Spark writes it (SET shows the value as it was set)."""
    dbt_merge = macros(
        ROOT / "macros" / "entity_merge" / "state" / "get_incremental_entity_state_sql.sql"
    )
    sizes = {
        "10485760b": 10485760,
        "10485760": 10485760,
        " 10MB ": 10 * 1024**2,
        "10m": 10 * 1024**2,
        "64k": 64 * 1024,
        "1g": 1024**3,
        "-1": -1,
        "100b": 100,
    }
    for value, expected in sizes.items():
        assert dbt_merge._conf_bytes(value) == expected, value
    for value in ["", "b", "ten", "10 MB", "1.5g", "<undefined>"]:
        assert dbt_merge._conf_bytes(value) is None, value
