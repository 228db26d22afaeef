"""Entity merge end to end: dbt seeds → edges → components (Python) → golden records."""

from __future__ import annotations

import json

import pytest
from dbt.cli.main import dbtRunner
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.functional.entity_merge_fixtures import (
    InstallsDbtMerge,
    Recorder,
    merge_models,
    merge_vars,
)

SESAM_A = "_id,f1\na1,1\na2,2\n"
SESAM_B = "_id,f1,f2\nb1,1,x\nb2,3,\n"
SESAM_C = "_id,_deleted,f3\nc1,false,X\nc2,true,Y\nc3,true,X\n"
SESAM_MERGE = {
    "datasets": ["sesam_a a", "sesam_b b", "sesam_c c"],
    "equality": [["eq", "a.f1", "b.f1"], ["eq", "b.f2", ["lower", "c.f3"]]],
    "identity": "composite",
    "strategy": "default",
}

# SPEC §1 'The Sesam example': `_id`, `$ids`, `$deleted`, `_updated`, `$replaced`, entity
SESAM_GOLDEN = [
    ("0|a1|1|b1|2|c1", ["a1", "b1", "c1"], False, 0, False, '{"f1":[1,1],"f2":"x","f3":"X"}'),
    ("0|a2", ["a2"], False, 1, False, '{"f1":2}'),
    ("1|b2", ["b2"], False, 2, False, '{"f1":3}'),
    ("2|c2", ["c2"], True, 3, False, '{"f3":"Y"}'),
    ("2|c3", ["c3"], True, 4, False, '{"f3":"X"}'),
]


def sesam_config(**merges: dict) -> dict:
    """The project config of a test project with Sesam's seeds and the merges given:
    Iceberg tables, but Iceberg cannot read a data column named _deleted (a reserved
    metadata column), so the dataset that uses Sesam's default name is parquet."""
    return {
        **merge_vars(**merges),
        "seeds": {
            "+file_format": "iceberg",
            "test": {
                "sesam_c": {"+file_format": "parquet", "+column_types": {"_deleted": "boolean"}}
            },
        },
        "models": {"+file_format": "iceberg"},
    }


def rows(spark, sql):
    return [tuple(r) for r in spark.sql(sql).collect()]


def sql_recorder(queries: list[str]):
    """A dbt callback that appends the SQL of every statement dbt runs to queries."""

    def record(event):
        if event.info.name == "SQLQuery":
            queries.append(event.data.sql)

    return record


# the stored output with two faults: c2 no longer deleted, a2's entity changed
SESAM_TAMPERED = """
select
    `_id`,
    `$ids`,
    case when `_id` = '2|c2' then false else `$deleted` end as `$deleted`,
    `_updated`,
    `$replaced`,
    case when `_id` = '0|a2' then '{"f1":99}' else entity end as entity
from {{ ref('sesam') }}
"""
SESAM_TESTS = """
version: 2
models:
  - name: sesam
    data_tests: &merge_tests
      - dbt_merge.identity_is_deterministic:
          arguments:
            merge: sesam
            components: "{{ ref('sesam_components') }}"
      - dbt_merge.deleted_entities_not_merged:
          arguments:
            merge: sesam
            components: "{{ ref('sesam_components') }}"
    columns:
      - name: _id
        data_tests: [unique, not_null]
  - name: sesam_tampered
    data_tests: *merge_tests
"""


class TestSesamExample(InstallsDbtMerge):
    """SPEC §1 'The Sesam example': the exact golden output."""

    @pytest.fixture(scope="class")
    def seeds(self):
        return {"sesam_a.csv": SESAM_A, "sesam_b.csv": SESAM_B, "sesam_c.csv": SESAM_C}

    @pytest.fixture(scope="class")
    def models(self):
        tampered = {"sesam_tampered.sql": SESAM_TAMPERED, "schema.yml": SESAM_TESTS}
        return {**merge_models("sesam"), **tampered}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return sesam_config(sesam=SESAM_MERGE)

    def test_golden_records(self, project, spark):
        run_dbt(["deps"])
        run_dbt(["seed"])
        queries = []
        results = run_dbt(["run"], callbacks=[sql_recorder(queries)])
        assert len(results) == 4  # edges, components, merged, tampered copy
        id_checks = [q for q in queries if "having entity_id is null" in q]
        assert len(id_checks) == 1, "the ids are checked once per merge, by sesam_edges"
        got = rows(
            spark,
            f"select `_id`, `$ids`, `$deleted`, `_updated`, `$replaced`, entity "
            f"from {project.test_schema}.sesam order by `_updated`",
        )
        assert got == SESAM_GOLDEN
        typed = rows(
            spark, f"select f1, f2, f3 from {project.test_schema}.sesam order by `_updated`"
        )
        assert typed[0] == ([1, 1], ["x"], ["X"]), "property columns hold the strategy's values"
        assert typed[1] == ([2], None, None), "a property no member has is null"
        for _id, entity in rows(spark, f"select `_id`, entity from {project.test_schema}.sesam"):
            json.loads(entity)

        results = run_dbt(["test"], expect_pass=False)
        outcome = {
            r.node.name.removeprefix("dbt_merge_").split("_sesam")[0]
            + (" tampered" if "tampered" in r.node.name else ""): (str(r.status), r.failures)
            for r in results
        }
        assert outcome == {
            "identity_is_deterministic": ("pass", 0),
            "deleted_entities_not_merged": ("pass", 0),
            "unique": ("pass", 0),
            "not_null": ("pass", 0),
            "identity_is_deterministic tampered": ("fail", 2),
            "deleted_entities_not_merged tampered": ("fail", 1),
        }, outcome


# SPEC §1 strategy example: {"x":1}, {"y":[2,1]}, {"y":2,"z":[3,3]} merged in this order.
# `_k` is the join key: columns starting with _ are not properties.
STRATEGY_MODELS = {
    "strat_1.sql": "select 'e1' as _id, 'k' as _k, 1 as x",
    "strat_2.sql": "select 'e2' as _id, 'k' as _k, array(2, 1) as y",
    "strat_3.sql": "select 'e3' as _id, 'k' as _k, 2 as y, array(3, 3) as z",
    # null, empty and array operands
    "arr_a.sql": """
        select * from values
            ('a1', array('x', 'Y')), ('a2', array()), ('a3', null), ('a4', array('', null))
            as t(_id, tags)
    """,
    "arr_b.sql": """
        select * from values ('b1', 'y'), ('b2', ''), ('b3', null), ('b4', 'z') as t(_id, tag)
    """,
    # inputs that already carry $ids (merged output merged again)
    "pre_merged.sql": "select 'm1' as _id, array('p', 'q') as `$ids`, 'k1' as key",
    "plain.sql": "select 'r' as _id, 'k1' as key",
    # overlapping equality sets collapse into one set
    "set_a.sql": "select 'a1' as _id, 1 as x",
    "set_b.sql": "select 'b1' as _id, 9 as x",
    "set_c.sql": "select 'c1' as _id, 8 as y",
    "set_d.sql": "select 'd1' as _id, 1 as y",
    # another id column, and ids that are numbers
    "orders_x.sql": "select * from values (7, 'k'), (8, 'm') as t(order_no, ref)",
    "orders_y.sql": "select * from values (7, 'k') as t(order_no, ref)",
}
STRATEGY_DATASETS = ["strat_1 a", "strat_2 b", "strat_3 c"]
STRATEGY_SET = [["a._k", "b._k", "c._k"]]


class TestMergeSemantics(InstallsDbtMerge):
    """Strategies, identity first, null/empty/array operands, $ids passthrough, sets."""

    merges = {
        "strat_default": {"datasets": STRATEGY_DATASETS, "equality_sets": STRATEGY_SET},
        "strat_compact": {
            "datasets": STRATEGY_DATASETS,
            "equality_sets": STRATEGY_SET,
            "strategy": "compact",
        },
        "strat_list": {
            "datasets": STRATEGY_DATASETS,
            "equality_sets": STRATEGY_SET,
            "strategy": "list",
        },
        "strat_first": {
            "datasets": STRATEGY_DATASETS,
            "equality_sets": STRATEGY_SET,
            "identity": "first",
        },
        "arrays": {
            "datasets": ["arr_a a", "arr_b b"],
            "equality": [["eq", ["lower", "a.tags"], ["lower", "b.tag"]]],
            "strategy": "compact",
        },
        "passthrough": {
            "datasets": ["pre_merged m", "plain p"],
            "equality": [["eq", "m.key", "p.key"]],
        },
        "own_ids": {
            "datasets": ["orders_x x", "orders_y y"],
            "equality": [["eq", "x.ref", "y.ref"]],
            "id_column": "order_no",
        },
        "collapse": {
            "datasets": ["set_a a", "set_b b", "set_c c", "set_d d"],
            "equality_sets": [["a.x", "b.x", "c.y"], ["c.y", "d.y"]],
        },
    }

    @pytest.fixture(scope="class")
    def models(self):
        models = dict(STRATEGY_MODELS)
        for name in self.merges:
            models.update(merge_models(name))
        return models

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {**merge_vars(**self.merges), "models": {"+file_format": "iceberg"}}

    @pytest.fixture(scope="class")
    def built(self, project):
        run_dbt(["deps"])
        run_dbt(["run"])
        return project.test_schema

    def entities(self, spark, schema, merge):
        return rows(
            spark,
            f"select `_id`, `$ids`, `$deleted`, entity from {schema}.{merge} order by `_updated`",
        )

    def test_default_keeps_duplicates_and_flattens_lists(self, built, spark):
        assert self.entities(spark, built, "strat_default") == [
            ("0|e1|1|e2|2|e3", ["e1", "e2", "e3"], False, '{"x":1,"y":[2,1,2],"z":[3,3]}')
        ]
        typed = rows(spark, f"select x, y, z from {built}.strat_default")
        assert typed == [([1], [2, 1, 2], [3, 3])], "typed columns hold every value in order"

    def test_compact_removes_duplicates_and_unwraps_single_values(self, built, spark):
        assert self.entities(spark, built, "strat_compact") == [
            ("0|e1|1|e2|2|e3", ["e1", "e2", "e3"], False, '{"x":1,"y":[2,1],"z":3}')
        ]
        assert rows(spark, f"select y, z from {built}.strat_compact") == [([2, 1], [3])]

    def test_list_keeps_each_member(self, built, spark):
        expected = '{"$merged":[{"x":1},{"y":[2,1]},{"y":2,"z":[3,3]}]}'
        assert self.entities(spark, built, "strat_list") == [
            ("0|e1|1|e2|2|e3", ["e1", "e2", "e3"], False, expected)
        ]
        merged = rows(spark, f"select `$merged` from {built}.strat_list")
        assert merged == [(['{"x":1}', '{"y":[2,1]}', '{"y":2,"z":[3,3]}'],)]

    def test_identity_first_takes_the_first_member(self, built, spark):
        assert [r[0] for r in self.entities(spark, built, "strat_first")] == ["e1"]

    def test_null_empty_and_array_operands(self, built, spark):
        got = {r[0]: r[1] for r in self.entities(spark, built, "arrays")}
        assert got == {
            "0|a1|1|b1": ["a1", "b1"],  # an array matches on any element, after lower
            "0|a2": ["a2"],  # empty array: no edge
            "0|a3": ["a3"],  # null: no edge
            "0|a4": ["a4"],  # '' and null elements: no edge (b2 is '' too)
            "1|b2": ["b2"],
            "1|b3": ["b3"],
            "1|b4": ["b4"],
        }
        # every live record is a node of the graph (its edge to itself), a null or empty
        # array operand included: a null array must not drop the record's other edges
        nodes = rows(spark, f"select src from {built}.arrays_edges where src = dst order by 1")
        assert [r[0] for r in nodes] == [f"0|a{i}" for i in range(1, 5)] + [
            f"1|b{i}" for i in range(1, 5)
        ]

    def test_inputs_with_ids_pass_them_through(self, built, spark):
        assert self.entities(spark, built, "passthrough") == [
            ("0|m1|1|r", ["p", "q", "r"], False, '{"key":["k1","k1"]}')
        ]

    def test_id_column_names_the_ids(self, built, spark):
        assert self.entities(spark, built, "own_ids") == [
            ("0|7|1|7", ["7"], False, '{"ref":["k","k"]}'),  # $ids holds each id once
            ("0|8", ["8"], False, '{"ref":"m"}'),
        ], "order_no is the id (cast to string) and not a property"

    def test_overlapping_equality_sets_collapse(self, built, spark):
        ids = [r[0] for r in self.entities(spark, built, "collapse")]
        assert ids == ["0|a1|3|d1", "1|b1", "2|c1"], "a.x = d.y through the shared c.y"


BAD_INPUT_MODELS = {
    "people_a.sql": (
        "select * from values ('a1', 'x@a', 1), ('a2', 'y@a', 2) as t(_id, email, score)"
    ),
    "people_b.sql": "select * from values ('b1', 'x@a', 'high') as t(_id, email, score)",
    "people_c.sql": "select * from values ('c1', 'X@A', 5, false) as t(_id, email, score, gone)",
    "dup_ids.sql": "select * from values ('d1', 'x@a'), ('d1', 'z@a') as t(_id, email)",
    "null_ids.sql": "select * from values (cast(null as string), 'x@a') as t(_id, email)",
    "no_id.sql": "select 'x@a' as email",
    "same_id.sql": "select * from values ('a1', 'other@a') as t(_id, email)",
    "entity_prop.sql": "select 'e1' as _id, 'x@a' as email, 'x' as entity",
    "map_col.sql": "select 'm1' as _id, map('a', 1) as attrs",
}
VALID = {
    "datasets": ["people_a a", "people_c c"],
    "equality": [["eq", "a.email", ["lower", "c.email"]]],
}


def declare(**changes):
    decl = {**VALID, **changes}
    return json.dumps({"dbt_merge": {"entity_merges": {"bad": decl}}})


class TestBadDeclarations(InstallsDbtMerge):
    """Each mistake fails at compile time with the merge, the setting and the value."""

    @pytest.fixture(scope="class")
    def models(self):
        return {**BAD_INPUT_MODELS, **merge_models("bad")}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {
            **merge_vars(bad=VALID),
            "models": {"+file_format": "iceberg", "+materialized": "table"},
        }

    @pytest.fixture(scope="class")
    def ready(self, project, request):
        run_dbt(["deps"])
        run_dbt(["run", "--exclude", "bad_edges", "bad_components", "bad"])
        # the project parsed once for the compiles of fails(), with a declaration over
        # every input model: the edges model depends on each dataset a check names
        every_input = [f"{name[:-4]} x{i}" for i, name in enumerate(BAD_INPUT_MODELS)]
        request.cls.manifest = run_dbt(["parse", "--vars", declare(datasets=every_input)])
        request.cls.dirs = [
            "--project-dir",
            str(project.project_root),
            "--profiles-dir",
            str(project.profiles_dir),
        ]
        return project

    def fails(self, vars_json, *expected, command="compile", select="bad_edges"):
        """The command fails with every expected part in its messages.

        A compile reuses the manifest parsed once (``dbtRunner(manifest=...)``): with a
        --vars of its own, dbt would parse the project and the package's macros again
        (a full parse, about 2 s each of 30-odd declarations), and the macros that check
        a declaration raise the same errors when they compile a model as when they parse
        it. That manifest's edges model depends on every input model (see ``ready``), as
        the parse of each declaration would have made it depend on that declaration's.
        A run parses as users' runs do.
        """
        args = [command, "--select", select, "--vars", vars_json]
        if command == "compile":
            recorder = Recorder()
            result = dbtRunner(manifest=self.manifest, callbacks=[recorder]).invoke(
                [*args, *self.dirs]
            )
            assert not result.success, f"{args} compiled"
            output = "\n".join([*recorder.messages, str(result.exception or "")])
        else:
            try:  # errors found while parsing are raised, the others are logged
                _, output = run_dbt_and_capture(args, expect_pass=False)
            except Exception as exc:  # noqa: BLE001 - the message is what is checked
                output = str(exc)
        text = " ".join(output.split())
        for part in expected:
            assert part in text, f"{part!r} not in the error:\n{text[-2000:]}"
        return text

    @pytest.mark.parametrize(
        "changes, expected",
        [
            (
                {"datasets": ["people_a a", "people_c a"]},
                ["entity merge 'bad', setting 'datasets'", "duplicate alias a"],
            ),
            (
                {"equality": [["eq", "a.email", "z.email"]]},
                ["setting 'equality[0], operand \"z.email\"'", "unknown dataset alias z"],
            ),
            (
                {"equality": [["eq", "a.mail", "c.email"]]},
                ['equality[0], operand "a.mail"', "unknown column mail in dataset people_a"],
            ),
            (
                {"equality": [["eq", ["soundex2", "a.email"], "c.email"]]},
                ["unknown function soundex2", "Expected one of: lower, upper"],
            ),
            (
                {"equality": [["eq", "no_such_fn(a.email)", "c.email"]]},
                ['operand "no_such_fn(a.email)"', "using an unknown function: no_such_fn"],
            ),
            (
                {"equality": [["eq", "(select max(email) from people_a)", "c.email"]]},
                ["the expression is not a row expression: it is a subquery"],
            ),
            (
                {"equality": [["eq", "a.email; drop table people_a", "c.email"]]},
                ["the expression is not one expression: it holds several statements"],
            ),
            (
                {"equality": [["eq", "a.email in (select 1)", "c.email"]]},
                ["the expression is not a row expression: it contains a subquery"],
            ),
            (
                {"equality": [["eq", "lower(a.email", "c.email"]]},
                ["the expression is not valid Spark SQL"],
            ),
            (
                {"equality": [["eq", "a.email; drop table people_a", "c.email"]]},
                ["the expression is not one expression: it holds several statements"],
            ),
            (
                {"equality": [["eq", "drop table people_a", "c.email"]]},
                ["the expression is not an expression: it parses as a DROP statement"],
            ),
            (
                {"equality": [["eq", "concat(a.email, c.email)", "c.email"]]},
                ["exactly one dataset alias, this one uses 2: a, c"],
            ),
            ({"identity": "last"}, ["setting 'identity'", "invalid identity provided: last"]),
            (
                {"strategy": "union"},
                ["setting 'strategy'", "invalid merge strategy provided: union"],
            ),
            ({"max_merged": 0}, ["setting 'max_merged'", "is set to 0 but must be a positive"]),
            ({"max_merged": "many"}, ["setting 'max_merged'", "is set to many"]),
            ({"resolve": "fast"}, ["cannot use settings [resolve]"]),
            (
                {"change_columns": ["a"]},
                ["setting 'change_columns'", "expected a mapping of dataset alias to column"],
            ),
            (
                {"change_columns": {"z": "score"}},
                ["setting 'change_columns'", "names the alias z, which is not a dataset"],
            ),
            (
                {"change_columns": {"a": "updated_at"}},
                ["setting 'change_columns'", "dataset people_a (alias a) has no column updated_at"],
            ),
            (
                {"change_columns": {"a": "email"}},
                [
                    "setting 'change_columns'",
                    "column email of dataset people_a has type string; a change column must",
                ],
            ),
            (
                {
                    "datasets": ["people_a a", "people_b b"],
                    "equality": [["eq", "a.email", "b.email"]],
                },
                ["property score has type bigint in people_a but string in people_b"],
            ),
            (
                {"equality": [["eq", "a.score", "c.email"]]},
                ["operands of different types can never be equal: bigint (a.`score`) vs string"],
            ),
            (
                {"datasets": ["people_a a", "no_id n"], "equality": [["eq", "a.email", "n.email"]]},
                ["setting 'id_column'", "dataset no_id (alias n) has no id column _id"],
            ),
            (
                {
                    "datasets": ["people_a a", "entity_prop e"],
                    "equality": [["eq", "a.email", "e.email"]],
                },
                ["property entity of dataset entity_prop has the name of an output column"],
            ),
            (
                {
                    "datasets": ["people_a a", "map_col m"],
                    "equality": [["eq", "a.email", "m.attrs"]],
                },
                ["has type map<string,int>, which cannot be compared"],
            ),
            (
                {"deleted_column": "gone", "datasets": ["people_a a", "people_c c"]},
                [],
            ),
            ({"equality": [], "equality_sets": []}, ["setting 'equality': no equality rule"]),
            (
                {"equality": [["same", "a.email", "c.email"]]},
                ['expected ["eq", <operand>, <operand>]'],
            ),
        ],
        ids=lambda value: None,
    )
    def test_declaration_errors(self, ready, changes, expected):
        if not expected:  # a boolean deleted column that exists: valid, compiles
            run_dbt(["compile", "--select", "bad_edges", "--vars", declare(**changes)])
            return
        self.fails(declare(**changes), *expected)

    def test_unknown_merge(self, ready):
        self.fails(
            json.dumps({"dbt_merge": {"entity_merges": {"other": VALID}}}),
            "unknown entity merge 'bad'. Declared merges: [other]",
        )

    def test_unknown_dataset(self, ready):
        self.fails(
            declare(datasets=["people_a a", "nope n"], equality=[["eq", "a.email", "n.email"]]),
            "bad_edges",
            "nope",
            "was not found",
        )

    def test_null_and_duplicate_ids(self, ready):
        self.fails(
            declare(datasets=["people_a a", "dup_ids d"], equality=[["eq", "a.email", "d.email"]]),
            "setting 'id_column'",
            "dataset dup_ids (alias d) has the id d1 2 times",
        )
        self.fails(
            declare(datasets=["null_ids n", "people_a a"], equality=[["eq", "a.email", "n.email"]]),
            "dataset null_ids (alias n) has a null id (1 rows)",
        )

    def test_runtime_errors_leave_the_stored_table_alone(self, ready, spark):
        schema = ready.test_schema
        run_dbt(["run", "--select", "bad_edges", "bad_components", "bad", "--vars", declare()])
        before = rows(spark, f"select `_id`, entity from {schema}.bad order by `_id`")
        assert before == [
            ("0|a1|1|c1", '{"email":["x@a","X@A"],"gone":false,"score":[1,5]}'),
            ("0|a2", '{"email":"y@a","score":2}'),
        ]

        # identity first: a1 (people_a) and a1 (same_id) are two entities with one id
        first = declare(
            datasets=["people_a a", "same_id s"],
            equality=[["eq", "a.email", "s.email"]],
            identity="first",
        )
        self.fails(
            first,
            "setting 'identity': first gives the id a1 to 2 entities: 0|a1, 1|a1",
            command="run",
            select="bad_edges bad_components bad",
        )
        # max_merged: the a1/c1 component has 2 members
        self.fails(
            declare(max_merged=1),
            "setting 'max_merged': a component has 2 members, more than max_merged = 1",
            "0|a1, 1|c1",
            command="run",
            select="bad_edges bad_components bad",
        )
        after = rows(spark, f"select `_id`, entity from {schema}.bad order by `_id`")
        assert after == before, "a failed run keeps the stored golden records"


INCREMENTAL_MODELS = {
    "inc_a.sql": """
        {{ config(materialized='view') }}
        select * from values ('a1', 1) {% if var('with_a2', true) %}, ('a2', 7){% endif %}
            as t(_id, x)
    """,
    "inc_b.sql": "{{ config(materialized='view') }} select 'b1' as _id, {{ var('b_x', 2) }} as x",
    "inc_provenance.sql": """
        {{ config(materialized='incremental', incremental_strategy='append') }}
        {{ dbt_merge.entity_provenance('inc', ref('inc')) }}
    """,
}


class TestIncrementalMerge(InstallsDbtMerge):
    """Later runs emit only changes; ids that stop being valid come back $replaced."""

    @pytest.fixture(scope="class")
    def models(self):
        return {**INCREMENTAL_MODELS, **merge_models("inc", materialized="incremental")}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        merge = {"datasets": ["inc_a a", "inc_b b"], "equality_sets": [["a.x", "b.x"]]}
        return {**merge_vars(inc=merge), "models": {"+file_format": "iceberg"}}

    def state(self, spark, schema):
        return rows(
            spark,
            f"select `_id`, `$ids`, `$deleted`, `$replaced`, `_updated` "
            f"from {schema}.inc order by `_updated`, `_id`",
        )

    def test_merge_unmerge_and_replaced_ids(self, project, spark):
        schema = project.test_schema
        run_dbt(["deps"])

        run_dbt(["run"])
        assert self.state(spark, schema) == [
            ("0|a1", ["a1"], False, False, 0),
            ("0|a2", ["a2"], False, False, 1),
            ("1|b1", ["b1"], False, False, 2),
        ]

        # b1 now equals a1, a2 is gone from its source
        changed = json.dumps({"b_x": 1, "with_a2": False})
        run_dbt(["run", "--vars", changed])
        assert self.state(spark, schema) == [
            ("0|a1", ["a1"], True, True, 3),  # its member lives on in 0|a1|1|b1
            ("0|a1|1|b1", ["a1", "b1"], False, False, 4),
            ("0|a2", ["a2"], True, False, 5),  # all members gone: deleted, not replaced
            ("1|b1", ["b1"], True, True, 6),
        ]

        merged = self.state(spark, schema)
        run_dbt(["run", "--vars", changed])
        assert self.state(spark, schema) == merged, "no input change: nothing new is emitted"

        events = rows(
            spark,
            f"select event_type, child_id, parent_ids, child_updated, invocation_id, merge_name "
            f"from {schema}.inc_provenance order by child_updated",
        )
        assert [e[:4] for e in events] == [
            ("JOIN", "0|a1", ["a1"], 0),
            ("JOIN", "0|a2", ["a2"], 1),
            ("JOIN", "1|b1", ["b1"], 2),
            ("REPLACED", "0|a1", ["a1"], 3),
            ("JOIN", "0|a1|1|b1", ["a1", "b1"], 4),
            ("DELETE", "0|a2", ["a2"], 5),
            ("REPLACED", "1|b1", ["b1"], 6),
        ], "one event per emitted version, none for the run without changes"
        runs = [e[4] for e in events]
        assert len(set(runs[:3])) == 1 and len(set(runs[3:])) == 1 and runs[0] != runs[3]
        assert {e[5] for e in events} == {"inc"}

        # b1 stops matching: the merged id is replaced, the single ids come back
        run_dbt(["run", "--vars", json.dumps({"b_x": 2, "with_a2": False})])
        assert self.state(spark, schema) == [
            ("0|a2", ["a2"], True, False, 5),
            ("0|a1", ["a1"], False, False, 7),
            ("0|a1|1|b1", ["a1", "b1"], True, True, 8),
            ("1|b1", ["b1"], False, False, 9),
        ]


# 600 people in two systems; many share emails or phones, some transitively
DETERMINISM_MODELS = {
    "people_crm.sql": """
        select
            concat('c', lpad(cast(id as string), 4, '0')) as _id,
            array(concat('p', id % 250, '@x.example'), concat('q', id % 97, '@y.example'))
                as emails,
            cast(id % 311 as string) as phone,
            id % 41 = 0 as gone
        from range(600) as t(id)
    """,
    "people_billing.sql": """
        select
            concat('b', lpad(cast(id as string), 4, '0')) as _id,
            upper(concat('p', (id * 7) % 250, '@x.example')) as email,
            cast((id * 3) % 311 as string) as phone
        from range(400) as t(id)
    """,
    # the same rows in another order and other partitions
    "people_crm_shuffled.sql": (
        "select * from {{ ref('people_crm') }} distribute by rand(7) sort by rand(3)"
    ),
    "people_billing_shuffled.sql": (
        "select * from {{ ref('people_billing') }} distribute by rand(11)"
    ),
}


def people_merge(crm: str, billing: str) -> dict:
    return {
        "datasets": [f"{crm} c", f"{billing} b"],
        "equality_sets": [[["lower", "c.emails"], ["lower", "b.email"]], ["c.phone", "b.phone"]],
        "deleted_column": "gone",
        "strategy": "compact",
    }


class TestDeterminism(InstallsDbtMerge):
    """Same input in another order, partitioning, shuffle width and closure method:
    byte-identical _id, $ids and entity."""

    @pytest.fixture(scope="class")
    def models(self):
        models = {**DETERMINISM_MODELS, **merge_models("plain"), **merge_models("shuffled")}
        # the shuffled merge: distributed closure, 7 shuffle partitions
        models["shuffled_components.py"] = models["shuffled_components.py"].replace(
            "entity_components(dbt.ref('shuffled_edges'))",
            "entity_components(dbt.ref('shuffled_edges').repartition(5), max_driver_edges=0)",
        )
        models["shuffled.sql"] = (
            "{{ config(materialized='table', pre_hook='set spark.sql.shuffle.partitions=7',"
            " post_hook='set spark.sql.shuffle.partitions=1') }}\n"
            "{{ dbt_merge.merge_entities('shuffled', ref('shuffled_components')) }}"
        )
        return models

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {
            **merge_vars(
                plain=people_merge("people_crm", "people_billing"),
                shuffled=people_merge("people_crm_shuffled", "people_billing_shuffled"),
            ),
            "models": {"+file_format": "iceberg", "+materialized": "table"},
        }

    def test_byte_identical(self, project, spark):
        run_dbt(["deps"])
        run_dbt(["run"])
        schema = project.test_schema
        columns = "`_id`, `$ids`, `$deleted`, `_updated`, entity"
        plain = rows(spark, f"select {columns} from {schema}.plain order by `_updated`")
        shuffled = rows(spark, f"select {columns} from {schema}.shuffled order by `_updated`")
        assert plain == shuffled
        sizes = rows(spark, f"select max(size(`$ids`)), count(*) from {schema}.plain")
        assert sizes[0][0] > 10 and sizes[0][1] < 1000, "real merging happened"
        deleted = rows(spark, f"select count(*) from {schema}.plain where `$deleted`")
        assert deleted == [(15,)], "ids 0, 41, ... 574 are deleted and stay alone"


SESAM_C_FLAGGED = "_id,is_deleted,f3\nc1,false,X\nc2,true,Y\nc3,true,X\n"


def sesam_on(dataset_c: str, **settings) -> str:
    """--vars declaring the merge sesam with ``dataset_c`` as its dataset c."""
    merge = {**SESAM_MERGE, "datasets": ["sesam_a a", "sesam_b b", f"{dataset_c} c"], **settings}
    return json.dumps({"dbt_merge": {"entity_merges": {"sesam": merge}}})


class TestSesamDeletedOnIceberg(InstallsDbtMerge):
    """Sesam's default deleted column `_deleted` is a name Iceberg reserves for a metadata
    column, which Spark cannot read from an Iceberg table: a merge over such a dataset
    fails at compile time, naming the merge, the dataset and the column (issue #35)."""

    @pytest.fixture(scope="class")
    def seeds(self):
        return {
            "sesam_a.csv": SESAM_A,
            "sesam_b.csv": SESAM_B,
            "sesam_c.csv": SESAM_C,  # parquet: Sesam's _deleted as it is
            "sesam_c_iceberg.csv": SESAM_C,  # Iceberg, with a _deleted column
            "sesam_c_flagged.csv": SESAM_C_FLAGGED,  # Iceberg, deletes in is_deleted
        }

    @pytest.fixture(scope="class")
    def models(self):
        return merge_models("sesam")

    @pytest.fixture(scope="class")
    def project_config_update(self):
        boolean = {"_deleted": "boolean", "is_deleted": "boolean"}
        return {
            **merge_vars(sesam=SESAM_MERGE),
            "seeds": {
                "+file_format": "iceberg",
                "+column_types": boolean,
                "test": {"sesam_c": {"+file_format": "parquet"}},
            },
            "models": {"+file_format": "iceberg"},
        }

    def golden(self, spark, schema):
        return rows(spark, f"select `_id`, `$deleted`, entity from {schema}.sesam order by `_id`")

    def test_iceberg_dataset_with_deleted_fails_at_compile_time(self, project, spark):
        schema = project.test_schema
        run_dbt(["deps"])
        run_dbt(["seed"])
        provider = rows(spark, f"describe table extended {schema}.sesam_c_iceberg")
        assert ("Provider", "iceberg", "") in provider, "a real Iceberg dataset"
        run_dbt(["run"])  # the merge over the parquet dataset
        stored = self.golden(spark, schema)
        assert ("2|c2", True, '{"f3":"Y"}') in stored

        _, output = run_dbt_and_capture(
            ["run", "--vars", sesam_on("sesam_c_iceberg")], expect_pass=False
        )
        text = " ".join(output.split())
        assert "Compilation Error in model sesam_edges" in text, text[-2000:]
        assert (
            "dbt_merge: entity merge 'sesam', setting 'deleted_column': dataset sesam_c_iceberg "
            "(alias c) is an Iceberg table with a column _deleted, a name Iceberg reserves for "
            "its metadata column, so Spark cannot read it. Either set deleted_column: <another "
            "name> in the merge and give the column that name in sesam_c_iceberg, or build "
            "sesam_c_iceberg in another file format (file_format: parquet or delta)"
        ) in text
        assert "ValidationException" not in text, "not Iceberg's own error from the closure"
        assert self.golden(spark, schema) == stored, "the stored golden records are kept"

    def test_another_deleted_column_on_iceberg_merges(self, project, spark):
        schema = project.test_schema
        flagged = sesam_on("sesam_c_flagged", deleted_column="is_deleted")
        run_dbt(["run", "--full-refresh", "--vars", flagged])
        assert self.golden(spark, schema) == [
            ("0|a1|1|b1|2|c1", False, '{"f1":[1,1],"f2":"x","f3":"X"}'),
            ("0|a2", False, '{"f1":2}'),
            ("1|b2", False, '{"f1":3}'),
            ("2|c2", True, '{"f3":"Y"}'),
            ("2|c3", True, '{"f3":"X"}'),
        ], "deleted_column: is_deleted on the Iceberg dataset: Sesam's example result"
