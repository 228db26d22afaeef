"""dbt adapter plugin ``spark_session``: dbt-spark with Python models run in the dbt process."""

from dbt.adapters.base import AdapterPlugin

from dbt.adapters.spark_session import csv_table
from dbt.adapters.spark_session.connections import SparkSessionCredentials
from dbt.adapters.spark_session.impl import SparkSessionAdapter
from dbt.include import spark_session

# dbt reads a seed's CSV into the same agate table in a fraction of the time
csv_table.install()

Plugin = AdapterPlugin(
    adapter=SparkSessionAdapter,  # type: ignore[arg-type]
    credentials=SparkSessionCredentials,
    include_path=spark_session.PACKAGE_PATH,
    dependencies=["spark"],
)
