"""The same batches applied by dbt_merge's upsert models and by Apache Hudi 1.0.2's own
DataFrame upsert, in a process of its own, and what each left stored after each batch.

The test run's own session has no Hudi (its bundle, its extension and the Kryo
serializer are benchmark-only settings, bench/hudi.py), so
tests/functional/test_upsert_against_hudi.py hands the comparison to this script
(``python hudi_runner.py <spec.json>``): one process, one JVM, started by the first dbt
call on a profile that adds Hudi to the session (Iceberg stays the session catalog).

The spec: ``{"project": <dbt project folder>, "schema": ..., "session": <the profile's
warehouse, log_dir and server_side_parameters>, "hudi_root": <folder>,
"models": {<model>: <bench/hudi.py write_options arguments>}, "batches": {<model>:
[<batch>, ...]}}``, each batch a list of rows ``[id, ts, name, amount, deleted]`` in
arrival order (a model may have fewer batches than another). After ``dbt deps``, for
batch i, each model's rows go, with ``seq`` (the row's place in the
batch) after ``ts``, into the Iceberg table ``<schema>.batch_<model>`` (one file: its
arrival order) read by the model; one ``dbt run`` applies them; then Hudi upserts the same
rows, as one Spark partition in arrival order, into ``<hudi_root>/<model>``. The script
prints one JSON line per batch, ``{"batch": i, "dbt": {<model>: rows}, "hudi": {<model>:
rows}, "seconds": {"dbt": s, "hudi": s}}``, rows ``[id, ts, seq, name, amount,
_hoodie_is_deleted]`` ordered by id, Hudi's meta columns dropped.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import hudi  # noqa: E402

COLUMNS = ["id", "ts", "seq", "name", "amount", hudi.DELETE_MARKER]


def schema():
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("id", T.IntegerType(), False),
            T.StructField("ts", T.IntegerType(), True),
            T.StructField("seq", T.IntegerType(), False),
            T.StructField("name", T.StringType(), True),
            T.StructField("amount", T.DoubleType(), True),
            T.StructField(hudi.DELETE_MARKER, T.BooleanType(), True),
        ]
    )


def frame(spark, rows: list[list]):
    """The batch as one partition in arrival order, ``seq`` its place in it."""
    numbered = [
        (key, ts, seq, name, amount, deleted)
        for seq, (key, ts, name, amount, deleted) in enumerate(rows)
    ]
    return spark.createDataFrame(spark.sparkContext.parallelize(numbered, 1), schema())


def main(spec_file: str) -> int:
    from dbt.cli.main import dbtRunner

    from dbt.adapters.spark_session import session as sessions

    spec = json.loads(Path(spec_file).read_text())
    project, schema_name = spec["project"], spec["schema"]
    common = ["--project-dir", project, "--profiles-dir", project]
    models, batches = spec["models"], spec["batches"]
    result = dbtRunner().invoke(["deps", *common])
    if not result.success:
        print(json.dumps({"batch": None, "error": f"dbt deps: {result.exception}"}))
        return 1
    # the profile's session, which dbt's connections then find running
    session = spec["session"]
    spark = sessions.get_session(
        sessions.SessionSettings(
            warehouse=Path(session["warehouse"]),
            log_dir=Path(session["log_dir"]),
            server_side_parameters=session["server_side_parameters"],
        )
    )
    spark.sql(f"create schema if not exists {schema_name}")
    for index in range(max(len(listed) for listed in batches.values())):
        # the models that have a batch i (a model may have fewer batches than another)
        active = [model for model in models if index < len(batches[model])]
        frames = {model: frame(spark, batches[model][index]) for model in active}
        for model, rows in frames.items():
            rows.writeTo(f"{schema_name}.batch_{model}").using("iceberg").createOrReplace()
        started = time.monotonic()
        result = dbtRunner().invoke(["run", "--select", *active, *common])
        dbt_seconds = round(time.monotonic() - started, 1)
        if not result.success:
            print(json.dumps({"batch": index, "error": str(result.exception or result.result)}))
            return 1
        started = time.monotonic()
        for model in active:
            path = Path(spec["hudi_root"]) / model
            options = hudi.write_options(f"hudi_{model}", **models[model])
            hudi.write(frames[model], path, options)
        hudi_seconds = round(time.monotonic() - started, 1)
        out = {
            "batch": index,
            "dbt": {model: read(spark.table(f"{schema_name}.{model}")) for model in active},
            "hudi": {
                model: read(hudi.read(spark, Path(spec["hudi_root"]) / model)) for model in active
            },
            "seconds": {"dbt": dbt_seconds, "hudi": hudi_seconds},
        }
        print(json.dumps(out), flush=True)
    return 0


def read(table) -> list[list]:
    return [list(row) for row in table.select(*COLUMNS).orderBy("id").collect()]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
