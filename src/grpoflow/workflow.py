"""How a workflow job runs a library function: logging to the rule's log, one-line errors, exit codes.

``workflow/scripts/*.py`` are thin: they read paths and params off the ``snakemake`` object and call
``run_job(snakemake, fn, **kwargs)``. A ``GrpoflowError`` becomes a single line on stderr (and in the log) and
exit status 1; any other exception is a bug: its traceback goes to the log, a one-line pointer to stderr.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from typing import Any, Callable

from grpoflow.errors import GrpoflowError

log = logging.getLogger("grpoflow")


def setup_logging(log_file: str | None = None, level: int = logging.INFO) -> None:
    """Log to ``log_file`` (the rule's log) and to stderr, once per process."""
    root = logging.getLogger()
    if getattr(root, "_grpoflow_configured", False):
        return
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file:
        os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
        handlers.append(logging.FileHandler(log_file, mode="w", encoding="utf-8"))
    for h in handlers:
        h.setFormatter(fmt)
        root.addHandler(h)
    root.setLevel(level)
    root._grpoflow_configured = True  # type: ignore[attr-defined]


def fail(message: str, log_file: str | None = None, code: int = 1):
    line = f"grpoflow: error: {message}"
    if log_file:
        try:
            with open(log_file, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        except OSError:
            pass
    print(line, file=sys.stderr, flush=True)
    sys.exit(code)


def guarded(fn: Callable[..., Any], *args: Any, log_file: str | None = None, what: str = "job", **kwargs: Any) -> Any:
    """Call ``fn``; turn a GrpoflowError into one line + exit 1 and anything else into a logged traceback."""
    try:
        return fn(*args, **kwargs)
    except GrpoflowError as exc:
        fail(str(exc), log_file)
    except KeyboardInterrupt:
        fail(f"{what} interrupted", log_file, code=130)
    except Exception as exc:  # a bug: keep the traceback, but in the log, not as a wall on the terminal
        tb = traceback.format_exc()
        if log_file:
            with open(log_file, "a", encoding="utf-8") as fh:
                fh.write(tb)
            where = f" (traceback in {log_file})"
        else:
            sys.stderr.write(tb)
            where = ""
        fail(f"internal error in {what}: {type(exc).__name__}: {exc}{where}", None)


def run_job(snakemake: Any, fn: Callable[..., Any], **kwargs: Any) -> Any:
    """Entry point of every ``workflow/scripts/*.py``: log setup + ``guarded(fn, **kwargs)``."""
    from grpoflow.envcheck import log_interpreter

    log_file = snakemake.log[0] if len(snakemake.log) else None
    setup_logging(log_file)
    log_interpreter()
    return guarded(fn, log_file=log_file, what=f"rule {snakemake.rule}", **kwargs)


# ---- shell rules whose interpreter the deployment picks (grpoflow.deployment) ------------------------------------
# `script:` rules always run in Snakemake's own interpreter (unless --sdm conda), so the jobs that may need the
# cluster environment are `shell:` rules calling `<python> -m grpoflow.workflow JOB --log L --kwargs JSON`: one
# library function each, with the environment check of that job first (before any heavy import).


def _merge_check(kw: dict) -> str | None:
    return {"verl": "merge-verl", "tunix": "merge-tunix"}.get(kw.get("backend"))


def _evaluate_check(kw: dict) -> str | None:
    return {"vllm": "eval-vllm", "tunix": "eval-tunix"}.get((kw.get("settings") or {}).get("backend"))


SHELL_JOBS = {
    "merge_checkpoint": ("grpoflow.merge", "merge_checkpoint", _merge_check),
    "evaluate": ("grpoflow.evaluation.run", "evaluate", _evaluate_check),
}


def run_shell_job(name: str, log_file: str | None, kwargs: dict) -> Any:
    import importlib

    from grpoflow import envcheck

    setup_logging(log_file)
    envcheck.log_interpreter()
    module, func, needs = SHELL_JOBS[name]
    kind = needs(kwargs)
    if kind:
        guarded(envcheck.check, kind, log_file=log_file, what=f"rule {name}")
    if kind == "eval-vllm":  # what only the GPU node can tell: driver vs CUDA, compute mode (grpoflow.gpucheck)
        from grpoflow import gpucheck

        guarded(
            gpucheck.checked, "evaluate (backend vllm)", kwargs.get("metrics_path"), log_file=log_file, what="GPU check"
        )
    fn = getattr(importlib.import_module(module), func)
    return guarded(fn, log_file=log_file, what=f"rule {name}", **kwargs)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(
        prog="python -m grpoflow.workflow", description="Run one workflow job (what a rule calls)."
    )
    parser.add_argument("job", choices=sorted(SHELL_JOBS))
    parser.add_argument("--log", default=None, help="the rule's log file")
    parser.add_argument("--kwargs", required=True, help="the job's arguments as a JSON object")
    parser.add_argument("--threads", type=int, default=None, help="the job's CPU threads (Snakemake's {threads})")
    args = parser.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    kwargs = json.loads(args.kwargs)
    if args.threads is not None:
        kwargs["threads"] = args.threads
    run_shell_job(args.job, args.log, kwargs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
