"""The Spark entry points a dbt Python model calls: ``bin_pack``, ``plan_offline``,
``offline_report`` and ``defragment``. Each checks its inputs before any Spark job,
then runs a pure-Python engine per group in ``applyInPandas`` tasks.
"""

from __future__ import annotations

import functools
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegralType

from dbt_merge.bin_packing.checks import _check_columns, _check_rows, _check_stream, _check_type
from dbt_merge.bin_packing.defragmenter import DefragBin, _defragment
from dbt_merge.bin_packing.frames import (
    BIN_SCHEMA,
    DEFRAGMENT_SCHEMA,
    OFFLINE_SCHEMA,
    _frame,
    _optional_ints,
)
from dbt_merge.bin_packing.offline import plan_offline_items
from dbt_merge.bin_packing.packer import Bin, _pack
from dbt_merge.bin_packing.settings import (
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
    _setting_error,
    _validate_max_bin_age,
    validate_offline,
)
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
        previous: the model's own table (``dbt.this``) on incremental runs, else None.
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
        ...                     previous=dbt.this if dbt.is_incremental else None)
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
    if not isinstance(items, DataFrame):
        raise _setting_error(model_name, "items", "must be a pyspark DataFrame", items, what)
    _check_columns(
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
    )
    _check_type(items, model_name, what, "size_column", size_column, (IntegralType,), "an integer")
    now_us, max_age = _check_stream(
        items,
        model_name,
        what,
        id_column=id_column,
        arrival_column=arrival_column,
        previous=previous,
        schema=BIN_SCHEMA,
        now=now,
        max_bin_age=max_bin_age,
        more_rows=[
            ("size_column", size_column, F.col(size_column).isNull(), "have a null size"),
            ("size_column", size_column, F.col(size_column) < 0, "have a negative size"),
        ],
    )

    def key(column: str | None) -> Any:
        return F.lit(None).cast("string") if column is None else F.col(column).cast("string")

    new = items.select(
        F.col(id_column).cast("string").alias("_id"),
        F.col(size_column).cast("long").alias("_size"),
        F.expr(f"unix_micros(cast(`{arrival_column}` as timestamp))").alias("_arrival"),
        key(schema_column).alias("_schema"),
        key(correlation_column).alias("_corr"),
    )
    pending_cols = ["bin_id", "_schema", "_corr", "_opened", "members", "bytes", "entries"]
    if previous is None:
        pending = new.sparkSession.createDataFrame(
            [],
            "bin_id string, _schema string, _corr string, _opened long, "
            "members array<string>, bytes long, entries long",
        )
    else:
        consumed = previous.select(F.explode("members").alias("_id"))
        new = new.join(consumed, "_id", "left_anti")
        pending = previous.where(F.col("status") == PENDING).select(
            "bin_id",
            F.col("schema_value").alias("_schema"),
            F.col("correlation_value").alias("_corr"),
            F.expr("unix_micros(opened_at)").alias("_opened"),
            "members",
            F.col("bytes").cast("long"),
            F.col("entries").cast("long"),
        )
    pending = pending.select(*pending_cols)
    coupled = max_bins is not None and max_bins_scope == "global"
    keys = ["_task"] if coupled else ["_schema", "_corr"]
    if coupled:
        new, pending = new.withColumn("_task", F.lit(0)), pending.withColumn("_task", F.lit(0))
    logger.info(
        "bin_pack %s: %s", model_name, "one task (global max_bins)" if coupled else "per group"
    )
    run = functools.partial(_pack_frames, settings, max_age, now_us, model_name)
    return new.groupBy(*keys).cogroup(pending.groupBy(*keys)).applyInPandas(run, BIN_SCHEMA)


def _pack_frames(
    settings: BinPackingSettings,
    max_age: int | None,
    now_us: int,
    model_name: str,
    items_pdf: pd.DataFrame,
    pending_pdf: pd.DataFrame,
) -> pd.DataFrame:
    """One task of ``bin_pack``: pandas in, ``BIN_SCHEMA`` pandas out."""

    stored = sorted(
        zip(
            pending_pdf["_opened"].tolist(),
            pending_pdf["members"].tolist(),
            pending_pdf["bin_id"].tolist(),
            pending_pdf["_schema"].tolist(),
            pending_pdf["_corr"].tolist(),
            pending_pdf["bytes"].tolist(),
            pending_pdf["entries"].tolist(),
            strict=True,
        ),
        key=lambda r: (r[0], r[1][0]),
    )
    pending = [
        Bin(bin_id, schema, corr, opened, [str(m) for m in members], size, entries)
        for opened, members, bin_id, schema, corr, size, entries in stored
    ]
    items = zip(
        items_pdf["_id"].tolist(),
        items_pdf["_size"].tolist(),
        items_pdf["_arrival"].tolist(),
        items_pdf["_corr"].tolist(),
        items_pdf["_schema"].tolist(),
        strict=True,
    )
    result = _pack(
        items, settings, now=now_us, pending=pending, model_name=model_name, max_age=max_age
    )
    bins = result.changed
    return _frame([b.as_dict() for b in bins], BIN_SCHEMA)


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
    if not isinstance(items, DataFrame):
        raise _setting_error(model_name, "items", "must be a pyspark DataFrame", items, what)
    _check_columns(
        items,
        model_name,
        what,
        {
            "id_column": id_column,
            "size_column": size_column,
            "correlation_column": correlation_column,
            "schema_column": schema_column,
        },
    )
    _check_type(items, model_name, what, "size_column", size_column, (IntegralType,), "an integer")
    _check_rows(
        items,
        model_name,
        what,
        [
            ("id_column", id_column, F.col(id_column).isNull(), "have a null id"),
            ("size_column", size_column, F.col(size_column).isNull(), "have a null size"),
            ("size_column", size_column, F.col(size_column) < 0, "have a negative size"),
        ],
    )

    def key(column: str | None) -> Any:
        return F.lit(None).cast("string") if column is None else F.col(column).cast("string")

    frame = items.select(
        F.col(id_column).cast("string").alias("_id"),
        F.col(size_column).cast("long").alias("_size"),
        key(schema_column).alias("_schema"),
        key(correlation_column).alias("_corr"),
    )
    run = functools.partial(_plan_frame, max_bytes, max_entries, strategy, model_name)
    return frame.groupBy("_schema", "_corr").applyInPandas(run, OFFLINE_SCHEMA)


def _plan_frame(
    max_bytes: int, max_entries: int | None, strategy: str, model_name: str, pdf: pd.DataFrame
) -> pd.DataFrame:
    """One group of ``plan_offline``: pandas in, ``OFFLINE_SCHEMA`` pandas out."""

    plan = plan_offline_items(
        zip(
            pdf["_id"].tolist(),
            pdf["_size"].tolist(),
            pdf["_corr"].tolist(),
            pdf["_schema"].tolist(),
            strict=True,
        ),
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
        index_column: ``fragment.index``, an integer column, 1-based.
        max_bin_age: incomplete sets older than this at ``now`` fail.
        now: the run's clock (default: the current time); naive = local time.
        previous: the model's own table (``dbt.this``) on incremental runs, else None.
        model_name: named in error messages.
        size_column: optional fragment size in bytes (an integer column); adds a
            ``bytes`` column after ``entries``: the sum over the set's members.

    Returns:
        ``DEFRAGMENT_SCHEMA`` rows: sets merged or failed in this run (a failure is
        a row with ``status='failed'``, its ``failure_reason`` and its members) and
        new or grown pending sets; merge them into the table by ``bin_id``.
    """
    what = "defragment"
    _validate_max_bin_age(max_bin_age, model_name, what)
    if not isinstance(items, DataFrame):
        raise _setting_error(model_name, "items", "must be a pyspark DataFrame", items, what)
    _check_columns(
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
    )
    sized = [("size_column", size_column)] if size_column is not None else []
    for setting, column in [("count_column", count_column), ("index_column", index_column), *sized]:
        _check_type(items, model_name, what, setting, column, (IntegralType,), "an integer")
    now_us, max_age = _check_stream(
        items,
        model_name,
        what,
        id_column=id_column,
        arrival_column=arrival_column,
        previous=previous,
        schema=DEFRAGMENT_SCHEMA,
        now=now,
        max_bin_age=max_bin_age,
    )
    new = items.select(
        F.col(id_column).cast("string").alias("_id"),
        F.col(identifier_column).cast("string").alias("_identifier"),
        F.col(count_column).cast("long").alias("_count"),
        F.col(index_column).cast("long").alias("_index"),
        F.expr(f"unix_micros(cast(`{arrival_column}` as timestamp))").alias("_arrival"),
    )
    if previous is None:
        pending = new.sparkSession.createDataFrame(
            [],
            "bin_id string, _identifier string, fragment_count long, members array<string>, "
            "member_indexes array<long>, _opened long",
        )
    else:
        consumed = previous.select(F.explode("members").alias("_id"))
        new = new.join(consumed, "_id", "left_anti")
        pending = previous.where(F.col("status") == PENDING).select(
            "bin_id",
            F.col("fragment_identifier").alias("_identifier"),
            F.col("fragment_count").cast("long"),
            "members",
            F.col("member_indexes").cast("array<long>"),
            F.expr("unix_micros(opened_at)").alias("_opened"),
        )
    run = functools.partial(_defragment_frames, max_age, now_us, model_name)
    sets = (
        new.groupBy("_identifier")
        .cogroup(pending.groupBy("_identifier"))
        .applyInPandas(run, DEFRAGMENT_SCHEMA)
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


def _defragment_frames(
    max_age: int | None,
    now_us: int,
    model_name: str,
    items_pdf: pd.DataFrame,
    pending_pdf: pd.DataFrame,
) -> pd.DataFrame:
    """One task of ``defragment``: pandas in, ``DEFRAGMENT_SCHEMA`` pandas out."""

    stored = sorted(
        zip(
            pending_pdf["_opened"].tolist(),
            pending_pdf["bin_id"].tolist(),
            pending_pdf["_identifier"].tolist(),
            _optional_ints(pending_pdf["fragment_count"].tolist()),
            pending_pdf["members"].tolist(),
            pending_pdf["member_indexes"].tolist(),
            strict=True,
        ),
        key=lambda r: (r[0], r[1]),
    )
    pending = [
        DefragBin(
            bin_id, identifier, count, [str(m) for m in members], [int(i) for i in indexes], opened
        )
        for opened, bin_id, identifier, count, members, indexes in stored
    ]
    fragments = zip(
        items_pdf["_id"].tolist(),
        items_pdf["_identifier"].tolist(),
        _optional_ints(items_pdf["_count"].tolist()),
        _optional_ints(items_pdf["_index"].tolist()),
        items_pdf["_arrival"].tolist(),
        strict=True,
    )
    result = _defragment(
        fragments,
        now=now_us,
        max_bin_age=None,
        pending=pending,
        model_name=model_name,
        max_age=max_age,
    )
    sets = result.changed
    return _frame([b.as_dict() for b in sets], DEFRAGMENT_SCHEMA)
