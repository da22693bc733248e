"""``python -m grpoflow.backends.tunix.train --spec JSON``: the tunix backend's train_grpo job (the command is
composed by grpoflow.backends.tunix.commandline)."""

from __future__ import annotations

import sys

from grpoflow.backends.tunix.commandline import ENTRY
from grpoflow.backends.tunix.environment import TRAIN
from grpoflow.training.common import train_main


def run_training(spec: dict) -> dict:
    from grpoflow.backends.tunix.runner import run_training  # JAX and Tunix: only in the job

    return run_training(spec)


def main(argv: list[str] | None = None) -> int:
    return train_main("tunix", ENTRY, argv, run_training, env_check=TRAIN)


if __name__ == "__main__":
    sys.exit(main())
