"""``python -m grpoflow.backends.tunix.train --spec JSON``: the tunix backend's train_grpo job (the command is
composed by grpoflow.backends.tunix.commandline)."""

from __future__ import annotations

import sys

from grpoflow.backends.common import train_main


def main(argv: list[str] | None = None) -> int:
    return train_main("tunix", argv, env_check="train-tunix")


if __name__ == "__main__":
    sys.exit(main())
