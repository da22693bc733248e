"""What every training backend is built from, below all of them: the ``Backend`` protocol each one's object
implements (``BACKEND`` in ``grpoflow.backends.<name>``, a line of grpoflow.backends.registry), the run frame every
trainer shares (``common``: the completion marker, the checkpoint scan, the metrics file, resume, SIGTERM, the entry
point), the memory model every fit check is built on (``memory``) and what the merges share (``merging``).

Nothing here knows a backend: a backend imports this package, never ``grpoflow.backends`` (the registry, above
it) nor ``grpoflow.config`` (which asks it through the registry).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from grpoflow.envcheck import Check
    from grpoflow.training.memory import Architecture


@dataclass(frozen=True)
class Generator:
    """A training backend's generator, the evaluation backend of its name (grpoflow.evaluation.backends): the module
    whose ``generate`` evaluates with the backend's sampler, the plane its evaluate jobs run in, what they check first (a
    grpoflow.envcheck.Check; None: nothing) and what they hold (grpoflow.planes)."""

    module: str
    plane: str
    check: Check | str | None
    accelerator: str


class ResolvedConfig(Protocol):
    """What a backend reads of the resolved configuration (grpoflow.config.WorkflowConfig) when it composes its
    command: named here so that a backend does not import grpoflow.config, which asks it through the registry."""

    experiments: dict[str, dict]

    def experiment(self, name: str) -> dict: ...

    def checkpoint_dir(self, name: str) -> str: ...

    def parquet(self, dataset: str, split: str) -> str: ...


class Backend(Protocol):
    """The interface of a training backend: everything the rest of grpoflow asks of it instead of its name.

    ``name``
        Its registry name (the config's ``backend:``), the key of its section (``<name>:``, written in its folder's
        ``schema.yaml``).
    ``SETTINGS: dict[str, str]``
        grpoflow config key (``grpo.learning_rate``) -> the trainer's own setting it becomes (``GRPOConfig.learning_rate``),
        for every ``grpo.*`` key it reads; docs/backends.md's table is generated from these (``python -m
        grpoflow.backends table``).
    ``METRICS: dict[str, str]``
        The trainer's logged metric -> the ``train_metrics.jsonl`` key (grpoflow.training.common.map_metrics).
    ``MERGE_CHECK: grpoflow.envcheck.Check | None``
        What a ``merge_checkpoint`` job checks first, in its own interpreter (None: nothing).
    ``GENERATOR: Generator | None``
        Its generator (``evaluation.backend: <name>``: the module whose ``generate`` evaluates with its sampler,
        written as its folder's ``generate.py``, which the schema's ``evaluation.backend`` enum reads), or None.
    ``MERGE_CHECKED_WITH: str``
        How grpoflow.merge checks a merged model in the merge job's environment: ``transformers`` (loads it) or
        ``safetensors`` (tensor by tensor against the start's files, where the environment has no torch).
    ``command(cfg, experiment, inputs, outputs) -> str``
        ``train_grpo``'s shell command, composed when Snakemake builds the DAG (a change of it reruns training).
        ``inputs``: ``train``, ``val`` (optional), ``sft``; ``outputs``: ``marker``, ``metrics``. The command runs
        ``python -m grpoflow.backends.<name>.train ...``, which writes both outputs (grpoflow.training.common).
    ``check(name, exp, cfg=None)``
        The config cross-check, run at config load through the registry (grpoflow.config). Light: no trainer import.
    ``checkpoints(checkpoint_dir) -> dict[int, Path]``
        The complete checkpoints of a checkpoint dir by step.
    ``validate(cfg, name) -> dict | None``
        The experiment checked against the trainer's own config schema (``python -m grpoflow.validate``; needs the
        trainer installed): the result, with the line printed under ``summary``; None: the backend has no such check.
    ``merge(checkpoint_dir, step, base, out) -> dict``
        ``merge_checkpoint``'s conversion of a step into a Hugging Face model dir (grpoflow.merge checks it after).
    ``plane(exp)``, ``accelerator(exp)``
        Whose interpreter runs its ``train_grpo`` and ``merge_checkpoint`` jobs, and what that job holds
        (grpoflow.planes).
    ``environment(exp, rule) -> list[(module, package, why)] | None``
        What a job of ``rule`` imports in its plane's interpreter, found there at Snakemake's start (grpoflow.preflight).
    ``summary(name, exp) -> str | None``
        The line ``snakemake -n`` prints for the experiment (its memory estimate and launch), or None.
    ``declared_device(exp) -> str``
        The accelerator the experiment's jobs were declared for, which each job checks it runs on at its start
        (exported by the rules as ``GRPOFLOW_TUNIX_TPU``); "" for none.
    ``checkpoint_size(exp, arch, rank)``, ``merged_size(exp, arch, rank) -> (bytes, how)``
        The disk its checkpoint and the merged model take (grpoflow.preflight's disk check).

    Importing a backend's package stays light (no torch, TRL, verl, Ray or JAX): the Snakefile imports it on every
    dry-run. The trainer is imported by its entry point, in the job.
    """

    name: str
    SETTINGS: dict[str, str]
    METRICS: dict[str, str]
    MERGE_CHECK: Check | None
    GENERATOR: Generator | None
    MERGE_CHECKED_WITH: str

    def command(self, cfg: ResolvedConfig, experiment: str, inputs: dict, outputs: dict) -> str: ...

    def check(self, name: str, exp: dict, cfg: ResolvedConfig | None = None) -> None: ...

    def checkpoints(self, checkpoint_dir) -> dict[int, Path]: ...

    def validate(self, cfg: ResolvedConfig, name: str) -> dict | None: ...

    def merge(self, checkpoint_dir: str, step: int, base: str, out: Path) -> dict: ...

    def plane(self, exp: dict) -> str: ...

    def accelerator(self, exp: dict) -> str: ...

    def environment(self, exp: dict, rule: str) -> list[tuple[str, str, str]] | None: ...

    def summary(self, name: str, exp: dict) -> str | None: ...

    def declared_device(self, exp: dict) -> str: ...

    def checkpoint_size(self, exp: dict, arch: Architecture, rank: int) -> tuple[int, str]: ...

    def merged_size(self, exp: dict, arch: Architecture, rank: int) -> tuple[int, str]: ...
