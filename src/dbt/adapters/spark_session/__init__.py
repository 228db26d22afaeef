"""dbt adapter plugin ``spark_session``: dbt-spark with Python models run in the dbt process."""

from dbt.adapters.base import AdapterPlugin

from dbt.adapters.spark_session.connections import SparkSessionCredentials
from dbt.adapters.spark_session.impl import SparkSessionAdapter
from dbt.include import spark_session

Plugin = AdapterPlugin(
    adapter=SparkSessionAdapter,  # type: ignore[arg-type]
    credentials=SparkSessionCredentials,
    include_path=spark_session.PACKAGE_PATH,
    dependencies=["spark"],
)
