# The two set-up commands of the README:
#   make demo   # set up .venv, then run the whole embedded default: snakemake --profile profiles/local
#   make test   # set up .venv, then the lint gate (make lint), then the test suite (what CI runs)
# Both are safe to repeat: the environment is rebuilt only when the lock file changes.
# Set-up (requirements/setup-venv): PYTHON is checked against the lock's supported range before anything is created
# (a supported one on this machine is used instead, or one line says what to run); installs with uv when it can be
# had, else pip (INSTALLER=pip forces pip); torch from PyTorch's CPU index when it answers (TORCH_INDEX=, empty: off).
# A failed or interrupted set-up leaves no .venv/ behind.

PYTHON ?= python3
INSTALLER ?= auto
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.grpoflow-installed

.PHONY: setup demo test lint dag clean-results

setup: $(STAMP)

$(STAMP): requirements/local.lock pyproject.toml
	@INSTALLER=$(INSTALLER) TORCH_INDEX=$(TORCH_INDEX) sh requirements/setup-venv $(VENV) "$(PYTHON)" $(firstword $(MAKECMDGOALS) setup)

demo: setup
	$(BIN)/snakemake --profile profiles/local

# ruff and snakefmt settings: pyproject.toml (line length 120, as the code is wrapped).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check .

test: setup lint
	$(BIN)/pytest

dag: setup  # the DAG picture of the README (needs Graphviz's `dot`)
	$(BIN)/snakemake --dag | dot -Tsvg > dag.svg

clean-results:
	rm -rf results resources logs .snakemake
