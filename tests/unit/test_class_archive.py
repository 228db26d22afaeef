"""The class archive sessions start from (class_archive): where it is, when a session
uses it, and that a failed build leaves nothing. The run's session starting from it is
checked in tests/functional/test_relations.py."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from dbt.adapters.spark_session import class_archive, jars


@pytest.fixture
def jars_dir(tmp_path, monkeypatch):
    """A jars folder of its own, with empty files standing in for the pinned jars (a
    session only checks that they are there, so nothing is fetched)."""
    folder = tmp_path / "jars"
    folder.mkdir()
    for jar in jars.ALL:
        (folder / jar.file_name).write_bytes(b"")
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(folder))
    monkeypatch.delenv(class_archive.ARCHIVE_ENV, raising=False)
    return folder


def test_the_archive_is_kept_beside_the_jars_and_named_by_java_and_classpath(jars_dir, monkeypatch):
    java = sys.executable  # any file stands in for the java binary
    path = class_archive.archive_path(java)
    assert path.parent == jars_dir.parent / "class-archive"
    assert path.name.startswith("spark-") and path.suffix == ".jsa"
    assert class_archive.archive_path(java) == path, "the same environment, the same key"
    # another pinned jar (a new Iceberg, say) needs another archive
    monkeypatch.setattr(jars, "ALL", (dataclasses.replace(jars.ALL[0], version="0.0.1"),))
    assert class_archive.archive_path(java) != path
    # and another Java
    monkeypatch.undo()
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(jars_dir))
    assert class_archive.archive_path("/bin/sh") != path


def test_a_session_uses_the_archive_only_where_it_can(jars_dir, monkeypatch):
    java = sys.executable
    assert class_archive.java_options(java, 17) == "", "not built: no option"
    path = class_archive.archive_path(java)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    options = class_archive.java_options(java, 17)
    assert options == f"-XX:SharedArchiveFile={path} -Xlog:cds*=off"
    # Java 11 has no dynamic archives (the option would stop its JVM), an unknown Java
    # is not risked, and the setting turns it off
    assert class_archive.java_options(java, 11) == ""
    assert class_archive.java_options(java, None) == ""
    monkeypatch.setenv(class_archive.ARCHIVE_ENV, "off")
    assert class_archive.java_options(java, 17) == ""
    assert class_archive.ensure(java, 17) is None


def test_a_failed_build_raises_and_leaves_nothing(jars_dir, monkeypatch):
    # the training session cannot start: its Java does not exist
    monkeypatch.setenv("JAVA_HOME", str(jars_dir / "no-java"))
    path = class_archive.archive_path(sys.executable)
    with pytest.raises(RuntimeError, match="(?s)training session failed .*JAVA_HOME is set to"):
        class_archive.build(path)
    assert not path.exists()
    assert not [p for p in path.parent.iterdir()], "no partial archive is left"


def test_dbt_merge_jars_says_when_the_archive_cannot_be_built(jars_dir):
    env = {**os.environ, "JAVA_HOME": str(jars_dir / "no-java")}
    done = subprocess.run(
        [sys.executable, "-m", "dbt.adapters.spark_session.jars", "--class-archive"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "no class archive was built" in done.stderr and "JAVA_HOME" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
