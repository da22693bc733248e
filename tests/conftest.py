"""Fixtures shared by every test folder (helpers live in grpoflow_testing.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from grpoflow_testing import REPO, load_yaml, make_workdir
from hypothesis import settings

# Property tests draw the same examples on every clone and machine: derandomized (examples from a fixed seed) and
# no example database carried between runs. A test's own @settings may add to this, not undo it.
settings.register_profile("grpoflow", derandomize=True, database=None, print_blob=True)
settings.load_profile("grpoflow")


@pytest.fixture
def workdir(tmp_path) -> Path:
    return make_workdir(tmp_path)


@pytest.fixture(scope="session")
def default_config() -> dict:
    return load_yaml(REPO / "config" / "config.yaml")


@pytest.fixture(scope="session")
def local_slurm() -> dict:
    """A real SLURM on this host, shared by every SLURM test of the session: two slurmd nodes (one-node jobs
    schedule on either), partition gpu, 8 stand-in GPUs per node (tests/slurm/start.sh). Skips visibly where the
    machine cannot run one (fails under CI=true). Stops at the end of the session what it started itself (a
    cluster that was already running, e.g. a developer's, is left running)."""
    from grpoflow_testing import start_local_slurm, stop_local_slurm

    cluster = start_local_slurm(nodes=2)
    yield cluster
    if cluster["started"]:
        stop_local_slurm()


@pytest.fixture(scope="session")
def short_local_run(tmp_path_factory) -> Path:
    """The shortened embedded default (tests/pipeline/short.yaml) run once with profiles/local; read-only for
    tests (copy it with grpoflow_testing.copy_workdir to change anything)."""
    from grpoflow_testing import LOCAL_PROFILE, SHORT_CONFIG, snakemake

    wd = make_workdir(tmp_path_factory.mktemp("short-local"))
    snakemake([*LOCAL_PROFILE, *SHORT_CONFIG], wd, timeout=1800)
    return wd


@pytest.fixture(scope="session")
def slurm_pipeline_run(local_slurm, tmp_path_factory):
    """The shortened embedded default through profiles/slurm (+ tests/slurm/cluster_shape.yaml: GPU requests),
    with a made-up HF_TOKEN in the environment, started in the background when first requested (the SLURM fault
    tests start it early, so that it runs while they wait on SLURM). ``.result()`` waits for it; ``.token``."""
    import secrets

    from grpoflow_testing import REPO, SHORT_CONFIG, BackgroundSnakemake

    wd = make_workdir(tmp_path_factory.mktemp("short-slurm"))
    token = "hf_" + secrets.token_hex(17)
    run = BackgroundSnakemake(
        ["--configfile", *SHORT_CONFIG[1:], str(REPO / "tests" / "slurm" / "cluster_shape.yaml")],
        wd,
        env={"HF_TOKEN": token},
    )
    run.token = token
    yield run
    run.result()  # never leave it running past the session


# ---- one tiny SFT start and one set of genuine verl checkpoints for every test folder that needs them -------------


def _mergekit():
    """tests/merge/mergekit.py, loaded by path (a conftest.py cannot import another folder's plain modules)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mergekit", REPO / "tests" / "merge" / "mergekit.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory, default_config) -> str:
    """A tiny Qwen3 SFT start (weights, tokenizer with chat template, generation_config) built once per session
    from the shipped GSM8K sample: the merge tests, the verl wrapper tests and the job-environment tests share it.
    Read-only: copy it to change anything."""
    return _mergekit().build_tiny_base(tmp_path_factory.mktemp("tinybase"), default_config)


@pytest.fixture(scope="session")
def verl_full_checkpoints(tmp_path_factory, tiny_base) -> dict:
    """{step: checkpoints root} for steps 2, 3 and 4: genuine verl FSDP2 checkpoints of tiny_base (each root holds
    that one step), all written by one torchrun. Read-only: copy a root to change anything."""
    root = tmp_path_factory.mktemp("verl_full")
    return _mergekit().write_checkpoints(
        tiny_base, {s: root / f"step{s}" / "checkpoints" for s in (2, 3, 4)}, lora=False
    )


@pytest.fixture(scope="session")
def verl_lora_checkpoint(tmp_path_factory, tiny_base):
    """A genuine verl FSDP2 checkpoint of tiny_base with a LoRA adapter, at step 2 (read-only)."""
    root = tmp_path_factory.mktemp("verl_lora") / "checkpoints"
    return _mergekit().write_checkpoints(tiny_base, {2: root}, lora=True)[2]
