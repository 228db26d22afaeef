"""The Spark entry points a dbt Python model calls: ``bin_pack``, ``plan_offline``,
``offline_report`` and ``defragment``. Each checks its inputs before any Spark job,
then runs a pure-Python engine per group in ``applyInPandas`` tasks.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from dbt_merge.bin_packing.checks import _check_items, _check_rows, _check_stream, _size_rows
from dbt_merge.bin_packing.defragmenter import DefragBin, Defragmenter
from dbt_merge.bin_packing.frames import (
    BIN_SCHEMA,
    DEFRAGMENT_SCHEMA,
    OFFLINE_SCHEMA,
    _frame,
    _rows,
)
from dbt_merge.bin_packing.offline import plan_offline_items
from dbt_merge.bin_packing.packer import Bin, BinPacker
from dbt_merge.bin_packing.settings import (
    FRAGMENT_INDEX_BASE_DEFAULT,
    MAX_BIN_AGE_DEFAULT,
    MAX_BINS_DEFAULT,
    MAX_BINS_SCOPE_DEFAULT,
    MAX_BYTES_DEFAULT,
    MAX_ENTRIES_DEFAULT,
    MIN_BYTES_DEFAULT,
    MIN_ENTRIES_DEFAULT,
    OFFLINE_STRATEGY_DEFAULT,
    PENDING,
    BinPackingSettings,
    _validate_fragment_index_base,
    _validate_max_bin_age,
    validate_offline,
)
from dbt_merge.bin_packing.stream import StreamEngine
from dbt_merge.core.spark import materialize

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)


def bin_pack(
    items: DataFrame,
    *,
    id_column: str,
    size_column: str,
    arrival_column: str,
    correlation_column: str | None = None,
    schema_column: str | None = None,
    min_entries: int = MIN_ENTRIES_DEFAULT,
    max_entries: int = MAX_ENTRIES_DEFAULT,
    min_bytes: int = MIN_BYTES_DEFAULT,
    max_bytes: int | None = MAX_BYTES_DEFAULT,
    max_bin_age: timedelta | None = MAX_BIN_AGE_DEFAULT,
    max_bins: int | None = MAX_BINS_DEFAULT,
    max_bins_scope: str = MAX_BINS_SCOPE_DEFAULT,
    now: datetime | None = None,
    previous: DataFrame | None = None,
    model_name: str = "bin_packing",
) -> DataFrame:
    """Streaming bin packing of an items relation; the rows to merge by ``bin_id``.

    Items already a member of a bin in ``previous`` are skipped (a left anti join
    on the exploded members), and the pending bins of ``previous`` are reopened
    first, so re-running never emits an item twice. Groups are packed in parallel,
    one ``applyInPandas`` call per (schema, correlation) group, except with
    ``max_bins`` and ``max_bins_scope='global'``: then the groups compete for the
    open bins and are packed together in a single task.

    Args:
        items: one row per item.
        id_column: item id (cast to string; also the tie-breaker for equal arrivals).
        size_column: size in bytes, an integer column, no nulls, >= 0.
        arrival_column: arrival time (timestamp or date), no nulls.
        correlation_column: items are binned only with items of equal value.
        schema_column: likewise (e.g. a schema fingerprint).
        min_entries, max_entries, min_bytes, max_bytes, max_bin_age, max_bins,
            max_bins_scope: see ``BinPackingSettings``.
        now: the run's clock (default: the current time); naive = local time.
        previous: the model's own table as a DataFrame
            (``session.table(str(dbt.this))``) on incremental runs, else None.
        model_name: named in error messages.

    Returns:
        ``BIN_SCHEMA`` rows: every bin merged in this run and every new or grown
        pending bin; merge them into the table by ``bin_id``.

    Raises:
        BinPackingError: bad settings, missing or mistyped columns, null ids, sizes
            or arrivals, negative sizes (checked before the packing runs).

    Examples:
        >>> def model(dbt, session):
        ...     dbt.config(materialized="incremental", unique_key="bin_id")
        ...     return bin_pack(dbt.ref("files"), id_column="file_id",
        ...                     size_column="size_bytes", arrival_column="arrived_at",
        ...                     max_bytes=128 * 2**20,
        ...                     previous=session.table(str(dbt.this))
        ...                     if dbt.is_incremental else None)
    """
    what = "bin packing"
    settings = BinPackingSettings(
        min_entries=min_entries,
        max_entries=max_entries,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        max_bin_age=max_bin_age,
        max_bins=max_bins,
        max_bins_scope=max_bins_scope,
    )
    settings.validate(model_name)
    now_us, max_age = _check_stream(
        items,
        model_name,
        what,
        {
            "id_column": id_column,
            "size_column": size_column,
            "arrival_column": arrival_column,
            "correlation_column": correlation_column,
            "schema_column": schema_column,
        },
        integers=["size_column"],
        more_rows=_size_rows(size_column),
        previous=previous,
        schema=BIN_SCHEMA,
        now=now,
        max_bin_age=max_bin_age,
    )
    new = items.select(  # an ``Item`` per row
        F.col(id_column).cast("string").alias("_id"),
        F.col(size_column).cast("long").alias("_size"),
        _arrival_micros(arrival_column).alias("_arrival"),
        _group_key(correlation_column).alias("_corr"),
        _group_key(schema_column).alias("_schema"),
    )
    coupled = max_bins is not None and max_bins_scope == "global"
    logger.info(
        "bin_pack %s: %s", model_name, "one task (global max_bins)" if coupled else "per group"
    )
    return _stream(
        new,
        previous,
        BIN_SCHEMA,
        keys=[] if coupled else ["_schema", "_corr"],
        stored=[
            F.col("schema_value").alias("_schema"),
            F.col("correlation_value").alias("_corr"),
            F.col("bytes").cast("long"),
            F.col("entries").cast("long"),
        ],
        start=functools.partial(BinPacker, settings, model_name=model_name, max_age=max_age),
        resume=_pending_bins,
        now_us=now_us,
    )


def _pending_bins(pdf: pd.DataFrame) -> list[Bin]:
    """A ``bin_pack`` task's stored pending bins, in creation order (the opening time,
    then the first member)."""
    rows = _rows(pdf, ["_opened", "members", "bin_id", "_schema", "_corr", "bytes", "entries"])
    rows.sort(key=lambda r: (r[0], r[1][0]))
    return [
        Bin(bin_id, schema, corr, opened, [str(m) for m in members], size, entries)
        for opened, members, bin_id, schema, corr, size, entries in rows
    ]


def plan_offline(
    items: DataFrame,
    *,
    id_column: str,
    size_column: str,
    correlation_column: str | None = None,
    schema_column: str | None = None,
    max_bytes: int,
    max_entries: int | None = None,
    strategy: str = OFFLINE_STRATEGY_DEFAULT,
    model_name: str = "bin_packing",
) -> DataFrame:
    """Offline plan of a known set, one ``applyInPandas`` call per group.

    Args:
        items: one row per item (e.g. a table's ``files`` metadata table).
        id_column: item id (cast to string).
        size_column: size in bytes, an integer column, no nulls, >= 0.
        correlation_column: items are binned only with items of equal value.
        schema_column: likewise.
        max_bytes: capacity of a bin (required).
        max_entries: items per bin at most (None: no limit).
        strategy: ``'first_fit_decreasing'`` (default) or ``'best_fit_decreasing'``.
        model_name: named in error messages.

    Returns:
        ``OFFLINE_SCHEMA`` rows, one per planned bin; see ``offline_report``.
    """
    what = "bin packing"
    validate_offline(max_bytes, max_entries, strategy, model_name)
    _check_items(
        items,
        model_name,
        what,
        {
            "id_column": id_column,
            "size_column": size_column,
            "correlation_column": correlation_column,
            "schema_column": schema_column,
        },
        integers=["size_column"],
    )
    _check_rows(
        items,
        model_name,
        what,
        [
            ("id_column", id_column, F.col(id_column).isNull(), "have a null id"),
            *_size_rows(size_column),
        ],
    )
    frame = items.select(
        F.col(id_column).cast("string").alias("_id"),
        F.col(size_column).cast("long").alias("_size"),
        _group_key(schema_column).alias("_schema"),
        _group_key(correlation_column).alias("_corr"),
    )
    run = functools.partial(_plan_frame, max_bytes, max_entries, strategy, model_name)
    return frame.groupBy("_schema", "_corr").applyInPandas(run, OFFLINE_SCHEMA)


def _plan_frame(
    max_bytes: int, max_entries: int | None, strategy: str, model_name: str, pdf: pd.DataFrame
) -> pd.DataFrame:
    """One group of ``plan_offline``: pandas in, ``OFFLINE_SCHEMA`` pandas out."""

    plan = plan_offline_items(
        _rows(pdf, ["_id", "_size", "_corr", "_schema"]),
        max_bytes=max_bytes,
        max_entries=max_entries,
        strategy=strategy,
        model_name=model_name,
    )
    bins = plan.bins
    return _frame([b.as_dict() for b in bins], OFFLINE_SCHEMA)


def offline_report(
    bins: DataFrame,
    *,
    max_bytes: int,
    max_entries: int | None = None,
    model_name: str = "bin_packing",
) -> DataFrame:
    """Bins against the lower bound, per group and in total, from ``plan_offline``'s bins.

    Args:
        bins: the output of ``plan_offline`` (same ``max_bytes`` / ``max_entries``).
        max_bytes: as given to ``plan_offline``.
        max_entries: as given to ``plan_offline``.
        model_name: named in error messages.

    Returns:
        ``OFFLINE_REPORT_SCHEMA`` rows: one per group (``level='group'``) and one
        ``level='total'`` row (sums; groups never share a bin). The lower bound is
        ``GroupReport``'s.
    """
    validate_offline(max_bytes, max_entries, OFFLINE_STRATEGY_DEFAULT, model_name)
    normal = ~F.col("is_oversized")
    per_group = bins.groupBy("schema_value", "correlation_value").agg(
        F.sum("entries").alias("items"),
        F.sum("bytes").alias("bytes"),
        F.count(F.when(F.col("is_oversized"), 1)).alias("oversized"),
        F.count(F.lit(1)).alias("bins"),
        F.coalesce(F.sum(F.when(normal, F.col("bytes"))), F.lit(0)).alias("_normal_bytes"),
        F.coalesce(F.sum(F.when(normal, F.col("entries"))), F.lit(0)).alias("_normal_items"),
    )
    bound = F.greatest(
        F.lit(1),
        F.expr(f"(_normal_bytes + {max_bytes - 1}) div {max_bytes}"),
        *(
            []
            if max_entries is None
            else [F.expr(f"(_normal_items + {max_entries - 1}) div {max_entries}")]
        ),
    )
    lower = F.col("oversized") + F.when(F.col("_normal_items") > 0, bound).otherwise(F.lit(0))
    groups = per_group.select(
        F.lit("group").alias("level"),
        "schema_value",
        "correlation_value",
        F.col("items").cast("long"),
        F.col("bytes").cast("long"),
        F.col("oversized").cast("long"),
        F.col("bins").cast("long"),
        lower.cast("long").alias("lower_bound"),
    )
    total = groups.agg(
        F.lit("total").alias("level"),
        F.lit(None).cast("string").alias("schema_value"),
        F.lit(None).cast("string").alias("correlation_value"),
        *[
            F.coalesce(F.sum(c), F.lit(0)).cast("long").alias(c)
            for c in ("items", "bytes", "oversized", "bins", "lower_bound")
        ],
    )
    both = groups.unionByName(total)
    return both.withColumn(
        "bins_over_lower_bound",
        F.when(F.col("lower_bound") > 0, F.col("bins") / F.col("lower_bound")),
    )


def defragment(
    items: DataFrame,
    *,
    id_column: str,
    arrival_column: str,
    identifier_column: str = "fragment_identifier",
    count_column: str = "fragment_count",
    index_column: str = "fragment_index",
    max_bin_age: timedelta | None = None,
    now: datetime | None = None,
    previous: DataFrame | None = None,
    model_name: str = "defragment",
    size_column: str | None = None,
    fragment_index_base: int = FRAGMENT_INDEX_BASE_DEFAULT,
) -> DataFrame:
    """Defragment an items relation, one ``applyInPandas`` call per identifier.

    Semantics as ``Defragmenter``. Fragments already a member of a set in
    ``previous`` are skipped and its pending sets are resumed.

    Args:
        items: one row per fragment.
        id_column: fragment id (cast to string), no nulls.
        arrival_column: arrival time (timestamp or date), no nulls.
        identifier_column: NiFi's ``fragment.identifier`` (cast to string).
        count_column: ``fragment.count``, an integer column (nulls allowed).
        index_column: ``fragment.index``, an integer column, numbered from
            ``fragment_index_base``.
        max_bin_age: incomplete sets older than this at ``now`` fail.
        now: the run's clock (default: the current time); naive = local time.
        previous: the model's own table as a DataFrame
            (``session.table(str(dbt.this))``) on incremental runs, else None.
        model_name: named in error messages.
        size_column: optional fragment size in bytes (an integer column); adds a
            ``bytes`` column after ``entries``: the sum over the set's members.
        fragment_index_base: the first index of a set: 1 (default; ``1..count`` as
            NiFi MergeContent's split processors write them) or 0 (``0..count-1``, as
            NiFi's record processors write them for MergeRecord). An index outside
            the range fails its fragment (``INVALID_FRAGMENT_INDEX`` below it,
            ``FRAGMENT_INDEX_OUT_OF_RANGE`` above it).

    Returns:
        ``DEFRAGMENT_SCHEMA`` rows: sets merged or failed in this run (a failure is
        a row with ``status='failed'``, its ``failure_reason`` and its members) and
        new or grown pending sets; merge them into the table by ``bin_id``.
    """
    what = "defragment"
    _validate_max_bin_age(max_bin_age, model_name, what)
    _validate_fragment_index_base(fragment_index_base, model_name)
    sized = ["size_column"] if size_column is not None else []
    now_us, max_age = _check_stream(
        items,
        model_name,
        what,
        {
            "id_column": id_column,
            "arrival_column": arrival_column,
            "identifier_column": identifier_column,
            "count_column": count_column,
            "index_column": index_column,
            "size_column": size_column,
        },
        integers=["count_column", "index_column", *sized],
        previous=previous,
        schema=DEFRAGMENT_SCHEMA,
        now=now,
        max_bin_age=max_bin_age,
    )
    new = items.select(  # a ``Fragment`` per row
        F.col(id_column).cast("string").alias("_id"),
        F.col(identifier_column).cast("string").alias("_identifier"),
        F.col(count_column).cast("long").alias("_count"),
        F.col(index_column).cast("long").alias("_index"),
        _arrival_micros(arrival_column).alias("_arrival"),
    )
    sets = _stream(
        new,
        previous,
        DEFRAGMENT_SCHEMA,
        keys=["_identifier"],
        stored=[
            F.col("fragment_identifier").alias("_identifier"),
            F.col("fragment_count").cast("long"),
            F.col("member_indexes").cast("array<long>"),
        ],
        start=functools.partial(
            Defragmenter,
            max_bin_age=None,
            model_name=model_name,
            max_age=max_age,
            fragment_index_base=fragment_index_base,
        ),
        resume=_pending_sets,
        now_us=now_us,
        ints=["_count", "_index"],
    )
    if size_column is None:
        return sets
    # the sets are read twice below: compute them once
    sets = materialize(sets)
    # members of resumed sets came in earlier runs: sizes come from all of ``items``
    sizes = items.select(
        F.col(id_column).cast("string").alias("_member"),
        F.col(size_column).cast("long").alias("_size"),
    )
    totals = (
        sets.select("bin_id", F.explode("members").alias("_member"))
        .join(sizes, "_member")
        .groupBy("bin_id")
        .agg(F.sum("_size").alias("bytes"))
    )
    columns = [F.col(f"sets.{name}") for name in DEFRAGMENT_SCHEMA.fieldNames()]
    at = DEFRAGMENT_SCHEMA.fieldNames().index("entries") + 1
    columns.insert(at, F.coalesce(F.col("totals.bytes"), F.lit(0)).cast("long").alias("bytes"))
    return sets.alias("sets").join(totals.alias("totals"), "bin_id", "left").select(*columns)


def _pending_sets(pdf: pd.DataFrame) -> list[DefragBin]:
    """A ``defragment`` task's stored pending sets, in creation order (the opening
    time, then the bin id)."""
    columns = ["_opened", "bin_id", "_identifier", "fragment_count", "members", "member_indexes"]
    rows = _rows(pdf, columns, ints=["fragment_count"])
    rows.sort(key=lambda r: (r[0], r[1]))
    return [
        DefragBin(
            bin_id, identifier, count, [str(m) for m in members], [int(i) for i in indexes], opened
        )
        for opened, bin_id, identifier, count, members, indexes in rows
    ]


# ---------------------------------------------------------------------------------------
# what bin_pack and defragment share


def _stream(
    new: DataFrame,
    previous: DataFrame | None,
    schema: StructType,
    *,
    keys: Sequence[str],
    stored: Sequence[Column],
    start: Callable[..., StreamEngine],
    resume: Callable[[pd.DataFrame], list],
    now_us: int,
    ints: Sequence[str] = (),
) -> DataFrame:
    """A streaming engine over Spark: the rows to merge into ``previous`` by ``bin_id``.

    Items already a member of a bin in ``previous`` are skipped (a left anti join on
    the exploded members) and its pending bins are resumed, so re-running never emits
    an item twice. Items and pending bins are cogrouped by ``keys`` and each group is
    one ``applyInPandas`` task running one engine (``_stream_task``).

    Args:
        new: the run's items, one column per field of the engine's item tuple, in its
            order (``_id`` first).
        previous: the stored table (``schema`` rows), or None on the first run.
        schema: the output rows.
        keys: the columns, in ``new`` and in the resumed bins, of the groups packed
            apart; none: one task packs all.
        stored: columns of a stored pending bin that ``resume`` reads, besides
            ``bin_id``, ``members`` and ``_opened`` (epoch microseconds).
        start: the engine, given ``pending=`` (the resumed bins).
        resume: a task's stored pending bins, as the engine takes them.
        now_us: the run's clock.
        ints: item columns of integers that may be null.
    """
    columns = new.columns
    resumed = ["bin_id", "members", F.expr("unix_micros(opened_at)").alias("_opened"), *stored]
    if previous is None:
        pending = new.sparkSession.createDataFrame([], schema).select(*resumed)
    else:
        consumed = previous.select(F.explode("members").alias("_id"))
        new = new.join(consumed, "_id", "left_anti")
        pending = previous.where(F.col("status") == PENDING).select(*resumed)
    if not keys:
        new, pending = new.withColumn("_task", F.lit(0)), pending.withColumn("_task", F.lit(0))
        keys = ["_task"]
    task = functools.partial(_stream_task, start, resume, columns, ints, now_us, schema)
    return new.groupBy(*keys).cogroup(pending.groupBy(*keys)).applyInPandas(task, schema)


def _stream_task(
    start: Callable[..., StreamEngine],
    resume: Callable[[pd.DataFrame], list],
    columns: Sequence[str],
    ints: Sequence[str],
    now_us: int,
    schema: StructType,
    items_pdf: pd.DataFrame,
    pending_pdf: pd.DataFrame,
) -> pd.DataFrame:
    """One task of ``_stream``: pandas in, ``schema`` pandas out (the bins merged in
    this run and the new or grown pending bins)."""
    engine = start(pending=resume(pending_pdf))
    result = engine.run(_rows(items_pdf, columns, ints), now_us)
    return _frame([b.as_dict() for b in result.changed], schema)


def _group_key(column: str | None) -> Column:
    """A group column as a string (null if the setting is not used)."""
    return F.lit(None).cast("string") if column is None else F.col(column).cast("string")


def _arrival_micros(column: str) -> Column:
    """An arrival column (timestamp or date) in epoch microseconds."""
    return F.expr(f"unix_micros(cast(`{column}` as timestamp))")
