"""The pinned jars: fetched from a Maven repository once, checked, never half-written."""

from __future__ import annotations

import hashlib
import http.server
import threading
from pathlib import Path

import pytest
from dbt_common.events import event_manager_client
from dbt_common.events.event_manager import EventManager
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.spark_session import jars
from dbt.adapters.spark_session import session as sessions

CONTENT = b"PK\x03\x04 a jar's bytes"
JAR = jars.Jar("org.example", "thing_2.12", "1.2.3", hashlib.sha256(CONTENT).hexdigest())


@pytest.fixture
def mirror(tmp_path):
    """A Maven repository layout served over HTTP on 127.0.0.1; yields (url, served paths)."""
    root = tmp_path / "repo"
    served: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args):
            served.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_port}/maven2", served
    server.shutdown()


def _publish(root: Path, jar: jars.Jar, content: bytes) -> None:
    path = root / "maven2" / Path(jar.url("").lstrip("/"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)


def test_a_missing_jar_is_fetched_from_the_named_repository_once(mirror, tmp_path, monkeypatch):
    root, url, served = mirror
    _publish(root, JAR, CONTENT)
    monkeypatch.setenv(jars.REPOSITORY_ENV, url)
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(tmp_path / "jars"))
    first = jars.ensure(JAR)
    assert first == tmp_path / "jars" / "thing_2.12-1.2.3.jar"
    assert first.read_bytes() == CONTENT
    assert served == ["/maven2/org/example/thing_2.12/1.2.3/thing_2.12-1.2.3.jar"]
    assert jars.ensure(JAR) == first
    assert len(served) == 1, "the second call is offline"


def test_inside_dbt_a_fetch_says_so_through_the_adapter_logger(mirror, tmp_path, monkeypatch):
    """A session that fetches a jar does it inside a dbt command: the line is a dbt event
    (the console and logs/dbt.log show those), not a Python log record."""
    root, url, _ = mirror
    _publish(root, JAR, CONTENT)
    monkeypatch.setenv(jars.REPOSITORY_ENV, url)
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(tmp_path / "jars"))
    manager, events = EventManager(), []
    manager.add_callback(events.append)
    monkeypatch.setattr(event_manager_client, "_EVENT_MANAGER", manager)
    jars.jar_paths([JAR])
    jars.jar_paths([JAR])
    fetched = [e for e in events if "dbt_merge: fetching" in e.info.msg]
    assert len(fetched) == 1, "one line for the fetch, none for the jar already there"
    assert fetched[0].info.name == "AdapterEventInfo"
    assert fetched[0].info.msg == (
        f"spark_session adapter: dbt_merge: fetching org.example:thing_2.12:1.2.3 from "
        f"{url}/org/example/thing_2.12/1.2.3/thing_2.12-1.2.3.jar into {tmp_path / 'jars'} "
        "(once)"
    )


def test_dbt_merge_jars_prints_the_fetch_on_stderr_and_the_paths_on_stdout(
    mirror, tmp_path, monkeypatch, capsys
):
    root, url, _ = mirror
    _publish(root, JAR, CONTENT)
    monkeypatch.setenv(jars.REPOSITORY_ENV, url)
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(tmp_path / "jars"))
    monkeypatch.setattr(jars, "ALL", (JAR,))
    assert jars.main([]) == 0
    out, err = capsys.readouterr()
    assert out == f"{tmp_path / 'jars' / JAR.file_name}\n"
    assert err.startswith("dbt_merge: fetching org.example:thing_2.12:1.2.3 from ")
    assert jars.main([]) == 0
    assert capsys.readouterr() == (out, ""), "a jar already there is listed, not fetched"


def test_a_jar_that_is_not_the_pinned_one_is_refused_and_not_kept(mirror, tmp_path, monkeypatch):
    root, url, _ = mirror
    _publish(root, JAR, CONTENT + b" tampered")
    monkeypatch.setenv(jars.REPOSITORY_ENV, url)
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(tmp_path / "jars"))
    with pytest.raises(DbtRuntimeError) as err:
        jars.ensure(JAR)
    message = str(err.value)
    assert "did not give the pinned org.example:thing_2.12:1.2.3" in message
    assert f"expected {JAR.sha256}" in message
    assert list((tmp_path / "jars").iterdir()) == [], "neither the jar nor a part file stays"


def test_an_unreachable_repository_names_the_jar_the_url_and_the_ways_out(
    mirror, tmp_path, monkeypatch
):
    _, url, _ = mirror  # nothing published: the server answers 404
    monkeypatch.setenv(jars.REPOSITORY_ENV, url)
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(tmp_path / "jars"))
    with pytest.raises(DbtRuntimeError) as err:
        jars.ensure(JAR)
    message = str(err.value)
    assert f"could not be fetched from {url}/org/example/thing_2.12/1.2.3/" in message
    assert jars.REPOSITORY_ENV in message and jars.JARS_DIR_ENV in message
    assert list((tmp_path / "jars").iterdir()) == []


def test_the_pinned_jars_are_in_the_venv_and_match_their_checksums():
    for jar in jars.ALL:
        path = jars.jars_dir() / jar.file_name
        assert path.is_file(), f"make install fetches {jar.coordinates}"
        assert hashlib.sha256(path.read_bytes()).hexdigest() == jar.sha256


def test_dbt_merge_jars_fetches_the_benchmarks_jars_only_with_bench(
    mirror, tmp_path, monkeypatch, capsys
):
    root, url, served = mirror
    bench_jar = jars.Jar("org.example", "bench_2.12", "0.1", hashlib.sha256(CONTENT).hexdigest())
    _publish(root, JAR, CONTENT)
    _publish(root, bench_jar, CONTENT)
    monkeypatch.setenv(jars.REPOSITORY_ENV, url)
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(tmp_path / "jars"))
    monkeypatch.setattr(jars, "ALL", (JAR,))
    monkeypatch.setattr(jars, "BENCH", (bench_jar,))
    assert jars.main([]) == 0
    assert [Path(p).name for p in capsys.readouterr().out.split()] == [JAR.file_name]
    assert len(served) == 1, "without --bench, the benchmarks' jar is not fetched"
    assert jars.main(["--bench"]) == 0
    listed = [Path(p).name for p in capsys.readouterr().out.split()]
    assert listed == [JAR.file_name, bench_jar.file_name]
    assert len(served) == 2


def test_hudi_is_pinned_for_the_benchmarks_and_no_session_loads_it(tmp_path):
    assert jars.HUDI in jars.BENCH and jars.HUDI not in jars.ALL
    for table_format in sessions.TABLE_FORMATS:
        settings = sessions.SessionSettings(
            warehouse=tmp_path, log_dir=tmp_path, table_format=table_format
        )
        conf = sessions.resolve_conf(settings)
        assert jars.HUDI.artifact not in conf["spark.jars"], table_format
        assert "hudi" not in conf["spark.sql.extensions"].lower(), table_format
        assert "spark.serializer" not in conf, table_format
