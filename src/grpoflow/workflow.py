"""``python -m grpoflow.workflow JOB --kwargs JSON``: a thin shim of the one job entry point, ``python -m grpoflow.job
JOB --plan JSON`` (grpoflow.job). The shell lines of ``merge_checkpoint`` and ``evaluate`` name this module, and a
changed shell line reruns every finished job of its rule on upgrade (Snakemake's code trigger compares the rule's
shell template), so the path stays; ``workflow/scripts/*.py`` import ``run_job`` from here for the same reason of
stability. Nothing else belongs here."""

from __future__ import annotations

import sys

from grpoflow.job import fail, guarded, run_job, run_shell_job, setup_logging
from grpoflow.job import main as _job_main

__all__ = ["fail", "guarded", "main", "run_job", "run_shell_job", "setup_logging"]


def main(argv: list[str] | None = None) -> int:
    return _job_main(argv, prog="grpoflow.workflow", plan_flag="--kwargs")


if __name__ == "__main__":
    sys.exit(main())
