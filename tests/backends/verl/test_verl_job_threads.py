"""The CPU threads verl's workers get inside a real Snakemake `shell:` job of config/qwen3-32b-gsm8k.yaml.

Snakemake exports OMP_NUM_THREADS = the rule's threads (160 here) in every shell job, so a wrapper that keeps any
inherited value hands each of the 8 GPUs' workers all 160. The job runs train_grpo's own command for the 32B config
(grpoflow.backends.verl.commandline.command, the verl wrapper in front), with the rule's `threads:` = the config's
resources.cpus_per_task, as Snakemake's local executor would give it (`--cores 160`). Only the verl entrypoint after
`--` is a stand-in, since verl's main_ppo cannot start its GPU workers here: it starts a local Ray as main_ppo does,
and an actor that, like verl's FSDP workers, reserves no CPU reports the OMP_NUM_THREADS and torch thread count it
got (torch uses at most the machine's CPUs). Ray sets 1 in such actors unless the driver's environment has a value (tests/backends/verl/test_worker_threads.py).
The start model is a stand-in too (the 32B model's config.json, and empty weight and tokenizer files: the stand-in
trainer loads neither)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from grpoflow_testing import BIN, REPO, run_train_grpo_job

from grpoflow.backends.verl import overrides as verl_overrides
from grpoflow.backends.verl.commandline import command
from grpoflow.config import resolve_config
from grpoflow.discovery import discover_to_file

CONFIG = REPO / "config" / "qwen3-32b-gsm8k.yaml"
EXP = "qwen3-32b-gsm8k"
# Qwen3-32B's config.json sizes (Hugging Face Qwen/Qwen3-32B): what the wrapper's pre-flight and estimate read.
QWEN3_32B = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 5120,
    "intermediate_size": 25600,
    "num_hidden_layers": 64,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
}

PROBE = '''"""Stand-in for verl's main_ppo: a local Ray, and an actor that reserves no CPU (as verl's FSDP workers do)
reporting the threads it got. Usage: python probe.py OUT [verl overrides, ignored]."""
import json, os, sys

import ray

ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR")


@ray.remote(num_cpus=0)
class Worker:
    def threads(self):
        import torch

        return {"omp": os.environ.get("OMP_NUM_THREADS"), "torch": torch.get_num_threads()}


with open(sys.argv[1], "w") as fh:
    json.dump(ray.get(Worker.remote().threads.remote()), fh)
ray.shutdown()
'''


def job_files(wd: Path, cfg) -> tuple[dict, dict]:
    """What train_grpo reads for the 32B experiment, small: a train/val Parquet of one batch's rows, the sft.json
    naming the stand-in start model."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = cfg.experiment(EXP)["grpo"]["prompts_per_step"]
    data = wd / "results" / "data" / "gsm8k"
    data.mkdir(parents=True)
    table = pa.table({"prompt": [[{"role": "user", "content": f"{i}+1?"}] for i in range(rows)]})
    for split in ("train", "val"):
        pq.write_table(table, data / f"{split}.parquet")
    model = wd / "qwen3-32b-config-only"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN3_32B))
    for name in ("model.safetensors", "tokenizer.json"):  # what discovery requires; the stand-in trainer opens neither
        (model / name).write_text("")
    sft = wd / "results" / EXP / "sft.json"
    sft.parent.mkdir(parents=True)
    discover_to_file({"model": str(model)}, str(sft))
    inputs = {"train": str(data / "train.parquet"), "val": str(data / "val.parquet"), "sft": str(sft)}
    outputs = {
        "marker": f"results/{EXP}/training_complete.json",
        "metrics": f"results/{EXP}/train_metrics.jsonl",
    }
    return inputs, outputs


@pytest.mark.slow
def test_the_32b_configs_verl_workers_get_the_headers_threads_in_a_snakemake_job(tmp_path):
    cfg = resolve_config(yaml.safe_load(CONFIG.read_text()))
    res = cfg.experiment(EXP)["resources"]
    threads, gpus = res["cpus_per_task"], res["gpus_per_node"]
    assert (threads, gpus) == (160, 8), "the config header's arithmetic: 160 CPUs / 8 GPUs = 20 threads per worker"
    assert "OMP_NUM_THREADS = the job's CPUs per node / GPUs = 160 / 8 =\n# 20" in CONFIG.read_text()

    inputs, outputs = job_files(tmp_path, cfg)
    train = command(cfg, EXP, inputs, outputs)
    assert verl_overrides.ENTRYPOINT in train
    (tmp_path / "probe.py").write_text(PROBE)
    # Only verl's entrypoint is replaced; the wrapper, its flags and verl's overrides are the job's own.
    job = train.replace("{", "{{").replace("}", "}}").replace(verl_overrides.ENTRYPOINT, "python probe.py {output}")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("OMP_NUM_THREADS", None)
    # The stand-in ran no step, so the wrapper fails the job ("ran 0 steps"); what the worker reported stays.
    log = run_train_grpo_job(
        tmp_path, job + " > {log} 2>&1 || true", "worker_threads.json", threads, env=env, timeout=300
    )
    # torch takes OMP_NUM_THREADS up to the machine's CPUs (2 on the CI machine; a GPU node has more than 20).
    assert json.loads((tmp_path / "worker_threads.json").read_text()) == {"omp": "20", "torch": min(20, os.cpu_count())}
    assert "OMP_NUM_THREADS=20 for verl's workers" in log, log[-3000:]


def test_snakemakes_job_wide_threads_are_split_and_a_value_set_for_the_workers_is_kept():
    from grpoflow.backends.verl.train import SNAKEMAKE_THREAD_VARS, worker_threads

    job = {k: "160" for k in SNAKEMAKE_THREAD_VARS}  # what snakemake/shell.py exports in a job of 160 threads
    assert worker_threads(8, environ=job) == {"OMP_NUM_THREADS": "20"}
    assert worker_threads(8, environ={**job, "OMP_NUM_THREADS": "8"}) == {}  # verl.env's `env OMP_NUM_THREADS=8`
    assert worker_threads(8, environ={"OMP_NUM_THREADS": "8"}) == {}  # set by hand, outside Snakemake
    assert worker_threads(8, environ={k: "4" for k in SNAKEMAKE_THREAD_VARS}) == {"OMP_NUM_THREADS": "1"}
