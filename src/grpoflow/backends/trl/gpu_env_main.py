"""``python -m grpoflow.envcheck train-trl-gpu <trl.vllm.mode> [lora]``, which grpoflow.envcheck runs as
``python -m grpoflow.backends.trl.gpu_env_main <mode> [lora]``: the TRL GPU job's environment check
(grpoflow.backends.trl.gpu_env), before torchrun. A module of its own, because ``python -m`` warns when the package
already imported the module it runs.
"""

from __future__ import annotations

import sys

from grpoflow.backends.trl.gpu_env import require_gpu_environment
from grpoflow.envcheck import log_interpreter


def main(argv: list[str] | None = None) -> int:
    from grpoflow.joblog import guarded, setup_logging

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) not in (1, 2) or args[1:] not in ([], ["lora"]):
        print("usage: python -m grpoflow.envcheck train-trl-gpu <vllm mode> [lora]", file=sys.stderr)
        return 2
    setup_logging()
    log_interpreter()
    guarded(require_gpu_environment, args[0], len(args) == 2, what="environment check")
    return 0


if __name__ == "__main__":
    sys.exit(main())
