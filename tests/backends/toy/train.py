"""``python -m grpoflow.backends.toy.train --spec JSON``: the toy backend's train_grpo job."""

from __future__ import annotations

import sys

from grpoflow.backends.common import train_main


def main(argv: list[str] | None = None) -> int:
    return train_main("toy", argv)


if __name__ == "__main__":
    sys.exit(main())
