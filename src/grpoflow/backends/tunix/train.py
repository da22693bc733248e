"""``python -m grpoflow.backends.tunix.train --spec JSON``: the tunix backend's train_grpo job (the command is
composed by grpoflow.backends.tunix.commandline)."""

from __future__ import annotations

import sys

from grpoflow.backends.common import check_environment, read_spec
from grpoflow.joblog import guarded


def train(spec: dict) -> None:
    """The job: its environment check, then the resumable GRPOLearner run (JAX and Tunix load only now)."""
    check_environment(spec, "train-tunix")
    from grpoflow.backends.tunix.runner import run_training

    run_training(spec)


def main(argv: list[str] | None = None) -> int:
    spec = read_spec("tunix", argv)
    guarded(train, spec, what=f"train_grpo ({spec.get('experiment')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
