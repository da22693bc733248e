"""Does this job's environment hold what the job needs? Checked first, in the job's own interpreter.

A cluster-plane job started in the wrong environment would otherwise fail minutes later (after Ray, vLLM or
a model load started) with a traceback. These checks only *find* modules (``importlib.util.find_spec``, no
import: milliseconds, no CUDA initialisation) and stop the job with one line naming what is missing and the
settings that pick the environment. Every job logs which interpreter it runs under first, so a job log
always says which environment ran it.

    python -m grpoflow.envcheck train-verl|merge-verl|eval-vllm|train-tunix|merge-tunix|eval-tunix   # by hand, e.g. under srun
"""

from __future__ import annotations

import importlib.util
import logging
import sys

from grpoflow.errors import GrpoflowError

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

# (module that must be importable, pip package that provides it)
VERL = ("verl", "verl==0.9.1")
VLLM = ("vllm", "vllm (verl[vllm])")
TRANSFER_QUEUE = ("transfer_queue", "TransferQueue (verl[vllm])")
FLASH_ATTN = ("flash_attn", "flash-attn")


def interpreter_line() -> str:
    import os

    first = (os.environ.get("PATH") or "").split(os.pathsep)[0]
    return f"job interpreter: {sys.executable} (Python {sys.version.split()[0]}, prefix {sys.prefix}); PATH starts with {first}"


def log_interpreter() -> None:
    log.info(interpreter_line())


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a broken half-installed one
        return False


def train_verl_needs(overrides: dict[str, str]) -> list[tuple[str, str, str]]:
    """What ``python -m verl.trainer.main_ppo`` with these overrides imports: (module, package, why)."""
    needs = [(*VERL, "the trainer")]
    if overrides.get("trainer.use_v1", "true").lower() == "true":
        needs.append((*TRANSFER_QUEUE, "verl's default trainer.use_v1=true"))
    rollout = overrides.get("actor_rollout_ref.rollout.name", "vllm")
    if rollout == "vllm":
        needs.append((*VLLM, "actor_rollout_ref.rollout.name=vllm"))
    attn = overrides.get("actor_rollout_ref.model.override_config.attn_implementation", "flash_attention_2")
    if attn == "flash_attention_2":
        needs.append((*FLASH_ATTN, "attn_implementation flash_attention_2, verl's default"))
    return needs


TUNIX = ("tunix", "google-tunix==0.1.7")
JAX = ("jax", "jax")
ORBAX = ("orbax.checkpoint", "orbax-checkpoint")

NEEDS = {
    "merge-verl": [(*VERL, "verl's model merger")],
    "eval-vllm": [(*VLLM, "evaluation.backend: vllm")],
    "train-tunix": [(*TUNIX, "backend: tunix"), (*JAX, "backend: tunix")],
    "merge-tunix": [(*TUNIX, "Tunix's Qwen3 and checkpoint manager"), (*ORBAX, "Tunix's checkpoints")],
    "eval-tunix": [(*TUNIX, "evaluation.backend: tunix"), (*JAX, "evaluation.backend: tunix")],
}
JOB_NAMES = {
    "merge-verl": "merge_checkpoint (backend verl)",
    "eval-vllm": "evaluate (backend vllm)",
    "train-tunix": "train_grpo (backend tunix)",
    "merge-tunix": "merge_checkpoint (backend tunix)",
    "eval-tunix": "evaluate (backend tunix)",
}


def require(job: str, needs: list[tuple[str, str, str]], how_to_pick: str = HOW_TO_PICK) -> None:
    """Raise one-line GrpoflowError unless every module of ``needs`` is importable here."""
    missing = [(pkg, why) for module, pkg, why in needs if not _found(module)]
    if missing:
        what = ", ".join(f"{pkg} (for {why})" for pkg, why in missing)
        raise GrpoflowError(f"environment check failed for {job}: {sys.executable} lacks {what}; {how_to_pick}")
    log.info("environment check for %s passed: %s importable", job, ", ".join(m for m, _, _ in needs))


def check(kind: str, overrides: dict[str, str] | None = None) -> None:
    """The check of one kind of job outside the local plane: train-verl (needs the trainer's overrides),
    merge-verl, eval-vllm, train-tunix, merge-tunix, eval-tunix."""
    if kind == "train-verl":
        require("train_grpo (backend verl)", train_verl_needs(overrides or {}))
    elif kind in NEEDS:
        require(JOB_NAMES[kind], NEEDS[kind], HOW_TO_PICK_TUNIX if kind.endswith("-tunix") else HOW_TO_PICK)
    else:
        raise GrpoflowError(f"unknown environment check {kind!r}: use train-verl, {', '.join(NEEDS)}")


def main(argv: list[str] | None = None) -> int:
    from grpoflow.workflow import guarded, setup_logging

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print(f"usage: python -m grpoflow.envcheck train-verl|{'|'.join(NEEDS)}", file=sys.stderr)
        return 2
    setup_logging()
    log_interpreter()
    guarded(check, args[0], what="environment check")
    return 0


if __name__ == "__main__":
    sys.exit(main())
