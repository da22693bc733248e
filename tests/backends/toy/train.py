"""``python -m grpoflow.backends.toy.train --spec JSON``: the toy backend's train_grpo job."""

from __future__ import annotations

import sys

from grpoflow.training.common import train_main


def main(argv: list[str] | None = None) -> int:
    from grpoflow.backends.toy.runner import run_training

    return train_main("toy", "grpoflow.backends.toy.train", argv, run_training)


if __name__ == "__main__":
    sys.exit(main())
