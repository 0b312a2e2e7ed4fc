# Tidelog developer entry points. Everything runs from the project-local .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install ext run test lint format bench bench-quick bench-kafka clean soak interop browser tiered

install: $(STAMP)

# Reinstall only when the project metadata or this recipe changes: a second `make install`
# is a no-op.
# The editable install serves our flat layout through an import hook, which
# `pkgutil.iter_modules()` cannot list; PySpark finds `format("tidelog")` with exactly that
# scan, so from any directory but this one the format was missing (issue 24). The .pth
# written after it puts the repository on the venv's sys.path, where the scan sees
# `pyspark_tidelog`, and new modules are picked up with no reinstall. (setuptools' `compat`
# mode writes the same line but is deprecated; `strict` mode links files one by one and
# misses modules added later.)
$(STAMP): pyproject.toml setup.py protocol/kafka/_recordwalk.c Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[spark,dev,bench,kafka]'
	$(BIN)/python -c 'import pathlib, sysconfig; \
		pathlib.Path(sysconfig.get_path("purelib"), "tidelog-repository.pth").write_text("$(CURDIR)\n")'
	touch $(STAMP)

# The C record walk built in place, as `make install` builds it: for a second checkout
# (a git worktree) run by an environment installed from the first.
ext:
	$(BIN)/python -c 'import setup; setup.build_in_place()'

run: install
	$(BIN)/tidelog serve --data-dir ./data --listen 127.0.0.1:9092 --metrics-listen 127.0.0.1:9644

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The long reliability runs (docs/reliability.md): 200 kill -9 cycles, failpoint sweeps to
# the 5th hit, 40 power cuts, 30 min of load, 20x the fuzzing examples.
soak: install
	TIDELOG_SOAK_KILL_CYCLES=200 TIDELOG_SOAK_SWEEP_HITS=5 TIDELOG_SOAK_POWER_CUTS=40 \
	TIDELOG_SOAK_LOAD_S=1800 TIDELOG_SOAK_FUZZ_EXAMPLES=6000 \
	$(BIN)/python -m pytest tests/reliability tests/fuzz $(PYTEST_ARGS)

# Tiered storage (issue 39, docs/tiered-storage.md, docs/reliability.md) against moto's
# S3 server on loopback: the kill -9 sweep of every upload and deletion step at its 1st and
# 3rd hit (tierstore, 3-7 min here), the random kill -9 loop during uploads and remote
# deletions at 40 cycles (~6 min), every fault of the fault proxy during uploads and reads,
# Spark reading from the bucket. Tests marked `tiered` run only here
# (tests/tiered/conftest.py); `make test` runs the rest.
tiered: install
	TIDELOG_TIERED_KILL_CYCLES=40 TIDELOG_TIERED_FULL=1 $(BIN)/python -m pytest -m tiered \
		tests/tiered -o faulthandler_timeout=1700 $(PYTEST_ARGS)

# Apache Kafka as oracle and peer (issue 19, docs/kafka-interop.md): the real Kafka 4.x broker
# (jars fetched by Maven into ~/.cache/tidelog), kcat from Debian, the Python Kafka clients.
INTEROP_STAMP := $(VENV)/.interop-installed
# The JDK compiles interop/jvm_apps (Streams, kafka-clients); npm installs interop/node's lockfile.
INTEROP_APT := kcat maven openjdk-17-jre-headless openjdk-17-jdk-headless nodejs npm

$(INTEROP_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[spark,dev,bench,interop]'
	touch $(INTEROP_STAMP)

# Spark's Kafka source must match its Spark runtime: a separate venv with the pyspark of the
# spark-sql-kafka version Maven serves (interop/spark/pom.xml, see interop/spark_env.py).
SPARK_KAFKA_VERSION := $(shell sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' interop/spark/pom.xml)
INTEROP_SPARK_VENV := .venv-interop-spark
INTEROP_SPARK_STAMP := $(INTEROP_SPARK_VENV)/.installed-$(SPARK_KAFKA_VERSION)

$(INTEROP_SPARK_STAMP): interop/spark/pom.xml
	test -x $(INTEROP_SPARK_VENV)/bin/python || $(PYTHON) -m venv $(INTEROP_SPARK_VENV)
	$(INTEROP_SPARK_VENV)/bin/python -m pip install --quiet 'pyspark==$(SPARK_KAFKA_VERSION)'
	touch $(INTEROP_SPARK_STAMP)

interop: install $(INTEROP_STAMP) $(INTEROP_SPARK_STAMP)
	command -v kcat >/dev/null && command -v mvn >/dev/null && command -v java >/dev/null && \
		command -v javac >/dev/null && command -v npm >/dev/null || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(INTEROP_APT); }
	@command -v go >/dev/null || { echo "interop needs Go >= 1.26 on PATH (interop/go/go.mod): https://go.dev/dl/"; exit 1; }
	$(BIN)/python -m pytest -m interop tests/interop $(PYTEST_ARGS)

# The web console in headless Chromium (docs/console.md): Debian's chromium and
# chromium-driver from apt (no downloaded browser build), Selenium from the `browser`
# extra; a broker with 10,000 topics (20,000 partitions). `make browser SCREENSHOTS=docs/console`
# also retakes docs/console.md's screenshots (they change every run: timestamps).
SCREENSHOTS ?=
BROWSER_STAMP := $(VENV)/.browser-installed
BROWSER_APT := chromium chromium-driver

$(BROWSER_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[spark,dev,bench,kafka,browser]'
	touch $(BROWSER_STAMP)

browser: install $(BROWSER_STAMP)
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		  apt-get install -y -qq --no-install-recommends $(BROWSER_APT); }
	TIDELOG_CONSOLE_SCREENSHOTS=$(SCREENSHOTS) $(BIN)/python -m pytest -m browser \
		-o faulthandler_timeout=590 tests/browser $(PYTEST_ARGS)

# Tidelog against Apache Kafka 4.x, Kafka clients and Java perf tools, one run (issue 19
# item 5, docs/benchmarks.md): ~5 min a run on the shared 2-core machine with JVM start-ups and
# Java's tools, so not in `make bench`. Needs what `make interop` installs (Java, Maven).
KAFKA_VS_RESULT := bench/results/kafka-vs-$(shell date -u +%Y-%m-%dT%H%M).json

bench-kafka: install $(INTEROP_STAMP)
	command -v mvn >/dev/null && command -v java >/dev/null || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(INTEROP_APT); }
	$(BIN)/python -m bench.kafka_vs $(KAFKA_VS_ARGS) > $(KAFKA_VS_RESULT)
	$(BIN)/python -m bench.kafka_vs_report $(KAFKA_VS_RESULT) --plot docs/bench-kafka-vs.png

# Types: protocol/api_types.py must be what the schema table renders, and mypy checks
# the handler layer against it ([tool.mypy] in pyproject.toml has the scope).
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m protocol.build_api_types --check
	$(BIN)/mypy

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: install
	$(BIN)/python -m bench.run_all

bench-quick: install
	$(BIN)/python -m bench.run_all --quick

clean:
	rm -rf $(VENV) data build *.egg-info .pytest_cache .ruff_cache .mypy_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
