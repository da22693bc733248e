"""How many GPU jobs may run at once when Snakemake runs every job on this machine (profiles/local): the global
``gpu`` resource.

Snakemake holds jobs apart only by the resources that are global (``--resources``, or registered by the workflow:
``workflow.global_resources``), and ``gpu``, which train_grpo and evaluate ask for, is not one by default. On one
machine two GPU jobs that do not depend on each other then start together: under recipe 004, TRL training (vLLM
at 0.3 of the card) and the baseline vLLM evaluation (0.85) on one card. rules/common.smk registers ``gpu`` as the
GPUs this machine's jobs see, so GPU jobs take turns as ``tpu`` jobs do; ``--resources gpu=N`` replaces the count.

Counted without importing torch (the Snakefile is read on every dry-run): the ``GPU n: ...`` lines of
``nvidia-smi -L`` (physical GPUs; nvidia-smi ignores CUDA_VISIBLE_DEVICES), no more than CUDA_VISIBLE_DEVICES lists
when it is set (the jobs inherit Snakemake's environment; CUDA takes the entries up to the first one that is no
index or GPU-/MIG- UUID, so an empty value, ``-1`` or SLURM's ``NoDevFiles`` hides every GPU). Without nvidia-smi,
or when it fails or hangs, it counts 0. A global ``gpu = 0`` does not stop GPU jobs: Snakemake cuts each job's
request down to the global value (snakemake/rules.py:1118-1124 and resources.py:1195, Snakemake 9.27.1), so they
run unlimited and fail on their own checks, as before.

Only for local execution. Snakemake reads the Snakefile before it knows the executor (``workflow.executor_plugin``
is set in ``Workflow.execute``, workflow.py:1314), so the sign taken is Snakemake's own for a submission to a
cluster: a ``--jobs`` limit (global ``_nodes``; the CLI turns ``--jobs`` into ``--cores`` for local execution,
cli.py:2103-2109, and job_scheduler.py:111 lifts the local core limit when ``_nodes`` is set). Under SLURM the
global value would cut every job's ``gpu`` request, which is what sbatch and the job's srun ask for
(snakemake_executor_plugin_slurm/utils.py:384, snakemake_executor_plugin_slurm_jobstep get_gpu_setting), to the
login node's count, usually 0; the scheduler places GPU jobs there. Nor in a job's own Snakemake (not the main
process). A local run given both ``--cores`` and ``--jobs`` is taken for a submission too (no limit; say
``--resources gpu=N``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping

RESOURCE = "gpu"
SMI_TIMEOUT_S = 20  # nvidia-smi -L answers in about a second
_GPU_LINE = re.compile(r"^GPU \d+:", re.MULTILINE)
_CUDA_ENTRY = re.compile(r"^(\d+|GPU-[0-9a-fA-F-]+|MIG-.+)$")


def cuda_visible(value: str) -> int:
    """How many devices CUDA enumerates under ``CUDA_VISIBLE_DEVICES=value`` (before matching them to GPUs)."""
    n = 0
    for entry in value.split(","):
        if not _CUDA_ENTRY.match(entry.strip()):
            break
        n += 1
    return n


def visible_gpus(environ: Mapping[str, str] = os.environ) -> tuple[int, str]:
    """(the GPUs a job on this machine sees, how they were counted)."""
    smi, how = None, "nvidia-smi not found"
    if shutil.which("nvidia-smi", path=environ.get("PATH")):
        try:
            proc = subprocess.run(
                ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=SMI_TIMEOUT_S, env=dict(environ)
            )
        except subprocess.TimeoutExpired:
            proc, how = None, f"nvidia-smi -L did not answer within {SMI_TIMEOUT_S} s"
        if proc is not None and proc.returncode != 0:
            how = f"nvidia-smi -L failed (exit {proc.returncode})"
        elif proc is not None:
            smi = len(_GPU_LINE.findall(proc.stdout))
            how = f"nvidia-smi -L lists {smi}"
    if "CUDA_VISIBLE_DEVICES" not in environ:
        return smi or 0, how
    listed = cuda_visible(environ["CUDA_VISIBLE_DEVICES"])
    how += f", CUDA_VISIBLE_DEVICES={environ['CUDA_VISIBLE_DEVICES']!r} lists {listed}"
    return (listed if smi is None else min(listed, smi)), how


def local_execution(workflow) -> bool:
    """Whether this Snakemake is the main process of a run that executes its jobs here (see the module docstring)."""
    return workflow.is_main_process and workflow.global_resources["_nodes"].value is None


def limit_line(limit: int, how: str | None) -> str:
    """The dry-run's line: how many GPU jobs run at once here, and where the number came from."""
    origin = "--resources" if how is None else f"the GPUs visible here: {how}"
    if limit == 0:
        return f"GPU jobs are not held apart on this machine: gpu = 0 ({origin}); Snakemake cuts their GPU request to 0 and starts them; --resources gpu=N sets the number that may run at once"
    return f"at most {limit} GPU(s) in use at once on this machine: gpu = {limit} ({origin}); a GPU job waits for the GPUs it asks for; --resources gpu=N sets another number"


def register(workflow) -> str | None:
    """Make ``gpu`` a global resource of a local run: the GPUs visible here, unless ``--resources gpu=N`` gave it.
    Returns the dry-run's line; None under a cluster executor or in a job's own Snakemake (nothing registered)."""
    if not local_execution(workflow):
        return None
    if RESOURCE in workflow.global_resources:
        return limit_line(workflow.global_resources[RESOURCE].value, None)
    count, how = visible_gpus()
    workflow.register_resource(RESOURCE, count)
    return limit_line(count, how)
