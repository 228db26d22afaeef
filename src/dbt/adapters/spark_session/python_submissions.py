"""The ``session`` submission method: Python models run in the dbt process's SparkSession."""

from __future__ import annotations

import linecache
import traceback
from typing import Any

from dbt.adapters.base import PythonJobHelper
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.spark_session import session as sessions
from dbt.adapters.spark_session.connections import (
    SparkSessionConnectionManager,
    SparkSessionCredentials,
)


class SessionPythonJobHelper(PythonJobHelper):
    """Runs the compiled model (its code plus ``py_write_table``) with ``exec``.

    The code sees the global ``spark``, the shared SparkSession, as it would on a
    Databricks cluster. An exception inside the model becomes a ``DbtRuntimeError``
    naming the model, with the model's own frames of the traceback, so dbt fails
    that node only and goes on with the rest of the run.
    """

    def __init__(self, parsed_model: dict[str, Any], credentials: SparkSessionCredentials) -> None:
        self.parsed_model = parsed_model
        self.credentials = credentials
        self.name = parsed_model.get("alias") or parsed_model.get("name", "<model>")
        self.unique_id = parsed_model.get("unique_id", self.name)

    def submit(self, compiled_code: str) -> None:
        settings = self.credentials.session_settings(SparkSessionConnectionManager._project_root)
        spark = sessions.activate(sessions.get_session(settings))
        filename = f"<dbt python model {self.unique_id}>"
        linecache.cache[filename] = (
            len(compiled_code),
            None,
            compiled_code.splitlines(keepends=True),
            filename,
        )
        namespace: dict[str, Any] = {"__name__": f"dbt_model_{self.name}", "spark": spark}
        spark.sparkContext.setJobDescription(f"dbt python model {self.unique_id}")
        try:
            exec(compile(compiled_code, filename, "exec"), namespace)
        except (Exception, SystemExit) as exc:
            raise DbtRuntimeError(self._failure_message(exc, filename)) from None
        finally:
            spark.sparkContext.setJobDescription(None)
            linecache.cache.pop(filename, None)

    def _failure_message(self, exc: BaseException, filename: str) -> str:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != __file__]
        trace = "".join(traceback.format_list(frames))
        return (
            f"Python model {self.name} failed: {type(exc).__name__}: "
            f"{sessions.short_error(exc)}\n"
            f"Traceback (most recent call last):\n{trace}"
        )
