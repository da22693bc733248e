"""The TPU a Tunix job was declared for (``tunix.tpu``) and the check at the job's start that JAX really runs on one.

JAX falls back to the host CPU, with only a warning, when libtpu is missing from the Tunix environment or another
process holds the TPU; a job declared for a TPU would then train or evaluate an 8B model in fp32 on the host for
days. The rules hand the declared TPU to the train_grpo and Tunix evaluate jobs in ``GRPOFLOW_TUNIX_TPU`` (a param
of input/output, so declaring it reruns nothing); the job stops in seconds, before loading any model, with one line.
The Tunix merge exports on the host CPU by design and takes no TPU, so it is not checked.
"""

from __future__ import annotations

import os

from grpoflow.errors import GrpoflowError

ENV = "GRPOFLOW_TUNIX_TPU"


def experiment_tpu(exp: dict) -> str:
    """The TPU a resolved Tunix experiment declares for its jobs ("" for none)."""
    return exp["tunix"].get("tpu") or ""


def require_declared_tpu(job: str, tpu: str | None = None) -> None:
    """Stop ``job`` with one line when a TPU is declared (``tpu``, else ``GRPOFLOW_TUNIX_TPU``) and JAX's devices
    are not TPUs. Nothing is checked (and JAX is not imported) when none is declared: the demo's CPU runs."""
    tpu = os.environ.get(ENV, "") if tpu is None else tpu
    if not tpu:
        return
    import jax

    devices = jax.devices()
    platform = devices[0].platform
    if platform != "tpu":
        raise GrpoflowError(
            f"{job}: tunix.tpu = {tpu} is declared but JAX runs on {len(devices)} {platform} device(s), not a TPU "
            f"(libtpu missing from the Tunix environment, JAX_PLATFORMS={os.environ.get('JAX_PLATFORMS', '')!r}, or "
            "another process holds the TPU; `.venv-tunix/bin/python -c 'import jax; print(jax.devices())'` shows what "
            "JAX finds): install libtpu or free the TPU, or set tunix.tpu: null to run on the host"
        )
