"""The training backends of ``train_grpo``: ``get(name)`` is a backend's ``Backend`` object (grpoflow.training.Backend:
everything the rest of grpoflow asks of a backend instead of its name), from the registry (grpoflow.backends.registry:
one line per backend). Also here: what the workflow derives from every backend alike (``training_command``, SLURM
resources) and docs/backends.md's settings table (``python -m grpoflow.backends table``).

A backend is one folder, ``grpoflow/backends/<name>/``: its ``__init__.py`` defines ``BACKEND``, and it imports
grpoflow.training (the protocol, the shared run frame and memory model), never this package's modules nor
grpoflow.config. The registry is imported on first use (``get``), not with this package: a job that runs one
backend's entry point imports none of the others. Importing a backend's package stays light (no torch, TRL, verl,
Ray or JAX): the Snakefile imports every one on each dry-run. docs/backends.md ("Adding a backend") lists what a new
backend writes.
"""

from __future__ import annotations

from grpoflow.training import Backend

__all__ = [
    "INTERFACE",
    "Backend",
    "attempt_runtime",
    "declared_device",
    "evaluation_device",
    "get",
    "names",
    "of",
    "settings_table",
    "slurm_resources",
    "stop_signal",
    "training_command",
]

# What every Backend object provides (grpoflow.training.Backend; tests/backends/test_registry.py checks each).
INTERFACE = (
    "name",
    "command",
    "SETTINGS",
    "checkpoints",
    "METRICS",
    "check",
    "plane",
    "accelerator",
    "environment",
    "MERGE_CHECK",
    "merge",
    "MERGE_CHECKED_WITH",
    "validate",
    "GENERATOR",
    "summary",
    "declared_device",
    "checkpoint_size",
    "merged_size",
)


def _table() -> dict[str, Backend]:
    from grpoflow.backends.registry import BACKENDS

    return BACKENDS


def names() -> list[str]:
    """The registered backends' names, in the registry's order."""
    return list(_table())


def default() -> str:
    """The name of the backend an experiment gets when it names none (the registry's ``DEFAULT``)."""
    from grpoflow.backends.registry import DEFAULT

    return DEFAULT.name


def get(name: str) -> Backend:
    """The Backend object of ``name``."""
    try:
        return _table()[name]
    except KeyError:
        raise KeyError(f"unknown backend {name!r}: one of {', '.join(sorted(_table()))}") from None


def of(exp: dict) -> Backend:
    """The Backend object of a resolved experiment."""
    return get(exp["backend"])


def declared_device(exp: dict) -> str:
    """The accelerator an experiment's jobs were declared for, which the job checks it runs on ("" for none): its
    backend's answer (a Tunix experiment's ``tunix.tpu``)."""
    return of(exp).declared_device(exp)


def evaluation_device(evaluation: dict, experiments: dict) -> str:
    """The accelerator the evaluate jobs were declared for ("" for none): when ``evaluation.backend`` is a training
    backend's generator, the device that backend's experiments declare (the evaluation section has none of its own:
    it shares training's); "" for the other evaluation backends."""
    name = evaluation.get("backend")
    if name not in _table():
        return ""
    declared = sorted({declared_device(e) for e in experiments.values() if e["backend"] == name} - {""})
    return declared[0] if declared else ""


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


def settings_page(name: str) -> str:
    """The backend's own settings page, ``src/grpoflow/backends/<name>/SETTINGS.md`` (tests/backends/test_registry.py
    checks each registered backend's): what each ``grpo.*`` key becomes in its trainer, from its ``SETTINGS`` alone,
    so that adding a backend writes its page in its folder and edits no shared page."""
    return (
        f"# Settings of the `{name}` backend\n\n"
        f"<!-- generated by `python -m grpoflow.backends settings {name} > src/grpoflow/backends/{name}/SETTINGS.md` "
        "from its Backend's SETTINGS; tests/backends/test_registry.py checks it. Do not edit by hand. -->\n\n"
        f"What each `grpo.*` key becomes in the trainer of `backend: {name}` (its Backend's `SETTINGS` table). "
        "A `grpo.*` key not listed is not read by this backend. "
        "Its own keys (the experiment's section of its name) are in [config/README.md](../../../../config/README.md); "
        "`python -m grpoflow.backends table` prints every registered backend side by side.\n\n" + settings_table([name])
    )


def settings_table(which: list[str] | None = None) -> str:
    """One row per grpoflow key, one column per backend (its ``SETTINGS``): the given backends', or every registered
    one's (``python -m grpoflow.backends table``; docs/backends.md holds it for the shipped backends)."""
    which = list(which or _table())
    tables = {n: get(n).SETTINGS for n in which}
    keys = sorted({k for t in tables.values() for k in t})
    lines = ["| grpoflow key | " + " | ".join(which) + " |", "|---|" + "---|" * len(which)]
    for key in keys:
        cells = [cell(tables[n][key]) if key in tables[n] else "(not supported)" for n in which]
        lines.append(f"| `{key}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def cell(value: str) -> str:
    """A ``SETTINGS`` value in Markdown: setting names in backticks, a note (words with spaces) as plain text."""
    return ", ".join(part if " " in part else f"`{part}`" for part in value.split(", "))
