"""``python -m grpoflow.backends.tunix.train --spec JSON``: the tunix backend's train_grpo job (the command is
composed by grpoflow.backends.tunix.commandline)."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    from grpoflow.workflow import guarded, setup_logging

    parser = argparse.ArgumentParser(
        prog="python -m grpoflow.backends.tunix.train",
        description="GRPO training with Tunix (the tunix backend of train_grpo).",
    )
    parser.add_argument(
        "--spec", required=True, help="JSON training spec, as composed by grpoflow.backends.tunix.commandline.command"
    )
    args = parser.parse_args(argv)
    setup_logging()
    try:
        spec = json.loads(args.spec)
    except ValueError as exc:
        parser.error(f"--spec is not valid JSON: {exc}")

    def train() -> None:
        from grpoflow import envcheck

        envcheck.log_interpreter()
        envcheck.check("train-tunix")  # in seconds, before JAX starts: one line naming what is missing
        from grpoflow.backends.tunix.runner import run_training

        run_training(spec)

    guarded(train, what=f"train_grpo ({spec.get('experiment')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
