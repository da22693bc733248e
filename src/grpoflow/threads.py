"""The CPU threads of a job's compute processes: one rule for every job that starts several of them.

Snakemake exports six thread variables = the rule's threads in every ``shell:`` job (snakemake/shell.py, 9.27.1,
lines 279-287), and every process the job starts inherits them: where a job starts N compute processes (torchrun's
ranks, verl's Ray workers and rollout servers, vLLM's workers), each would run the job's whole count on the job's
CPUs. Setting OMP_NUM_THREADS alone does not help: torch built with MKL and OpenMP sizes its pool from
mkl_get_max_threads() (aten/src/ATen/ParallelOpenMP.cpp, init_num_threads), and MKL reads MKL_NUM_THREADS before
OMP_NUM_THREADS (measured with torch 2.13: OMP=1 MKL=2 gives 2 threads, OMP=2 MKL=1 gives 1); OpenBLAS and numexpr
read their own. So each process gets all six, equal: ``process_threads``. Ray and vLLM lower the count only where
OMP_NUM_THREADS is unset (ray/_private/utils.py set_omp_num_threads_if_unset; vllm 0.24
v1/executor/multiproc_executor.py set_multiprocessing_worker_envs), which inside a Snakemake job it never is.
"""

from __future__ import annotations

import os

# What snakemake/shell.py exports = the rule's threads in every shell job.
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def snakemake_threads(environ=os.environ) -> int | None:
    """The job's threads as Snakemake exported them (all six variables set and equal), else None."""
    values = {environ.get(k) for k in THREAD_VARS}
    if len(values) == 1 and (value := values.pop()) and value.isdigit() and int(value) > 0:
        return int(value)
    return None


def cpu_affinity() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def process_threads(processes: int, cpus: int) -> dict[str, str]:
    """The six thread variables for each of ``processes`` compute processes sharing ``cpus`` CPUs: all equal to
    cpus // processes, at least 1."""
    each = str(max(1, cpus // max(1, processes)))
    return {k: each for k in THREAD_VARS}
