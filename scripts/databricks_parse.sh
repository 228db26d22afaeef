#!/usr/bin/env bash
# `dbt parse` of a project that installs dbt_merge, under the real dbt-databricks
# adapter with Delta tables, without a workspace: what can be checked for
# Databricks here (anything that connects cannot).
#
# dbt-databricks 1.11 pins dbt-spark < 1.11 and dbt-adapters < 1.23, which the
# project's own venv cannot hold, so it gets a venv of its own (.venv-databricks,
# git-ignored, made once). A temporary project installs dbt_merge as a package, the
# way a user does, and turns its demo on (DBT_MERGE_DEMO=1: the demo's folders exist
# only then, dbt_project.yml), with:
#   - `+file_format: delta` for the package's models and seeds,
#   - a profile with a `databricks` output (placeholders: nothing connects),
#   - the one-macro file that makes `incremental_strategy='upsert'` a custom
#     strategy of dbt-databricks (docs/upserts.md).
# The check fails unless dbt parses the project with adapter type databricks and
# the manifest holds the demo models (none on Iceberg), the upsert models with
# their strategy, the Python models and the root project's strategy macro.
#
# Usage: scripts/databricks_parse.sh      (DBT_MERGE_DATABRICKS_VENV=... to move the venv)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${DBT_MERGE_DATABRICKS_VENV:-$root/.venv-databricks}
python=${PYTHON:-python3.11}
export DBT_SEND_ANONYMOUS_USAGE_STATS=false

if [ ! -x "$venv/bin/dbt" ]; then
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet "dbt-databricks==1.11.8" "dbt-core==1.11.8"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/macros"
cat >"$work/dbt_project.yml" <<'YAML'
name: my_project
version: "1.0"
config-version: 2
profile: my_project
models:
  dbt_merge:
    +file_format: delta
seeds:
  dbt_merge:
    +file_format: delta
YAML
printf 'packages:\n  - local: %s\n' "$root" >"$work/packages.yml"
cat >"$work/macros/get_incremental_upsert_sql.sql" <<'SQL'
{% macro get_incremental_upsert_sql(arg_dict) %}
  {{ return(dbt_merge.get_incremental_upsert_sql(arg_dict)) }}
{% endmacro %}
SQL
cat >"$work/profiles.yml" <<'YAML'
my_project:
  target: databricks
  outputs:
    databricks:
      type: databricks
      catalog: main
      schema: dbt_merge
      host: example.cloud.databricks.com
      http_path: /sql/1.0/warehouses/0000000000000000
      token: placeholder
      threads: 4
YAML

"$venv/bin/dbt" --version | sed -n '/Plugins/,$p'
(cd "$work" && "$venv/bin/dbt" deps --profiles-dir . && DBT_MERGE_DEMO=1 "$venv/bin/dbt" parse --profiles-dir .)

"$venv/bin/python" - "$work/target/manifest.json" <<'PY'
import json
import sys

manifest = json.load(open(sys.argv[1]))
adapter = manifest["metadata"]["adapter_type"]
assert adapter == "databricks", adapter
models = {n["name"]: n for n in manifest["nodes"].values() if n["resource_type"] == "model"}
upserts = sorted(n for n, m in models.items() if m["config"].get("incremental_strategy") == "upsert")
python = sorted(n for n, m in models.items() if m["language"] == "python")
formats = {m["config"].get("file_format") for m in models.values()} - {None}
assert "macro.my_project.get_incremental_upsert_sql" in manifest["macros"], "no strategy macro"
assert upserts and python and len(models) >= 20, (len(models), upserts, python)
assert formats == {"delta"}, formats
print(f"parsed with dbt-databricks: {len(models)} models, {len(manifest['macros'])} macros")
print(f"  file formats: {sorted(formats)}")
print(f"  upsert models: {', '.join(upserts)}")
print(f"  Python models: {', '.join(python)}")
PY
