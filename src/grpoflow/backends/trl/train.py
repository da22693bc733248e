"""``python -m grpoflow.backends.trl.train --spec JSON``: the trl backend's train_grpo job (the command is
composed by grpoflow.backends.trl.commandline)."""

from __future__ import annotations

import sys

from grpoflow.backends.common import train_main


def env_check(spec: dict) -> None:
    """On GPUs the job must run in the cluster environment (CUDA torch, TRL, vLLM): checked before anything loads.
    On the CPU it runs in Snakemake's own environment, which the workflow itself needs, so nothing to check."""
    if not spec["trl"]["use_cpu"]:
        from grpoflow.envcheck import check_trl_gpu

        check_trl_gpu(spec)


def main(argv: list[str] | None = None) -> int:
    return train_main("trl", argv, env_check)


if __name__ == "__main__":
    sys.exit(main())
