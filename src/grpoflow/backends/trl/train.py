"""``python -m grpoflow.backends.trl.train --spec JSON``: the trl backend's train_grpo job (the command is
composed by grpoflow.backends.trl.commandline)."""

from __future__ import annotations

import sys

from grpoflow.backends.common import train_main


def main(argv: list[str] | None = None) -> int:
    return train_main("trl", argv)


if __name__ == "__main__":
    sys.exit(main())
