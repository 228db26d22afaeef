# dbt_merge: the two commands of the README are `make run` and `make test`.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
JARS_STAMP := $(VENV)/.installed-jars
ARCHIVE_STAMP := $(VENV)/.installed-class-archive
DBT    := $(BIN)/dbt
DBT_ARGS := --project-dir . --profiles-dir .

export DBT_SEND_ANONYMOUS_USAGE_STATS := false
export SPARK_LOCAL_IP ?= 127.0.0.1
# the demo's models, seeds and tests are on only where DBT_MERGE_DEMO is 1 (dbt_project.yml);
# the test suite sets it itself, for the tests that build the demo
run docs: export DBT_MERGE_DEMO := 1

.PHONY: run test test-long install class-archive install-bench check-java docs docs-site bench bench-publish bench-closure bench-entity-merge bench-upsert bench-bin-packing bench-seed bench-changelog bench-change-feed bench-state-log soak cluster-up cluster-down thrift-up thrift-down databricks-parse lint clean

## run: install if needed, then the demo `dbt build` (seeds, models, tests) on embedded Spark
run: install check-java
	$(DBT) build $(DBT_ARGS)

## test: install if needed, then the whole suite (pytest: unit, dbt functional, peer suite, demo build)
## on TEST_WORKERS workers (tests/scheduling.py), randomised tests on their fixed CI samples; the slowest 25 tests are listed
TEST_WORKERS ?= 2
TEST_ARGS := -n $(TEST_WORKERS) --durations=25
test: install check-java class-archive
	$(BIN)/python -m pytest $(TEST_ARGS)

## test-long: the suite with the randomised tests' long sweep: more rounds, fresh seeds from
## DBT_MERGE_TEST_SEED (drawn here; set it to replay a failing seed); run before a release
test-long: export DBT_MERGE_TEST_PROFILE := long
test-long: export DBT_MERGE_TEST_SEED ?= $(shell od -An -N3 -tu4 /dev/urandom | tr -d ' ')
test-long: install check-java class-archive
	@echo "test-long: DBT_MERGE_TEST_SEED=$$DBT_MERGE_TEST_SEED"
	$(BIN)/python -m pytest $(TEST_ARGS)

## docs: dbt docs generate for the local target
docs: install check-java
	$(DBT) docs generate $(DBT_ARGS)

## docs-site: the documentation site (mkdocs.yml, docs/) built strict into site/: a broken link, anchor or include fails
docs-site: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

## bench: every benchmark at three sizes with its baseline: bench/out/results.json, bench/out/plots/*.png, untracked (about 20 min; BENCH_ARGS="--large" adds larger sizes)
bench: install-bench check-java
	$(BIN)/python bench/sweep.py $(BENCH_ARGS)

## bench-publish: copy results files of bench/out/ to docs/bench/ (PUBLISH="results.json closure.json ...";
## results.json brings the sweep's plots) and render docs/benchmarks.md's tables from them (commit them on purpose)
bench-publish:
	$(BIN)/python bench/publish.py $(PUBLISH)

## bench-closure: the closure benchmark (BENCH_ARGS="--sizes 1000000 --no-baseline" for a quick one)
bench-closure: install check-java
	$(BIN)/python bench/closure_bench.py $(BENCH_ARGS)

## bench-entity-merge: `dbt run` of a whole entity merge against a hand-written baseline
bench-entity-merge: install check-java
	$(BIN)/python bench/entity_merge_bench.py $(BENCH_ARGS)

## bench-upsert: incremental_strategy='upsert' against Apache Hudi 1.0's upserts (copy-on-write, merge-on-read)
## and dbt-spark's merge doing the same work (1M batch into 10M rows; the three tables checked equal)
bench-upsert: install-bench check-java
	$(BIN)/python bench/upsert_bench.py $(BENCH_ARGS)

## bench-bin-packing: 1M items in 1,000 groups: streaming, offline (bins / lower bound), naive baseline
bench-bin-packing: install check-java
	$(BIN)/python bench/bin_packing_bench.py $(BENCH_ARGS)

## bench-seed: `dbt seed` of generated CSVs (5k, 100k, 1M rows) as one DataFrame write against dbt-spark's INSERT batches
bench-seed: install check-java
	$(BIN)/python bench/seed_bench.py $(BENCH_ARGS)

## bench-changelog: an Iceberg table's changes between two snapshots (its changelog, its incremental read, an upsert's events) against the digest's pass over every record
bench-changelog: install check-java
	$(BIN)/python bench/changelog_bench.py $(BENCH_ARGS)

## bench-change-feed: a Delta table's change data feed between two versions (the buckets of its changed ids) against the digest's pass over every record
bench-change-feed: install check-java
	$(BIN)/python bench/change_feed_bench.py $(BENCH_ARGS)

## bench-state-log: the state of a change-following merge appended (a log its readers fold) against today's MERGE, on the tables `make bench-entity-merge BENCH_ARGS="--incremental ..."` left
bench-state-log: install check-java
	$(BIN)/python bench/state_log_bench.py $(BENCH_ARGS)

## soak: issue #74's soak: seeded deliveries to all four families, a seeded quarter of them with a run killed
## (kill -9 of dbt and its JVM) at a random moment, every table compared with a twin warehouse that never failed;
## Iceberg, then Delta (SOAK_ARGS="--deliveries 30 --seed N --keep"; report and warehouses in /tmp/soak-*, kept on failure)
SOAK_ARGS ?= --deliveries 30
soak: install check-java class-archive
	$(BIN)/python bench/soak.py --format iceberg $(SOAK_ARGS)
	$(BIN)/python bench/soak.py --format delta $(SOAK_ARGS)

## cluster-up: a Spark standalone master and two 1-core workers on 127.0.0.1 for `dbt --target cluster`
cluster-up: install check-java
	DBT_MERGE_CLUSTER_PYTHON=$(BIN)/python scripts/cluster.sh up

## cluster-down: stop the cluster of `make cluster-up` (by its pid files in .cluster/)
cluster-down:
	scripts/cluster.sh down

## thrift-up: a Spark Thrift Server on 127.0.0.1:$DBT_MERGE_THRIFT_PORT (10000) for `dbt --target thrift` (scripts/thrift_server.py)
thrift-up: install check-java
	$(BIN)/python scripts/thrift_server.py up

## thrift-down: stop the server of `make thrift-up` (its pid file in .thrift/)
thrift-down:
	@if [ -x $(BIN)/python ]; then $(BIN)/python scripts/thrift_server.py down; else echo "thrift: not running"; fi

## databricks-parse: dbt parse of a project installing dbt_merge under dbt-databricks 1.11 with Delta (own venv, no workspace needed)
databricks-parse:
	PYTHON=$(PYTHON) scripts/databricks_parse.sh

install: $(JARS_STAMP)

## class-archive: the class-data-sharing archive every session's JVM starts from (about a minute, once;
## every later JVM then starts with about a quarter less CPU: src/dbt/adapters/spark_session/class_archive.py)
class-archive: $(ARCHIVE_STAMP)

install-bench: $(BENCH_STAMP)

# the pinned Iceberg and Delta jars (src/dbt/adapters/spark_session/jars.py) from Maven Central
# (or DBT_MERGE_MAVEN_REPOSITORY) into $(VENV)/share/dbt_merge/jars, once
$(JARS_STAMP): $(STAMP) src/dbt/adapters/spark_session/jars.py
	$(BIN)/dbt-merge-jars >/dev/null
	@touch $(JARS_STAMP)

$(ARCHIVE_STAMP): $(JARS_STAMP) src/dbt/adapters/spark_session/class_archive.py
	$(BIN)/dbt-merge-jars --class-archive >/dev/null
	@touch $(ARCHIVE_STAMP)

# the benchmarks' Python packages, and Apache Hudi's pinned Spark bundle (jars.BENCH,
# for bench/upsert_bench.py), which `make install` and the sessions of `make test` never fetch
$(BENCH_STAMP): $(JARS_STAMP) src/dbt/adapters/spark_session/jars.py
	$(BIN)/python -m pip install --quiet -c requirements/constraints.txt \
	  -e ".[test,bench]" --config-settings editable_mode=compat
	$(BIN)/dbt-merge-jars --bench >/dev/null
	@touch $(BENCH_STAMP)

$(STAMP): pyproject.toml requirements/constraints.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { \
	  echo "$(PYTHON) was not found. dbt_merge needs Python 3.11 (set PYTHON=/path/to/python3.11)." >&2; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c requirements/constraints.txt \
	  -e ".[test]" --config-settings editable_mode=compat
	@touch $(STAMP)

check-java:
	@scripts/check_java.sh

lint: install
	$(BIN)/ruff check src tests python_models bench

clean:
	rm -rf target dbt_packages logs warehouse warehouse-delta site
