"""Bin packing and defragment (SPEC §3), after NiFi's MergeContent: the functions a
dbt Python model calls."""

from dbt_merge.bin_packing.settings import BinPackingError
from dbt_merge.bin_packing.spark import (
    bin_pack,
    defragment,
    offline_report,
    plan_offline,
)

__all__ = ["BinPackingError", "bin_pack", "defragment", "offline_report", "plan_offline"]
