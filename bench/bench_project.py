"""A throw-away dbt project for a benchmark: it installs dbt_merge as a package and
runs on the embedded `spark_session` adapter (local[2], a warehouse under bench/out)."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
WAREHOUSE = OUT / "warehouse"
# a Delta project's own warehouse (its metastore holds the Delta tables)
DELTA_WAREHOUSE = OUT / "warehouse-delta"

# DBT_MERGE_BENCH_EVENT_LOG=<dir>: Spark writes its event log there (every job's time
# and call site, for profiling a run; bench/spark_jobs.py prints them)
_EVENT_LOG_DIR = os.environ.get("DBT_MERGE_BENCH_EVENT_LOG")
EVENT_LOG = (
    f'        spark.eventLog.enabled: "true"\n        spark.eventLog.dir: "{_EVENT_LOG_DIR}"\n'
    if _EVENT_LOG_DIR
    else ""
)


def local_session(driver_memory: str = "6g"):
    """This process's SparkSession for a benchmark that runs Spark itself, built on first
    use as a BenchProject's profile runs it: local[2], the warehouse under bench/out."""
    from dbt.adapters.spark_session import session as sessions

    return sessions.get_session(
        sessions.SessionSettings(
            warehouse=WAREHOUSE,
            log_dir=OUT / "logs",
            server_side_parameters={
                "spark.master": "local[2]",
                "spark.driver.memory": driver_memory,
            },
        )
    )


class BenchProject:
    """bench/out/<name>_project with the given models (file name → text)."""

    def __init__(self, name: str, schema: str, table_format: str = "iceberg") -> None:
        self.name = name
        self.schema = schema
        self.table_format = table_format
        self.warehouse = DELTA_WAREHOUSE if table_format == "delta" else WAREHOUSE
        self.path = OUT / f"{name}_project"

    def write(
        self,
        models: dict[str, str],
        project_config: dict | None = None,
        seeds: dict[str, Path] | None = None,
        macros: dict[str, str] | None = None,
    ) -> None:
        """The project, with ``models`` (file name → text), ``seeds`` (file name → a CSV
        elsewhere, linked, not copied) and ``macros`` (file name → text) of its own."""
        if self.path.exists():
            shutil.rmtree(self.path)
        (self.path / "models").mkdir(parents=True)
        (self.path / "seeds").mkdir()
        (self.path / "macros").mkdir()
        for file_name, text in models.items():
            (self.path / "models" / file_name).write_text(text)
        for file_name, text in (macros or {}).items():
            (self.path / "macros" / file_name).write_text(text)
        for file_name, source in (seeds or {}).items():
            (self.path / "seeds" / file_name).symlink_to(source)
        config = {
            "name": self.name,
            "version": "1.0",
            "config-version": 2,
            "profile": self.name,
            "flags": {"send_anonymous_usage_stats": False},
            **(project_config or {}),
        }
        (self.path / "dbt_project.yml").write_text(json.dumps(config, indent=2))
        (self.path / "packages.yml").write_text(f"packages:\n  - local: {ROOT}\n")
        (self.path / "profiles.yml").write_text(
            textwrap.dedent(
                f"""
                {self.name}:
                  target: local
                  outputs:
                    local:
                      type: spark_session
                      method: session
                      schema: {self.schema}
                      threads: 2
                      table_format: {self.table_format}
                      warehouse: {self.warehouse}
                      log_dir: {OUT / "logs"}
                      server_side_parameters:
                        spark.master: "local[2]"
                        spark.driver.memory: "6g"
                """
            )
            + EVENT_LOG
        )

    def dbt(self, *args: str, callbacks: list | None = None):
        from dbt.cli.main import dbtRunner

        common = ["--project-dir", str(self.path), "--profiles-dir", str(self.path)]
        result = dbtRunner(callbacks=callbacks or []).invoke([*args, *common])
        if not result.success:
            raise SystemExit(f"dbt {' '.join(args)} failed: {result.exception}")
        return result
