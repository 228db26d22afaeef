"""Credentials and connections of the ``spark_session`` adapter."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dbt.adapters.contracts.connection import Connection, ConnectionState
from dbt.adapters.spark.connections import (
    SparkConnectionManager,
    SparkConnectionMethod,
    SparkConnectionWrapper,
    SparkCredentials,
)
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.spark_session import session as sessions

WAREHOUSE_DEFAULT = "warehouse"
LOG_DIR_DEFAULT = "logs"


@dataclass
class SparkSessionCredentials(SparkCredentials):
    """dbt-spark's credentials, with the in-process session as the only method.

    ``warehouse`` and ``log_dir`` are resolved against the dbt project's root when
    relative. ``host`` is not used by a session and defaults to ``localhost``.
    """

    method: SparkConnectionMethod = SparkConnectionMethod.SESSION
    host: str | None = "localhost"
    warehouse: str = WAREHOUSE_DEFAULT
    log_dir: str = LOG_DIR_DEFAULT
    # seconds to wait for another process that holds the warehouse (0: fail at once)
    warehouse_wait: int = sessions.WAREHOUSE_WAIT_DEFAULT
    # what spark_catalog is: "iceberg" (Iceberg's SparkSessionCatalog) or "delta"
    # (Delta Lake's DeltaCatalog, with Iceberg as the catalog `iceberg`)
    table_format: str = "iceberg"

    def __post_init__(self) -> None:
        if self.method != SparkConnectionMethod.SESSION:
            raise DbtRuntimeError(
                f"The spark_session adapter runs Spark in the dbt process and supports "
                f"only `method: session`, not `method: {self.method}`. For a Thrift, HTTP "
                "or ODBC server use `type: spark` (dbt-spark) instead."
            )
        if self.table_format not in sessions.TABLE_FORMATS:
            value = self.table_format
            raise DbtRuntimeError(
                f"spark_session: `table_format` is '{value}'; it must be iceberg or delta."
            )
        super().__post_init__()

    @property
    def type(self) -> str:
        return "spark_session"

    @property
    def unique_field(self) -> str:
        return self.warehouse

    def _connection_keys(self) -> tuple[str, ...]:
        return ("method", "schema", "warehouse", "log_dir", "warehouse_wait", "table_format")

    def session_settings(self, project_root: str | None) -> sessions.SessionSettings:
        root = Path(project_root) if project_root else Path.cwd()
        return sessions.SessionSettings(
            warehouse=_under(root, self.warehouse),
            log_dir=_under(root, self.log_dir),
            server_side_parameters=dict(self.server_side_parameters),
            warehouse_wait=self.warehouse_wait,
            table_format=self.table_format,
        )


def _under(root: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else root / path


class SessionConnectionWrapper(SparkConnectionWrapper):
    """dbt-spark's connection interface over :class:`sessions.SessionCursor`."""

    def __init__(self, session: Any) -> None:
        self._spark = session
        self._cursor: sessions.SessionCursor | None = None

    @property
    def spark_session(self) -> Any:
        return self._spark

    def cursor(self) -> SessionConnectionWrapper:
        self._cursor = sessions.SessionCursor(self._spark)
        return self

    def cancel(self) -> None:
        self._spark.sparkContext.cancelAllJobs()

    def close(self) -> None:
        if self._cursor:
            self._cursor.close()

    def rollback(self, *args: Any, **kwargs: Any) -> None:
        """Spark has no transactions; Iceberg commits are atomic per statement."""

    def fetchall(self) -> list[Any] | None:
        assert self._cursor, "Cursor not available"
        return self._cursor.fetchall()

    def fetchone(self) -> Any | None:
        assert self._cursor, "Cursor not available"
        return self._cursor.fetchone()

    def execute(self, sql: str, bindings: Sequence[Any] | None = None) -> None:
        assert self._cursor, "Cursor not available"
        self._cursor.execute(sql, bindings)

    @property
    def description(self) -> list[tuple[Any, ...]]:
        assert self._cursor, "Cursor not available"
        return self._cursor.description


class SparkSessionConnectionManager(SparkConnectionManager):
    TYPE = "spark_session"
    _project_root: str | None = None

    def __init__(self, profile: Any, mp_context: Any) -> None:
        super().__init__(profile, mp_context)
        root = getattr(profile, "project_root", None)
        if root:
            SparkSessionConnectionManager._project_root = str(root)

    @classmethod
    def open(cls, connection: Connection) -> Connection:
        if connection.state == ConnectionState.OPEN:
            return connection
        creds: SparkSessionCredentials = connection.credentials
        settings = creds.session_settings(cls._project_root)
        connection.handle = SessionConnectionWrapper(sessions.get_session(settings))
        connection.state = ConnectionState.OPEN
        return connection
