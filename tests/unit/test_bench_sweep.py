"""bench/sweep.py turns each benchmark script's rows into curves and fits their slopes.

The sweep itself takes about 20 minutes and is not part of the suite; these tests pin
the parts that decide what the README's plots and table show: which row field goes
to which series, that a capped baseline is drawn at the cap and left out of the
slope, and the least-squares slope on log-log axes.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

SWEEP = Path(__file__).resolve().parents[2] / "bench" / "sweep.py"
spec = importlib.util.spec_from_file_location("bench_sweep", SWEEP)
sweep = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = sweep  # dataclasses look their module up
spec.loader.exec_module(sweep)


def test_slope_of_a_power_law_is_its_exponent():
    points = [sweep.point(n, 0.002 * n**1.5) for n in (1_000, 10_000, 100_000)]
    assert sweep.slope(points) == 1.5


def test_slope_leaves_out_points_that_hit_the_cap():
    points = [
        sweep.point(1_000, 1.0),
        sweep.point(10_000, 10.0),
        sweep.point(100_000, None, cap=120.0),
    ]
    assert points[2] == {"size": 100_000, "seconds": 120.0, "finished": False}
    assert sweep.slope(points) == 1.0


def test_slope_needs_two_finished_points():
    assert sweep.slope([sweep.point(1_000, 1.0), sweep.point(2_000, None, cap=5.0)]) is None


def test_closure_rows_become_default_distributed_and_capped_naive_curves():
    rows = [
        {"edges": 1000, "method": "dbt_merge:driver", "seconds": 1.0, "shuffle_bytes": 512},
        {"edges": 1000, "method": "distributed:distributed", "seconds": 3.0},
        {"edges": 1000, "method": "naive", "seconds": 2.0, "finished": True},
        {"edges": 4000, "method": "dbt_merge:distributed", "seconds": 2.0},
        {"edges": 4000, "method": "distributed:distributed", "seconds": 6.0},
        {"edges": 4000, "method": "naive", "seconds": 130.2, "finished": False},
        {"edges": 4000, "method": "large-star/small-star", "seconds": 9.0, "finished": True},
    ]
    series = sweep.curves("closure", rows, cap=120.0)
    default = series["dbt_merge, default"]
    assert [p["method"] for p in default["points"]] == ["driver", "distributed"]
    assert default["points"][0]["shuffle_bytes"] == 512
    assert "shuffle_bytes" not in default["points"][1]  # not measured: not made up
    assert default["slope"] == 0.5 and not default["baseline"]
    naive = series["naive min-label propagation"]
    assert naive["baseline"]
    assert naive["points"][1] == {"size": 4000, "seconds": 120.0, "finished": False}
    assert naive["slope"] is None
    lss = series["large-star/small-star (GraphFrames, Splink)"]
    assert lss["baseline"] and lss["points"] == [{"size": 4000, "seconds": 9.0, "finished": True}]


@pytest.mark.parametrize(
    ("name", "row", "expected"),
    [
        (
            "entity_merge",
            {"records": 10, "dbt_merge": {"total_s": 3.0}, "naive": {"total_s": None}},
            {"dbt_merge: dbt run": 3.0, "hand-written Spark job": 60.0},
        ),
        (
            "upsert",
            {
                "table_rows": 10,
                "upsert_s": 2.2,
                "upsert_mor_s": 0.9,
                "hudi_cow_s": 5.0,
                "hudi_mor_s": 4.0,
                "merge_same_work_s": 2.5,
                "merge_prededuplicated_s": 2.0,
            },
            {
                "upsert, raw batch": 2.2,
                "upsert, merge_on_read table": 0.9,
                "Hudi 1.0 upsert, copy-on-write": 5.0,
                "Hudi 1.0 upsert, merge-on-read": 4.0,
                "dbt-spark merge, same work (dedupe, ordering, deletes)": 2.5,
                "dbt-spark merge, deduplicated batch": 2.0,
            },
        ),
        (
            "upsert",  # --no-hudi: no Hudi curves
            {
                "table_rows": 10,
                "upsert_s": 2.2,
                "upsert_mor_s": 0.9,
                "hudi_cow_s": None,
                "hudi_mor_s": None,
                "merge_same_work_s": 2.5,
                "merge_prededuplicated_s": 2.0,
            },
            {
                "upsert, raw batch": 2.2,
                "upsert, merge_on_read table": 0.9,
                "dbt-spark merge, same work (dedupe, ordering, deletes)": 2.5,
                "dbt-spark merge, deduplicated batch": 2.0,
            },
        ),
        (
            "bin_packing",
            {
                "items": 10,
                "streaming": {"seconds": 1.5},
                "offline": {"seconds": 0.5},
                "naive": {"seconds": 9.0},
            },
            {
                "bin_pack (streaming)": 1.5,
                "plan_offline (first fit decreasing)": 0.5,
                "driver first fit": 9.0,
            },
        ),
    ],
)
def test_each_benchmark_maps_its_rows_to_series(name, row, expected):
    series = sweep.curves(name, [row], cap=60.0)
    assert {label: data["points"][0]["seconds"] for label, data in series.items()} == expected
    baselines = {label for label, data in series.items() if data["baseline"]}
    dbt_merge = ("dbt_merge", "upsert, ", "bin_pack ", "plan_offline ")
    assert baselines == {label for label in expected if not label.startswith(dbt_merge)}


def test_every_benchmark_has_three_sizes_and_larger_ones_behind_the_flag():
    for bench in sweep.BENCHMARKS.values():
        assert len(bench.sizes) >= 3 and list(bench.sizes) == sorted(bench.sizes)
        assert bench.large and min(bench.large) > max(bench.sizes)
        assert (SWEEP.parent / bench.script).exists()
        assert math.log10(bench.sizes[-1] / bench.sizes[0]) >= 1  # a decade at least
