"""The CPU threads of the vLLM evaluation job's processes, in the project's own `evaluate` rule run by Snakemake.

Snakemake exports six thread variables = the rule's threads (evaluation.resources.cpus_per_task) in the job, and
vLLM lowers its workers' threads only where OMP_NUM_THREADS is unset (vllm 0.24 v1/executor/multiproc_executor.py
set_multiprocessing_worker_envs), so each of its tensor-parallel workers would run the job's whole count. The job
runs `python -m grpoflow.workflow evaluate` as the rule writes it, in the cluster plane (cluster_env.python = this
interpreter), with evaluation.vllm and evaluation.resources taken from the 32B and 8B configs. vllm itself is a
stand-in (not installable without a GPU; it says so in its docstring below): its `LLM` starts one worker the way vLLM
0.24 starts its workers (the spawn method: a fresh interpreter with the job process's environment), and records
what that worker and the job's own process see (the six variables, torch.get_num_threads()), then stops the job.
The GPU check is skipped (GRPOFLOW_SKIP_GPU_CHECK=1: no GPU here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from evalkit import tiny_model  # noqa: F401 (fixture)
from grpoflow_testing import REPO, make_workdir, snakemake

from grpoflow.threads import THREAD_VARS

pytestmark = [pytest.mark.slow]

STAND_IN = '''"""Stand-in for vllm (not installable here without a GPU). LLM(...) starts one worker the way vLLM's
multiprocess executor does (spawn: a fresh interpreter with this process's environment), writes what the worker and
this process see to $THREADS_REPORT, and stops the job."""
import json, os, subprocess, sys

__version__ = "stand-in"
VARS = %r
REPORT = (
    "import json, os, torch; "
    "print(json.dumps({'vars': {k: os.environ.get(k) for k in %r}, 'torch': torch.get_num_threads()}))"
)


class LLM:
    def __init__(self, **kwargs):
        import torch

        worker = subprocess.run([sys.executable, "-c", REPORT], capture_output=True, text=True, check=True).stdout
        job = {"vars": {k: os.environ.get(k) for k in VARS}, "torch": torch.get_num_threads()}
        with open(os.environ["THREADS_REPORT"], "w") as fh:
            json.dump({"worker": json.loads(worker), "job_process": job, "tensor_parallel_size": kwargs.get(
                "tensor_parallel_size")}, fh)
        raise SystemExit("stand-in vllm: stopped after the threads report")


class SamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
''' % (THREAD_VARS, THREAD_VARS)

CASES = {
    # id: (the config whose evaluation section is used, its cpus_per_task changed to, the threads each worker gets)
    "32b": ("qwen3-32b-gsm8k.yaml", None, 8),  # 32 CPUs / 4 tensor-parallel workers
    "32b-4cpus": ("qwen3-32b-gsm8k.yaml", 4, 1),  # 4 CPUs / 4
    "8b": ("qwen3-8b-gsm8k.yaml", None, 8),  # 8 CPUs / 1
}


def torch_threads_with(value: int) -> int:
    """torch.get_num_threads() on this machine with all six variables = value (MKL caps it at the machine's physical
    cores: 2 on the CI machine)."""
    env = {**os.environ, **{k: str(value) for k in THREAD_VARS}}
    code = "import torch; print(torch.get_num_threads())"
    return int(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout)


@pytest.mark.parametrize("case", sorted(CASES))
def test_vllms_workers_get_the_jobs_threads_split_over_them_in_a_snakemake_job(tmp_path, tiny_model, case):  # noqa: F811
    config_file, cpus, each = CASES[case]
    shipped = yaml.safe_load((REPO / "config" / config_file).read_text())["evaluation"]
    resources = {**shipped["resources"], **({"cpus_per_task": cpus} if cpus else {})}
    tp = shipped["vllm"]["tensor_parallel_size"]
    assert resources["gpus"] == tp and max(1, resources["cpus_per_task"] // tp) == each
    wd = make_workdir(tmp_path)
    bench = (REPO / "data" / "gsm8k_sample" / "test.jsonl").read_text().splitlines()[:2]
    (wd / "bench.jsonl").write_text("\n".join(bench) + "\n")
    config = {
        "cluster_env": {"python": sys.executable},
        "evaluation": {
            "backend": "vllm",
            "max_new_tokens": 8,
            "models": {"tiny-base": {"path": str(tiny_model)}},
            "benchmarks": {"b": {"path": "bench.jsonl", "prompt_key": "question", "format": "gsm8k"}},
            "vllm": shipped["vllm"],
            "resources": resources,
        },
    }
    (wd / "eval.yaml").write_text(yaml.safe_dump(config))
    stand_in = tmp_path / "stand_in"
    (stand_in / "vllm").mkdir(parents=True)
    (stand_in / "vllm" / "__init__.py").write_text(STAND_IN)
    report = tmp_path / "threads.json"
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS and k != "SLURM_JOB_ID"}
    env.update(
        PYTHONPATH=os.pathsep.join([str(stand_in), str(REPO / "src"), str(REPO / "tests")]),
        THREADS_REPORT=str(report),
        GRPOFLOW_SKIP_GPU_CHECK="1",
    )
    threads = resources["cpus_per_task"]
    target = "results/tiny-base/eval/b.json"
    proc = snakemake(
        [target, "--cores", str(threads), "--resources", f"gpu={tp}", "--configfile", "eval.yaml"],
        wd,
        env=env,
        check=False,
    )
    log_file = wd / "logs" / "evaluate" / "tiny-base" / "b.log"
    log = log_file.read_text() if log_file.exists() else ""
    assert report.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:] + log[-3000:]
    seen = json.loads(report.read_text())
    assert seen["tensor_parallel_size"] == tp
    torch_threads = 1 if each == 1 else torch_threads_with(each)
    for process in ("worker", "job_process"):
        assert seen[process] == {"vars": {k: str(each) for k in THREAD_VARS}, "torch": torch_threads}, (process, seen)
    assert (
        f"{each} threads each for the vllm evaluation backend's {tp} worker process(es) (the job's {threads} CPUs / {tp})"
        in log
    )
    print(f"{case}: threads {threads}, tensor_parallel_size {tp}: {seen}")
