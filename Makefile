# From a fresh clone: `make run` starts a local cluster, `make test` runs the whole test suite.
# Both create .venv and install the project into it first; `make test` (and `make run` with
# ARGS=--zookeeper) also installs Debian's zookeeper package when it is missing; `make test` also
# installs Debian's libfuse3 for the power-cut file system of the fault tests.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint proto bench clean zookeeper fuse

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

zookeeper:
	scripts/install_zookeeper.sh

fuse:
	scripts/install_fuse.sh

run: $(STAMP) $(if $(findstring --zookeeper,$(ARGS)),zookeeper)
	$(BIN)/strom local $(ARGS)

test: $(STAMP) zookeeper fuse
	$(BIN)/ruff check strom tests scripts bench
	$(BIN)/mypy
	$(BIN)/mypy tests/lake  # a run of its own: its conftest and tests/spark's share a module name
	$(BIN)/pytest -q -p no:cacheprovider $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check strom tests scripts bench
	$(BIN)/mypy
	$(BIN)/mypy tests/lake

proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py

clean:
	rm -rf $(VENV) strom-data .pytest_cache .mypy_cache
