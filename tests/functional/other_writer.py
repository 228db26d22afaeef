"""Another process that writes to the test run's Iceberg tables: a plain pyspark
session with its own JVM, which reaches the warehouse's tables through an Iceberg
catalog `other` of type hadoop (no metastore, so the test run's Derby is not touched).

    python tests/functional/other_writer.py <warehouse>

reads statements on `other.<schema>.<table>` from stdin, one JSON string a line, and
answers each with one line `other_writer: <JSON>`: `{"rows": [...]}` or, when it failed,
`{"error": "..."}`. It runs until stdin closes, so its JVM starts once for all the
statements of a test module (`OtherWriter` is the test's side). The catalog keeps no
cache: every statement reads each table's latest commit, whoever made it.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ANSWER = "other_writer: "


def main(warehouse: str) -> int:
    from pyspark.sql import SparkSession

    from dbt.adapters.spark_session.session import ICEBERG_EXTENSIONS, iceberg_runtime_jar

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("dbt_merge_other_writer")
        .config("spark.jars", iceberg_runtime_jar())
        .config("spark.sql.extensions", ICEBERG_EXTENSIONS)
        .config("spark.sql.catalog.other", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.other.type", "hadoop")
        .config("spark.sql.catalog.other.warehouse", warehouse)
        .config("spark.sql.catalog.other.cache-enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for line in sys.stdin:
            statement = json.loads(line)
            try:
                answer = {"rows": [str(row) for row in spark.sql(statement).collect()]}
            except Exception as exc:  # noqa: BLE001 - reported to the test, which asserts on it
                answer = {"error": f"other_writer failed: {exc}"}
            print(ANSWER + json.dumps(answer), flush=True)
    finally:
        spark.stop()
    return 0


class OtherWriter:
    """The test's side of the other process: started once, then `submit` a statement
    and `answer` it (or `run` both)."""

    def __init__(self, warehouse: Path, log: Path) -> None:
        self.log = log
        with open(log, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, str(warehouse)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self.answers: queue.Queue[dict | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith(ANSWER):
                self.answers.put(json.loads(line[len(ANSWER) :]))
        self.answers.put(None)  # the process ended

    def submit(self, statement: str) -> None:
        self.proc.stdin.write(json.dumps(statement) + "\n")
        self.proc.stdin.flush()

    def answer(self, timeout: float) -> dict | None:
        """The next answer; raises queue.Empty if none came in timeout s."""
        answer = self.answers.get(timeout=timeout)
        if answer is None:
            self.answers.put(None)
            stderr = self.log.read_text(errors="replace")[-3000:]
            raise AssertionError(f"the other process ended ({self.proc.poll()}):\n{stderr}")
        return answer

    def run(
        self,
        statement: str,
        timeout: float = 300,
        while_waiting: Callable[[], object] | None = None,
    ) -> list[str]:
        """Run statement in the other process; fail with its error. Returns its rows.
        `while_waiting` is called first, then every 5 s until the answer comes."""
        self.submit(statement)
        deadline = time.monotonic() + timeout
        while True:
            if while_waiting is not None:
                while_waiting()
            try:
                answer = self.answer(timeout=5)
                break
            except queue.Empty:
                if time.monotonic() > deadline:
                    message = f"the other process did not answer in {timeout} s"
                    raise AssertionError(message) from None
        assert "error" not in answer, answer["error"][-3000:]
        return answer["rows"]

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
