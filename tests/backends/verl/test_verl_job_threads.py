"""The CPU threads verl's workers get inside a real Snakemake `shell:` job of the 32B and 8B configs.

Snakemake exports OMP_NUM_THREADS, GOTO_, OPENBLAS_, MKL_, VECLIB_MAXIMUM_ and NUMEXPR_ thread variables = the rule's
threads in every shell job, and torch's default thread count takes MKL_NUM_THREADS over OMP_NUM_THREADS (OMP=1 MKL=2
gives 2 threads): a wrapper that splits only OMP_NUM_THREADS over the GPUs still hands each GPU's worker the job's
whole count. The job runs train_grpo's own command for each config (grpoflow.backends.verl.commandline.command, the
verl wrapper in front), with the rule's `threads:` = the config's resources.cpus_per_task and `--cores` as many, as
Snakemake's local executor would give it (threads is a number: 160 on this 2-core machine is 160). Only the verl
entrypoint after `--` is a stand-in, since verl's main_ppo cannot start its GPU workers here: it starts a local Ray
as main_ppo does, then reports what three processes started the way verl starts them see: an actor that reserves
no CPU (verl's FSDP workers: Ray sets OMP_NUM_THREADS=1 in such an actor unless the driver's environment has one,
tests/backends/verl/test_worker_threads.py), a plain `ray.remote(cls)` actor (verl's vLLMHttpServer, the rollout),
and a fresh interpreter that actor starts (vLLM's engine core, started with the spawn method). Each reports its six
variables and its own torch.get_num_threads(). The start model is a stand-in too (the model's config.json, and empty
weight and tokenizer files: the stand-in trainer loads neither)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from grpoflow_testing import BIN, REPO, run_train_grpo_job

from grpoflow.backends.verl import overrides as verl_overrides
from grpoflow.backends.verl.commandline import command
from grpoflow.config import deep_merge, resolve_config
from grpoflow.discovery import discover_to_file
from grpoflow.threads import THREAD_VARS

# config.json sizes of the start models (Hugging Face Qwen/Qwen3-32B, Qwen/Qwen3-8B): what the wrapper's pre-flight
# and GPU-memory estimate read.
QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
}
SIZES = {
    "qwen3-32b-gsm8k": {
        "hidden_size": 5120,
        "intermediate_size": 25600,
        "num_hidden_layers": 64,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
    },
    "qwen3-8b-gsm8k": {
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
    },
}

PROBE = '''"""Stand-in for verl's main_ppo: a local Ray, and the threads three of its processes see.
Usage: python probe.py OUT [verl overrides, ignored]."""
import json, os, subprocess, sys

import ray

VARS = %r
REPORT = (
    "import json, os, torch; "
    "print(json.dumps({'vars': {k: os.environ.get(k) for k in %r}, 'torch': torch.get_num_threads()}))"
)


def report():
    """This process's six variables and torch's thread count, read in a fresh interpreter of this environment."""
    return json.loads(subprocess.run([sys.executable, "-c", REPORT], capture_output=True, text=True, check=True).stdout)


def own():
    import torch

    return {"vars": {k: os.environ.get(k) for k in VARS}, "torch": torch.get_num_threads()}


ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR")


@ray.remote(num_cpus=0)
class FSDPWorker:  # verl's workers ask Ray for GPUs only
    def threads(self):
        return own()


class vLLMHttpServer:  # verl: ray.remote(vLLMHttpServer), no resources given
    def threads(self):
        return {"server": own(), "engine_core": report()}


server = ray.get(ray.remote(vLLMHttpServer).remote().threads.remote())
out = {"fsdp_worker": ray.get(FSDPWorker.remote().threads.remote()), "rollout_server": server["server"],
       "rollout_engine_core": server["engine_core"]}
with open(sys.argv[1], "w") as fh:
    json.dump(out, fh)
ray.shutdown()
''' % (THREAD_VARS, THREAD_VARS)

CASES = {
    # id: (config file, experiment, its resources changed, the threads each worker gets)
    "32b": ("qwen3-32b-gsm8k.yaml", "qwen3-32b-gsm8k", {}, 20),  # 160 CPUs / 8 GPUs
    "32b-8cpus": ("qwen3-32b-gsm8k.yaml", "qwen3-32b-gsm8k", {"cpus_per_task": 8}, 1),  # 8 CPUs / 8 GPUs
    "8b": ("qwen3-8b-gsm8k.yaml", "qwen3-8b-gsm8k", {}, 8),  # 32 CPUs / 4 GPUs
}
# What each config's header states (as measured here), for the cases run with its own resources.
HEADERS = {"32b": "all six to 160 / 8 GPUs = 20", "8b": "all six to 32 / 4 GPUs = 8"}


def job_files(wd: Path, cfg, exp: str) -> tuple[dict, dict]:
    """What train_grpo reads for the experiment, small: a train/val Parquet of one batch's rows, the sft.json
    naming the stand-in start model."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = cfg.experiment(exp)["grpo"]["prompts_per_step"]
    data = wd / "results" / "data" / "gsm8k"
    data.mkdir(parents=True)
    table = pa.table({"prompt": [[{"role": "user", "content": f"{i}+1?"}] for i in range(rows)]})
    for split in ("train", "val"):
        pq.write_table(table, data / f"{split}.parquet")
    model = wd / "config-only-model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({**QWEN3, **SIZES[exp]}))
    for name in ("model.safetensors", "tokenizer.json"):  # what discovery requires; the stand-in trainer opens neither
        (model / name).write_text("")
    sft = wd / "results" / exp / "sft.json"
    sft.parent.mkdir(parents=True)
    discover_to_file({"model": str(model)}, str(sft))
    inputs = {"train": str(data / "train.parquet"), "val": str(data / "val.parquet"), "sft": str(sft)}
    outputs = {"marker": f"results/{exp}/training_complete.json", "metrics": f"results/{exp}/train_metrics.jsonl"}
    return inputs, outputs


def torch_threads_with(value: int) -> int:
    """torch.get_num_threads() on this machine with all six variables = value (MKL caps it at the machine's physical
    cores unless MKL_DYNAMIC=FALSE: 2 on the CI machine)."""
    env = {**os.environ, **{k: str(value) for k in THREAD_VARS}}
    code = "import torch; print(torch.get_num_threads())"
    return int(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_verl_process_gets_the_jobs_cpus_split_over_its_gpus_in_a_snakemake_job(tmp_path, case):
    config, exp, resources, each = CASES[case]
    raw = deep_merge(yaml.safe_load((REPO / "config" / config).read_text()), {"defaults": {"resources": resources}})
    cfg = resolve_config(raw)
    res = cfg.experiment(exp)["resources"]
    threads = res["cpus_per_task"]
    assert res["nodes"] == 1 and max(1, threads // res["gpus_per_node"]) == each

    inputs, outputs = job_files(tmp_path, cfg, exp)
    train = command(cfg, exp, inputs, outputs)
    assert verl_overrides.ENTRYPOINT in train
    (tmp_path / "probe.py").write_text(PROBE)
    # Only verl's entrypoint is replaced; the wrapper, its flags and verl's overrides are the job's own.
    job = train.replace("{", "{{").replace("}", "}}").replace(verl_overrides.ENTRYPOINT, "python probe.py {output}")
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS and k != "SLURM_JOB_ID"}
    env.update(PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", RAY_USAGE_STATS_ENABLED="0")
    # The stand-in ran no step, so the wrapper fails the job ("ran 0 steps"); what the processes reported stays.
    log = run_train_grpo_job(tmp_path, job + " > {log} 2>&1 || true", "threads.json", threads, env=env, timeout=300)
    seen = json.loads((tmp_path / "threads.json").read_text())
    torch_threads = 1 if each == 1 else torch_threads_with(each)
    for process, got in seen.items():
        assert got == {"vars": {k: str(each) for k in THREAD_VARS}, "torch": torch_threads}, (process, seen)
    assert f"{each} threads each for verl's {res['gpus_per_node']} GPU workers per node" in log, log[-3000:]
    if case in HEADERS:
        assert HEADERS[case] in " ".join((REPO / "config" / config).read_text().replace("#", " ").split())
    print(f"{case}: threads {threads}, {res['gpus_per_node']} GPUs: every process {seen['fsdp_worker']}")


def test_snakemakes_job_wide_threads_are_split_and_a_value_set_for_the_workers_is_kept():
    from grpoflow.backends.verl.train import worker_threads

    job = {k: "160" for k in THREAD_VARS}  # what snakemake/shell.py exports in a job of 160 threads
    assert worker_threads(8, environ=job) == {k: "20" for k in THREAD_VARS}
    # verl.env's `env OMP_NUM_THREADS=8`: kept, and every other variable follows it (MKL's would win in torch)
    assert worker_threads(8, environ={**job, "OMP_NUM_THREADS": "8"}) == {k: "8" for k in THREAD_VARS}
    assert worker_threads(8, environ={"OMP_NUM_THREADS": "8"}) == {k: "8" for k in THREAD_VARS}  # set by hand
    assert worker_threads(8, environ={k: "4" for k in THREAD_VARS}) == {k: "1" for k in THREAD_VARS}
