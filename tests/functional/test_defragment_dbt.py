"""Defragment in a dbt Python model, with NiFi's two fragment numberings (issue #35):
MergeContent's 1..count (the default) and MergeRecord's 0..count-1
(``fragment_index_base=0``)."""

from __future__ import annotations

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture, write_file

from tests.functional.entity_merge_fixtures import InstallsDbtMerge

# (fragment_id, upload_id, fragment_count, fragment_index, seconds after 10:00)
FRAGMENTS_SQL = """
{{ config(materialized='view') }}
select
    fragment_id,
    upload_id,
    cast(fragment_count as int) as fragment_count,
    cast(fragment_index as int) as fragment_index,
    timestamp'2026-11-01 10:00:00' + make_interval(0, 0, 0, 0, 0, 0, seconds) as arrived_at
from values
    -- numbered 0..2, as NiFi's record processors write them for MergeRecord
    ('z2', 'zero', 3, 2, 1), ('z0', 'zero', 3, 0, 2), ('z1', 'zero', 3, 1, 3),
    -- numbered 1..3, as MergeContent's split processors write them
    ('o1', 'one', 3, 1, 4), ('o2', 'one', 3, 2, 5), ('o3', 'one', 3, 3, 6)
    as t(fragment_id, upload_id, fragment_count, fragment_index, seconds)
"""

# BASE is replaced by the test; the clock is fixed so statuses do not depend on the day
REASSEMBLED_PY = """
from datetime import datetime

from dbt_merge.bin_packing import defragment


def model(dbt, session):
    dbt.config(
        materialized="incremental",
        incremental_strategy="merge",
        unique_key="bin_id",
        file_format="iceberg",
    )
    return defragment(
        dbt.ref("fragments"),
        id_column="fragment_id",
        arrival_column="arrived_at",
        identifier_column="upload_id",
        count_column="fragment_count",
        index_column="fragment_index",
        now=datetime(2026, 11, 1, 10, 30),
        previous=session.table(str(dbt.this)) if dbt.is_incremental else None,
        model_name="reassembled",
        BASE
    )
"""


def reassembled(base: str) -> str:
    return REASSEMBLED_PY.replace("BASE", base)


class TestDefragmentIndexBase(InstallsDbtMerge):
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "fragments.sql": FRAGMENTS_SQL,
            "reassembled.py": reassembled("fragment_index_base=0,"),
            "reassembled_default.py": reassembled("").replace(
                'model_name="reassembled"', 'model_name="reassembled_default"'
            ),
        }

    def sets(self, project, name):
        rows = project.run_sql(
            "select fragment_identifier, members, member_indexes, status,"
            f" coalesce(merge_reason, failure_reason) from {project.test_schema}.{name}"
            " order by fragment_identifier, members",
            fetch="all",
        )
        return [(r[0], list(r[1]), list(r[2]), r[3], r[4]) for r in rows]

    def test_each_numbering_merges_with_its_base(self, project):
        run_dbt(["deps"])
        run_dbt(["run"])
        assert self.sets(project, "reassembled") == [
            ("one", ["o1", "o2"], [1, 2], "pending", None),
            ("one", ["o3"], [3], "failed", "FRAGMENT_INDEX_OUT_OF_RANGE"),
            ("zero", ["z0", "z1", "z2"], [0, 1, 2], "merged", "MAX_ENTRIES_THRESHOLD_REACHED"),
        ], "base 0: the 0..count-1 set merges in index order; 1..count's 3 is out of range"
        assert self.sets(project, "reassembled_default") == [
            ("one", ["o1", "o2", "o3"], [1, 2, 3], "merged", "MAX_ENTRIES_THRESHOLD_REACHED"),
            ("zero", ["z0"], [0], "failed", "INVALID_FRAGMENT_INDEX"),
            ("zero", ["z1", "z2"], [1, 2], "pending", None),
        ], "the default base 1 (MergeContent): the 0-based set does not merge"

    @pytest.mark.parametrize("bad", ["2", "'0'", "True"])
    def test_a_bad_base_fails_the_model_before_it_writes(self, project, bad):
        before = self.sets(project, "reassembled")
        assert before, "the table of the first test"
        write_file(
            reassembled(f"fragment_index_base={bad},"),
            project.project_root,
            "models",
            "reassembled.py",
        )
        try:
            _, output = run_dbt_and_capture(["run", "--select", "reassembled"], expect_pass=False)
        finally:
            write_file(
                reassembled("fragment_index_base=0,"),
                project.project_root,
                "models",
                "reassembled.py",
            )
        text = " ".join(output.split())
        assert (
            "dbt_merge defragment in model reassembled, setting 'fragment_index_base': must be "
            "1 (indexes 1..count, NiFi MergeContent) or 0 (indexes 0..count-1, NiFi "
            f"MergeRecord) (got {bad})"
        ) in text, text[-1500:]
        assert self.sets(project, "reassembled") == before, "the stored sets are untouched"
