"""How a job starts: ``python -m grpoflow.job RULE --plan JSON`` (the shell rules ``merge_checkpoint`` and
``evaluate``, whose interpreter the deployment picks) and ``run_job(snakemake, fn, **kwargs)`` (the ``script:`` rules'
``workflow/scripts/*.py``, which read paths and params off the ``snakemake`` object). Either way: logging to the
rule's log, the job's environment check first, one-line errors, exit codes. A ``GrpoflowError`` becomes a single line
on stderr (and in the log) and exit status 1; any other exception is a bug: its traceback goes to the log, a one-line
pointer to stderr.

Commands of finished runs name older paths, which stay because a changed shell line or training command reruns every
finished job (Snakemake's code and params triggers): ``python -m grpoflow.workflow JOB --kwargs JSON`` is a thin shim
of this module's ``main``. ``train_grpo``'s command, ``python -m grpoflow.backends.<backend>.train --spec JSON``, is
its backend's own entry point, which does the same steps (its ``--spec`` parsed, the logging, its check, its runner
under ``guarded``): this module would have to import every backend to start it, and a backend's module may not
depend on what depends on it.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Callable

from grpoflow.joblog import fail, guarded, setup_logging

__all__ = ["fail", "guarded", "run_job", "run_shell_job", "setup_logging"]

log = logging.getLogger("grpoflow")


def run_job(snakemake: Any, fn: Callable[..., Any], **kwargs: Any) -> Any:
    """Entry point of every ``workflow/scripts/*.py``: log setup + ``guarded(fn, **kwargs)``."""
    from grpoflow.envcheck import log_interpreter

    log_file = snakemake.log[0] if len(snakemake.log) else None
    setup_logging(log_file)
    log_interpreter()
    return guarded(fn, log_file=log_file, what=f"rule {snakemake.rule}", **kwargs)


# ---- shell rules whose interpreter the deployment picks (grpoflow.deployment) ------------------------------------
# `script:` rules always run in Snakemake's own interpreter (unless --sdm conda), so the jobs that may need the
# cluster environment are `shell:` rules calling `<python> -m grpoflow.workflow JOB --log L --kwargs JSON` (the
# shim of `python -m grpoflow.job JOB --plan JSON`): one library function each, with the environment check of that
# job first (before any heavy import).


def _merge_check(kw: dict, plane: str | None) -> tuple[str | None, str | None]:
    """(envcheck kind, None): the backend's MERGE_CHECK; a merge holds no accelerator to check."""
    from grpoflow import backends

    return backends.get(kw["backend"]).MERGE_CHECK, None


def _run_settings(kw: dict) -> dict:
    """The evaluate job's settings: its benchmark's plan's (``run``, grpoflow.evaluation.settings.BenchmarkRun)."""
    return (kw.get("run") or {}).get("settings") or {}


def _evaluate_check(kw: dict, plane: str | None) -> tuple[str | None, str | None]:
    """(envcheck kind, what the GPU check calls the job or None): the row of the evaluation backend in the job's
    plane (vLLM's CPU build: its own check, no GPU check)."""
    from grpoflow.evaluation.backends import evaluation_backend
    from grpoflow.planes import GPU

    row = evaluation_backend(_run_settings(kw).get("backend"), plane)
    return row.check, f"evaluate (backend {row.name})" if row.accelerator == GPU else None


def _evaluate_workers(kw: dict, plane: str | None) -> tuple[int, str] | None:
    """(compute processes, what they are) the evaluation backend starts in the job's plane, or None: its row."""
    from grpoflow.evaluation.backends import evaluation_backend

    settings = _run_settings(kw)
    row = evaluation_backend(settings.get("backend"), plane)
    return (row.worker_processes(settings), f"the {row.name} evaluation backend's") if row.worker_processes else None


# job -> (module, function, its environment/GPU check, the compute processes it starts)
SHELL_JOBS = {
    "merge_checkpoint": ("grpoflow.merge", "merge_checkpoint", _merge_check, lambda kw, plane: None),
    "evaluate": ("grpoflow.evaluation.run", "evaluate", _evaluate_check, _evaluate_workers),
}


def job_threads(name: str, kw: dict, plane: str | None = None, environ=os.environ) -> dict[str, str]:
    """The six thread variables for the compute processes job ``name`` starts (grpoflow.threads: the job's threads
    split over them, each variable equal), {} for a job that computes in its own process with Snakemake's export.
    Set before anything imports torch or vLLM, so this process and every one it starts (vLLM's workers, spawned with
    its environment) have them: vLLM lowers its workers' threads only where OMP_NUM_THREADS is unset (vllm 0.24
    v1/executor/multiproc_executor.py set_multiprocessing_worker_envs), which in a Snakemake job it never is."""
    from grpoflow.threads import cpu_affinity, process_threads, snakemake_threads

    workers = SHELL_JOBS[name][3](kw, plane)
    if not workers:
        return {}
    processes, what = workers
    cpus = kw.get("threads") or snakemake_threads(environ) or cpu_affinity()
    threads = process_threads(processes, cpus)
    log.info(
        "%s threads each for %s %d worker process(es) (the job's %d CPUs / %d)",
        threads["OMP_NUM_THREADS"],
        what,
        processes,
        cpus,
        processes,
    )
    return threads


def run_shell_job(name: str, log_file: str | None, kwargs: dict, plane: str | None = None) -> Any:
    """Job ``name`` with ``kwargs``; ``plane``: the plane grpoflow.deployment put it in (None: its backend's own)."""
    import importlib

    from grpoflow import envcheck

    setup_logging(log_file)
    envcheck.log_interpreter()
    os.environ.update(job_threads(name, kwargs, plane))
    module, func, needs, _ = SHELL_JOBS[name]
    kind, gpu_job = needs(kwargs, plane)
    if kind:
        guarded(envcheck.check, kind, log_file=log_file, what=f"rule {name}")
    if gpu_job:  # what only the GPU node can tell: driver vs CUDA, compute mode (grpoflow.gpucheck)
        from grpoflow import gpucheck

        guarded(gpucheck.checked, gpu_job, kwargs.get("metrics_path"), log_file=log_file, what="GPU check")
    fn = getattr(importlib.import_module(module), func)
    return guarded(fn, log_file=log_file, what=f"rule {name}", **kwargs)


def main(argv: list[str] | None = None, prog: str = "grpoflow.job", plan_flag: str = "--plan") -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(prog=f"python -m {prog}", description="Run one workflow job (what a rule calls).")
    parser.add_argument("job", choices=sorted(SHELL_JOBS))
    parser.add_argument("--log", default=None, help="the rule's log file")
    parser.add_argument(plan_flag, dest="plan", required=True, help="the job's plan: its arguments as a JSON object")
    parser.add_argument("--threads", type=int, default=None, help="the job's CPU threads (Snakemake's {threads})")
    parser.add_argument(
        "--plane", default=None, help='the plane grpoflow.deployment runs the job in (else the plan\'s "plane")'
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    kwargs = json.loads(args.plan)
    if args.threads is not None:
        kwargs["threads"] = args.threads
    plane = kwargs.pop("plane", None)  # the rule puts it in the JSON (rules/common.smk, evaluate_job)
    run_shell_job(args.job, args.log, kwargs, args.plane or plane)
    return 0


if __name__ == "__main__":
    sys.exit(main())
