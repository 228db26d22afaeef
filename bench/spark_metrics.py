"""Shuffle bytes of what a benchmark ran, read from Spark's own status store.

The store (the one the Spark UI reads, kept also when the UI is off) holds one
record per stage with the bytes its tasks wrote to the shuffle. A meter remembers
the newest stage when it starts; `shuffle_bytes()` sums the stages after it. It
reads the process's SparkContext, so it also sees the jobs of a `dbt run` invoked in
this process (the spark_session adapter's session). The store keeps the newest
`spark.ui.retainedStages` stages (1,000 by default), far more than one measurement
runs here.
"""

from __future__ import annotations

from pyspark import SparkContext


def _stages() -> list:
    context = SparkContext._active_spark_context
    if context is None:
        return []
    jvm = context._jvm
    wrapper = jvm.org.apache.spark.status.StageDataWrapper
    view = context._jsc.sc().statusStore().store().view(wrapper._java_lang_class)
    stages, iterator = [], view.iterator()
    while iterator.hasNext():
        stages.append(iterator.next().info())
    return stages


class ShuffleMeter:
    """Shuffle bytes written by the stages that start after the meter does."""

    def __init__(self) -> None:
        self.after = max((s.stageId() for s in _stages()), default=-1)

    def shuffle_bytes(self) -> int:
        return sum(s.shuffleWriteBytes() for s in _stages() if s.stageId() > self.after)
