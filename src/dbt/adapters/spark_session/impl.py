"""The ``spark_session`` adapter: dbt-spark plus Python models in the session."""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any

from dbt.adapters.__about__ import version as base_adapter_version
from dbt.adapters.base import BaseRelation, PythonJobHelper, available
from dbt.adapters.base.impl import AdapterTrackingRelationInfo
from dbt.adapters.contracts.relation import RelationType
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.spark.impl import SparkAdapter, SparkConfig
from dbt.adapters.spark.python_submissions import (
    AllPurposeClusterPythonJobHelper,
    JobClusterPythonJobHelper,
)
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.spark_session import seeds
from dbt.adapters.spark_session import session as sessions
from dbt.adapters.spark_session.__version__ import version as adapter_version
from dbt.adapters.spark_session.connections import SparkSessionConnectionManager
from dbt.adapters.spark_session.python_submissions import SessionPythonJobHelper
from dbt_merge.auto_merge import delta
from dbt_merge.core.errors import failpoint
from dbt_merge.core.expressions import inspect_expression

logger = AdapterLogger("SparkSession")

ICEBERG_INFORMATION = "Type: MANAGED\nProvider: iceberg\n"
# the session setting whose value a Delta commit carries as its userMetadata
DELTA_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


@dataclass
class SparkSessionConfig(SparkConfig):
    submission_method: str = "session"
    # how a seed's rows reach its table: "dataframe" (one write) or "insert" (dbt-spark's)
    seed_load: str = "dataframe"


class SparkSessionAdapter(SparkAdapter):
    """dbt-spark's adapter with two additions.

    * Python models run in the dbt process's SparkSession (submission method
      ``session``, the default); Databricks' methods stay available.
    * Relation listing also asks the Iceberg catalog. With ``SparkSessionCatalog``
      of type ``hadoop`` Iceberg tables live in the warehouse folder, not in the
      metastore, so ``SHOW TABLE EXTENDED`` never lists them: dbt would think an
      incremental model's table is missing and rebuild it on every run.
    """

    ConnectionManager = SparkSessionConnectionManager
    AdapterSpecificConfigs = SparkSessionConfig

    @classmethod
    def type(cls) -> str:
        return "spark_session"

    @classmethod
    def get_adapter_run_info(cls, config: Any) -> AdapterTrackingRelationInfo:
        # dbt derives the module from the class name ("sparksession"); ours is spark_session
        return AdapterTrackingRelationInfo(
            adapter_name="spark_session",
            base_adapter_version=base_adapter_version,
            adapter_version=adapter_version,
            model_adapter_details=cls._get_adapter_specific_run_info(config),
        )

    @property
    def default_python_submission_method(self) -> str:
        return "session"

    @property
    def python_submission_helpers(self) -> dict[str, builtins.type[PythonJobHelper]]:
        return {
            "session": SessionPythonJobHelper,
            "job_cluster": JobClusterPythonJobHelper,
            "all_purpose_cluster": AllPurposeClusterPythonJobHelper,
        }

    def _spark(self) -> Any:
        return self.connections.get_thread_connection().handle.spark_session

    @available
    def iceberg_table_names(self, schema: str) -> list[str]:
        """Names of the tables the Iceberg side of ``spark_catalog`` holds in ``schema``."""
        spark = sessions.activate(self._spark())
        jvm = spark._jvm
        catalog = spark._jsparkSession.sessionState().catalogManager().catalog("spark_catalog")
        if "SparkSessionCatalog" not in str(catalog.getClass().getName()):
            return []
        levels = spark.sparkContext._gateway.new_array(jvm.java.lang.String, 1)
        levels[0] = schema
        namespace = jvm.org.apache.iceberg.catalog.Namespace.of(levels)
        try:
            identifiers = catalog.icebergCatalog().listTables(namespace)
        except Exception as exc:  # NoSuchNamespaceException: nothing stored yet
            logger.debug(f"Iceberg listing of {schema} found nothing: {exc}")
            return []
        return [str(identifiers.get(i).name()) for i in range(identifiers.size())]

    @available
    def delta_file_deletes(self, table: str) -> list[dict[str, Any]]:
        """The files of the Delta table ``table`` (schema.name of ``spark_catalog``) at
        its current version, with what each one's deletion vector marks deleted
        (``dbt_merge.auto_merge.delta.DeltaTableFiles.file_deletes``); [] for a table
        that is not Delta. Delta has no SQL view of its files: the upsert compaction
        on Delta reads them here."""
        spark = sessions.activate(self._spark())
        found = delta.load_table(spark, "spark_catalog", table)
        return [] if found is None else found.file_deletes()

    @available
    def delta_rewrite_merge(
        self,
        table: str,
        files_where: str,
        sort_column: str | None,
        planned: list[str],
        marker: str,
        execute: bool,
    ) -> dict[str, Any]:
        """One planned auto-merge of the Delta table ``table`` (schema.name of
        ``spark_catalog``): checked against the plan, then its files rewritten and
        committed as Delta's OPTIMIZE commits (``dbt_merge.auto_merge.delta.
        rewrite_merge``). Delta's OPTIMIZE statement selects whole partitions; a
        planned merge is a key range of files."""
        spark = sessions.activate(self._spark())
        return delta.rewrite_merge(
            spark,
            "spark_catalog",
            table,
            files_where=files_where,
            sort_column=sort_column,
            planned=planned,
            marker=marker,
            execute=execute,
        )

    @available
    def delta_merge_commit(self, table: str, marker: str) -> dict[str, Any] | None:
        """The commit of ``table`` that a planned merge made (its userMetadata is
        ``marker``), with the files it removed and added, or None
        (``dbt_merge.auto_merge.delta.find_merge_commit``)."""
        spark = sessions.activate(self._spark())
        return delta.find_merge_commit(spark, "spark_catalog", table, marker)

    @available
    def delta_commit_actions(self, table: str, version: int) -> dict[str, Any]:
        """What commit ``version`` of the Delta table ``table`` (schema.name of
        ``spark_catalog``) removed and added (``dbt_merge.auto_merge.delta.
        commit_actions``): a compaction that died before its event is recorded from it."""
        spark = sessions.activate(self._spark())
        found = delta.load_table(spark, "spark_catalog", table)
        if found is None:
            raise DbtRuntimeError(f"{table} is not a Delta table")
        return delta.commit_actions(spark, found, version)

    @available
    def execute_with_commit_metadata(self, sql: str, user_metadata: str) -> None:
        """Runs ``sql`` with Delta's ``commitInfo.userMetadata`` set to ``user_metadata``,
        so that the commit it makes carries it in ``describe history``; the session's
        own value (or none) is back afterwards, also when the statement fails."""
        spark = sessions.activate(self._spark())
        saved = spark.conf.get(DELTA_USER_METADATA, None)
        spark.conf.set(DELTA_USER_METADATA, user_metadata)
        try:
            self.execute(sql)
        finally:
            if saved is None:
                spark.conf.unset(DELTA_USER_METADATA)
            else:
                spark.conf.set(DELTA_USER_METADATA, saved)

    @available
    def inspect_sql_expression(self, sql: str) -> dict[str, Any]:
        """sqlglot's view of one Spark SQL row expression; functions it does not know are
        asked of Spark (``dbt_merge.core.expressions.inspect_expression``).

        Macros call it at compile time (the dbt_merge macro ``_inspect_expression``) to
        reject anything that is not a pure row expression before a model runs.
        """
        spark = sessions.activate(self._spark())
        return inspect_expression(sql, function_exists=spark.catalog.functionExists)

    @available
    def write_seed(
        self,
        seed: str,
        agate_table: Any,
        headers: list[str],
        names: list[str],
        types: list[str],
        view: str,
        create_sql: str,
        drop_first: BaseRelation | None = None,
    ) -> None:
        """Write a seed's rows as one DataFrame: the rows become the temporary view ``view``
        (source columns ``_c0`` ...), the casts that can fail are checked, then ``drop_first``
        (a table that ``create_sql`` cannot replace in one commit) is dropped and
        ``create_sql`` (a create-table-as-select from the view) runs.

        A seed that fails its checks fails before anything is written; the old table stays.
        """
        spark = sessions.activate(self._spark())
        columns = seeds.seed_columns(headers, names, types)
        seeds.check_column_names(seed, columns)
        try:
            frame, source_types = seeds.source_frame(spark, agate_table, columns)
        except DbtRuntimeError as exc:
            raise DbtRuntimeError(f"seed {seed}: {exc.msg}. Nothing was written.") from None
        frame.createOrReplaceTempView(view)
        try:
            seeds.check_casts(spark, seed, view, columns, source_types)
            if drop_first is not None:
                self.drop_relation(drop_first)
            failpoint("seeds.before_write")  # checked (and a non-Iceberg table dropped)
            self.execute(create_sql)
        finally:
            spark.catalog.dropTempView(view)

    def list_relations_without_caching(self, schema_relation: BaseRelation) -> list[BaseRelation]:
        relations = list(super().list_relations_without_caching(schema_relation))
        listed = {r.identifier.lower() for r in relations if r.identifier}
        for name in self.iceberg_table_names(schema_relation.schema):
            if name.lower() in listed:
                continue
            relations.append(
                self.Relation.create(
                    schema=schema_relation.schema,
                    identifier=name,
                    type=RelationType.Table,
                    information=ICEBERG_INFORMATION,
                    is_iceberg=True,
                )
            )
        return relations

    def drop_schema(self, relation: BaseRelation) -> None:
        """Drop the Iceberg tables first: ``drop schema ... cascade`` leaves them on disk."""
        for name in self.iceberg_table_names(relation.schema):
            target = self.Relation.create(schema=relation.schema, identifier=name)
            self.execute(f"drop table if exists {target} purge")
        super().drop_schema(relation)
