# The two set-up commands of the README:
#   make demo   # set up .venv, then run the whole embedded default: snakemake --profile profiles/local
#   make test   # set up .venv, then run the test suite (what CI runs)
# Both are safe to repeat: the environment is rebuilt only when the lock file changes.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.grpoflow-installed

.PHONY: setup demo test dag clean-results

setup: $(STAMP)

$(STAMP): requirements/local.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements/local.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

demo: setup
	$(BIN)/snakemake --profile profiles/local

test: setup
	$(BIN)/pytest

dag: setup  # the DAG picture of the README (needs Graphviz's `dot`)
	$(BIN)/snakemake --dag | dot -Tsvg > dag.svg

clean-results:
	rm -rf results resources logs .snakemake
