"""Bin packing and defragment (SPEC §3), after NiFi MergeContent: bins, as tables a dbt
model merges.

Three algorithms, each a pure-Python engine (plain lists, no Spark, unit-tested on its
own) and a Spark entry point a dbt Python model calls (re-exported here):

* streaming bin packing: ``packer`` (``BinPacker``, ``pack_items``), ``spark.bin_pack``;
* offline planning: ``offline`` (``plan_offline_items``), ``spark.plan_offline`` and
  ``spark.offline_report``;
* defragment: ``defragmenter`` (``Defragmenter``, ``defragment_items``),
  ``spark.defragment``.

``settings`` holds what they share: the settings and their validation, the merge and
failure reasons, bin ids and ``BinPackingError``.
"""

from dbt_merge.bin_packing.settings import BinPackingError
from dbt_merge.bin_packing.spark import bin_pack, defragment, offline_report, plan_offline

__all__ = ["BinPackingError", "bin_pack", "defragment", "offline_report", "plan_offline"]
