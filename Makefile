# From a fresh clone: `make run` starts a local cluster, `make test` runs the whole test suite.
# Both create .venv and install the project into it first; `make test` (and `make run` with
# ARGS=--zookeeper) also installs Debian's zookeeper package when it is missing; `make test` also
# installs Debian's libfuse3 for the power-cut file system of the fault tests, and Debian's kcat for the
# Kafka tests.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Strom's Spark SQL glue (strom/spark/jvm.py): compiled with the JDK against pyspark's jars.
GLUE_JAR := strom/spark/java/strom-spark.jar
GLUE_SOURCES := $(shell find strom/spark/java -type f ! -name '*.jar' ! -name '*.tmp')

.PHONY: run test test-long lint proto bench clean zookeeper fuse kcat

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

$(GLUE_JAR): $(STAMP) $(GLUE_SOURCES)
	$(BIN)/python -m strom.spark.jvm

zookeeper:
	scripts/install_zookeeper.sh

fuse:
	scripts/install_fuse.sh

kcat:
	scripts/install_kcat.sh

run: $(STAMP) $(GLUE_JAR) $(if $(findstring --zookeeper,$(ARGS)),zookeeper)
	$(BIN)/strom local $(ARGS)

test: $(STAMP) $(GLUE_JAR) zookeeper fuse kcat
	$(BIN)/ruff check strom tests scripts bench
	$(BIN)/mypy
	$(BIN)/mypy tests/lake  # a run of its own: its conftest and tests/spark's share a module name
	$(BIN)/pytest -q -p no:cacheprovider -m "not long" $(PYTEST_ARGS)

# the tests `make test` leaves out for time (marked `long`); the fault campaign is `python -m tests.faults`
test-long: $(STAMP) $(GLUE_JAR) zookeeper fuse kcat
	$(BIN)/pytest -q -p no:cacheprovider -m long $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check strom tests scripts bench
	$(BIN)/mypy
	$(BIN)/mypy tests/lake

proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py

clean:
	rm -rf $(VENV) strom-data .pytest_cache .mypy_cache
