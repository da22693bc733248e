"""The evaluation backends, in one table: what ``evaluation.backend`` names, and everything the workflow asks of it.

``evaluate`` imports the backend's module and calls its ``generate``; grpoflow.deployment runs the job in its plane's
interpreter; grpoflow.workflow checks its environment first (a grpoflow.envcheck kind) and, on a GPU, the node
(grpoflow.gpucheck); grpoflow.preflight finds the same modules at Snakemake's start; ``rules/common.smk`` gives a TPU
job the workflow's ``tpu`` resource. A new evaluation backend is one module with ``generate`` and one row here (and
its name in the schema's ``evaluation.backend`` enum).
"""

from __future__ import annotations

from dataclasses import dataclass

from grpoflow.backends import CLUSTER, GPU, LOCAL, NO_ACCELERATOR, TPU, TUNIX


@dataclass(frozen=True)
class EvaluationBackend:
    name: str
    module: str  # its generate(source, tokenizer, prompt_ids, gen, stops, threads=, vllm_cfg=)
    plane: str  # grpoflow.deployment's plane of the evaluate job
    check: str | None  # the grpoflow.envcheck kind the job checks first (None: the local plane, nothing to find)
    accelerator: str  # GPU: the job checks the node first; TPU: it takes the `tpu` resource


DEFAULT = "transformers"  # the schema's default of evaluation.backend

EVALUATION_BACKENDS = {
    b.name: b
    for b in (
        # On CPU (the local plane, tests) or a GPU when torch sees one: it needs neither.
        EvaluationBackend("transformers", "grpoflow.evaluation.hf_backend", LOCAL, None, NO_ACCELERATOR),
        EvaluationBackend("vllm", "grpoflow.evaluation.vllm_backend", CLUSTER, "eval-vllm", GPU),
        EvaluationBackend("tunix", "grpoflow.evaluation.tunix_backend", TUNIX, "eval-tunix", TPU),
    )
}


def evaluation_backend(name: str | None) -> EvaluationBackend:
    """The row of ``name`` (None: the default, as an evaluation section without ``backend`` means)."""
    try:
        return EVALUATION_BACKENDS[name or DEFAULT]
    except KeyError:
        raise KeyError(
            f"unknown evaluation backend {name!r}: one of {', '.join(sorted(EVALUATION_BACKENDS))}"
        ) from None
