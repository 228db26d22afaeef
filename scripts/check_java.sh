#!/usr/bin/env bash
# Spark 3.5 runs inside the dbt process and needs a Java runtime (17 is what
# dbt_merge is tested on). Say how to get one instead of failing later with a
# Py4J "Java gateway process exited" error.
set -u
if [ -n "${JAVA_HOME:-}" ]; then
  java="$JAVA_HOME/bin/java"
  if [ ! -x "$java" ]; then
    echo "JAVA_HOME is set to '$JAVA_HOME' but '$java' is not an executable java." >&2
    echo "Point JAVA_HOME at a Java 17 installation, or unset it to use 'java' from PATH." >&2
    exit 1
  fi
else
  java=$(command -v java || true)
fi
if [ -z "$java" ]; then
  # shell builtins only: this must work on a bare PATH too
  printf '%s\n' >&2 \
    "Java was not found: JAVA_HOME is not set and 'java' is not on PATH." \
    "dbt_merge runs Apache Spark 3.5 in the dbt process and needs Java 17:" \
    "  Debian/Ubuntu:  sudo apt-get install -y openjdk-17-jre-headless" \
    "  Fedora/RHEL:    sudo dnf install -y java-17-openjdk-headless" \
    "  macOS:          brew install openjdk@17" \
    "Then run this command again (or set JAVA_HOME to the installation)."
  exit 1
fi
version=$("$java" -version 2>&1 | sed -n 's/.*version "\([0-9][0-9]*\)[."].*/\1/p' | head -n 1)
if [ "${version:-0}" != "17" ]; then
  echo "note: found Java ${version:-unknown} at $java; dbt_merge is tested on Java 17." >&2
fi
exit 0
