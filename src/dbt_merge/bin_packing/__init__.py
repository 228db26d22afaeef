"""Bin packing and defragment (SPEC §3), after NiFi MergeContent: bins, as tables a dbt
model merges.

Three algorithms, each a pure-Python engine (plain lists, no Spark, unit-tested on its
own) and a Spark entry point a dbt Python model calls (re-exported here):

* streaming bin packing: ``packer`` (``BinPacker``, ``pack_items``), ``spark.bin_pack``;
* offline planning: ``offline`` (``plan_offline_items``), ``spark.plan_offline`` and
  ``spark.offline_report``;
* defragment: ``defragmenter`` (``Defragmenter``, ``defragment_items``, its failure
  reasons), ``spark.defragment``.

What they share: ``settings`` (the settings, their defaults and validation, the merge
reasons and statuses, bin ids, ``BinPackingError``), ``stream`` (the base of the two
streaming engines), ``first_fit`` (the index both first-fit packers search). Beside
``spark``: ``checks`` (its input checks) and ``frames`` (the output schemas and the
pandas frames of a task).
"""

from dbt_merge.bin_packing.settings import BinPackingError
from dbt_merge.bin_packing.spark import bin_pack, defragment, offline_report, plan_offline

__all__ = ["BinPackingError", "bin_pack", "defragment", "offline_report", "plan_offline"]
