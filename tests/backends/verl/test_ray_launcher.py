"""The multi-node Ray launcher (src/grpoflow/backends/verl/ray_slurm.sh) on a real two-node SLURM (two slurmd on this
host), with real `ray start` on CPU and stand-in GPUs. Only the trainer is replaced, at the very end, by a
probe that attaches to the cluster like verl's main_ppo and reports what every Ray node is.

Each job strips SLURM_* from its environment except SLURM_JOB_ID, as the Snakemake SLURM plugin does."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from verlkit import REPO, job_state, leftover_ray, submit, wait_job

from grpoflow.threads import THREAD_VARS

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.xdist_group("ray")]

LAUNCHER = REPO / "src" / "grpoflow" / "backends" / "verl" / "ray_slurm.sh"
PROBE = REPO / "tests" / "backends" / "verl" / "ray_probe.py"
BIN = Path(sys.executable).parent


def job_script(command: str, port: int, extra_env: str = "") -> str:
    return f"""#!/bin/bash
for v in $(compgen -e | grep -E '^(SLURM_|SRUN_|SBATCH_)' | grep -vx SLURM_JOB_ID); do unset "$v"; done
export PATH={BIN}:$PATH PYTHONPATH={REPO / "src"} GRPOFLOW_PYTHON={sys.executable}
export GRPOFLOW_RAY_PORT={port} GRPOFLOW_RAY_HEAD_ARGS="--include-dashboard=false --ray-client-server-port={port + 1}"
export GRPOFLOW_PROBE_VAR="exported-$SLURM_JOB_ID" GRPOFLOW_STOP_GRACE_S=20
{extra_env}
exec {command}
"""


SBATCH = ["--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=2", "--gres=gpu:8", "--mem=8000", "-t", "10"]


def launch(tmp_path: Path, trainer: str, port: int, *, nodes: int = 2, extra_env: str = "") -> str:
    cmd = f"bash {LAUNCHER} --nodes {nodes} --gpus-per-node 8 -- {trainer}"
    return submit(job_script(cmd, port, extra_env), SBATCH, tmp_path)


def output(tmp_path: Path) -> str:
    return (tmp_path / "slurm.out").read_text(errors="replace")


def assert_torn_down(job: str, log: str) -> None:
    assert "Ray stopped" in log
    deadline = time.monotonic() + 20
    while leftover_ray(job) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not leftover_ray(job), leftover_ray(job)


def test_two_nodes_one_ray_node_each(local_slurm, tmp_path):
    started = time.monotonic()
    job = launch(tmp_path, f"python {PROBE} --out {tmp_path / 'probe.json'}", 36500)
    state = wait_job(job)
    log = output(tmp_path)
    assert state["JobState"] == "COMPLETED" and state["ExitCode"] == "0:0", log[-4000:]
    probe = json.loads((tmp_path / "probe.json").read_text())
    nodes = local_slurm["nodes"]
    # the node list came from squeue + scontrol (SLURM_JOB_NODELIST was stripped), head = first node
    assert f"2 node(s): {' '.join(nodes)}; head {nodes[0]}" in log
    # exactly one Ray node per SLURM node, each started inside that node's srun step
    assert sorted(n["slurm_node"] for n in probe["nodes"]) == nodes
    assert len({n["node_id"] for n in probe["nodes"]}) == 2
    # the trainer runs on the head, attached to the launcher's cluster, seeing 2 x 8 GPUs
    assert probe["driver_slurm_node"] == nodes[0] and probe["ray_address"].endswith(":36500")
    assert probe["cluster_gpus"] == 16 and sorted(probe["gpus_per_node"].values()) == [8, 8]
    # the environment reached every node before `ray start`, including the job's Ray token
    assert {n["test_var"] for n in probe["nodes"]} == {f"exported-{job}"}
    assert all(n["auth_mode"] == "token" and n["has_token"] for n in probe["nodes"]) and "Ray auth: token" in log
    assert "Ray cluster ready: 2 node(s), 16 GPU(s)" in log
    assert_torn_down(job, log)
    print(f"two-node launch + probe + teardown: {time.monotonic() - started:.0f} s")


def test_trainer_failure_still_tears_ray_down(local_slurm, tmp_path):
    job = launch(tmp_path, f"python {PROBE} --out {tmp_path / 'probe.json'} --exit-code 3", 36510)
    state = wait_job(job)
    log = output(tmp_path)
    assert state["JobState"] == "FAILED" and state["ExitCode"] == "3:0", log[-3000:]
    assert "trainer exited with status 3" in log and (tmp_path / "probe.json").exists()
    assert_torn_down(job, log)


def test_stop_signal_stops_trainer_and_ray(local_slurm, tmp_path):
    job = launch(tmp_path, f"python {PROBE} --out {tmp_path / 'probe.json'} --sleep 300", 36520)
    deadline = time.monotonic() + 180
    while not (tmp_path / "probe.json").exists():
        assert time.monotonic() < deadline and job_state(job)["JobState"] in ("PENDING", "RUNNING"), output(tmp_path)[
            -3000:
        ]
        time.sleep(1)
    trainer_pid = json.loads((tmp_path / "probe.json").read_text())["pid"]
    subprocess.run(["scancel", "--batch", "--signal=USR1", job], check=True)  # what --signal=B:USR1@... sends
    # The probe would sleep 300 s: a job that ends well before is one the signal ended (no wall-clock bound
    # tighter than that; a loaded machine tears Ray down slowly).
    state = wait_job(job, timeout=200)
    log = output(tmp_path)
    assert "received SIGUSR1: shutting down" in log and "stopping the trainer" in log
    assert state["ExitCode"] == f"{128 + 10}:0", state
    with pytest.raises(ProcessLookupError):
        os.kill(trainer_pid, 0)
    assert_torn_down(job, log)


def test_a_worker_that_cannot_start_fails_fast(local_slurm, tmp_path):
    # --include-dashboard is a head-only flag: the worker's `ray start` refuses it and exits.
    job = launch(
        tmp_path,
        f"python {PROBE} --out {tmp_path / 'probe.json'}",
        36530,
        extra_env='export GRPOFLOW_RAY_START_ARGS="--include-dashboard=false"; unset GRPOFLOW_RAY_HEAD_ARGS',
    )
    # Not a wall-clock bound (a loaded machine starts Ray slowly): the job must end well inside the launcher's
    # 600-s wait for nodes, and its log must say why: the dead node was noticed, not the wait run out.
    state = wait_job(job, timeout=400)
    log = output(tmp_path)
    assert state["JobState"] == "FAILED", log[-3000:]
    assert "a Ray node's start command exited" in log and "Ray did not reach 2 node(s) x 8 GPU(s)" in log
    assert "after 600 s" not in log, "the launcher waited out its timeout for a node that had already died"
    assert not (tmp_path / "probe.json").exists()
    assert_torn_down(job, log)


def test_node_count_mismatch_is_refused(local_slurm, tmp_path):
    job = launch(tmp_path, f"python {PROBE} --out {tmp_path / 'probe.json'}", 36540, nodes=3)
    state = wait_job(job)
    assert state["JobState"] == "FAILED"
    assert "the job has 2 node(s)" in output(tmp_path) and "but trainer.nnodes = 3" in output(tmp_path)


def test_wrapper_runs_multi_node_through_the_launcher(local_slurm, tmp_path, tiny_model):
    """grpoflow.backends.verl.train with trainer.nnodes=2 goes through the launcher (the probe sees both nodes); the
    probe trains nothing, so the wrapper then reports the zero-step exit instead of writing a marker. The job exports
    the six thread variables as a Snakemake job of 4 threads does; a Ray task on either node sees all six = the job's
    CPUs per node (squeue: 2 tasks x 2 CPUs) / 8 GPUs, at least 1, and its torch runs that many threads."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    train = tmp_path / "train.parquet"
    pq.write_table(pa.table({"prompt": [[{"role": "user", "content": str(i)}] for i in range(8)]}), train)
    overrides = (
        f"trainer.total_training_steps=2 trainer.default_local_dir={tmp_path}/ckpt trainer.n_gpus_per_node=8 trainer.nnodes=2 "
        f"trainer.experiment_name=e data.train_files={train} data.train_batch_size=4 actor_rollout_ref.model.path={tiny_model} "
        "data.max_prompt_length=16 data.max_response_length=16"
    )
    wrapper = (
        f"python -m grpoflow.backends.verl.train --marker {tmp_path}/out/marker.json --metrics {tmp_path}/out/metrics.jsonl -- "
        f"python {PROBE} --out {tmp_path / 'probe.json'} {overrides}"
    )
    snakemake_threads = "export " + " ".join(f"{k}=4" for k in THREAD_VARS)  # snakemake/shell.py, threads 4
    job = submit(job_script(wrapper, 36550, snakemake_threads), SBATCH, tmp_path)
    state = wait_job(job)
    log = output(tmp_path)
    assert state["ExitCode"] == "1:0", log[-3000:]
    probe = json.loads((tmp_path / "probe.json").read_text())
    assert sorted(n["slurm_node"] for n in probe["nodes"]) == local_slurm["nodes"]
    for node in probe["nodes"]:
        assert node["threads"] == {k: "1" for k in THREAD_VARS} and node["torch_threads"] == 1, node
    assert "grpoflow: error: verl exited 0 but ran 0 steps of the planned 2" in log
    assert not (tmp_path / "out" / "marker.json").exists()
    assert_torn_down(job, log)


@pytest.mark.parametrize("nodes", [1, 2])
def test_snakemake_submits_train_grpo_through_the_plugin(local_slurm, tmp_path, tiny_model, nodes):
    """The whole path on the real SLURM: Snakemake's SLURM plugin submits train_grpo with the rule's resources
    (one node: --gpus in the plugin's job step; two: nodes, per-node gres, mpi, tasks_per_node), the wrapper runs
    verl's real main_ppo (on two nodes through the launcher, Ray up on both and verl attached to it), which passes
    its validate_config and then stops where it needs the GPU stack (not installed in the CPU test
    environment); the job fails with the wrapper's one line, last in the log, and Ray is gone."""
    import yaml
    from grpoflow_testing import make_workdir, snakemake_slurm

    wd = make_workdir(tmp_path)
    config = {
        "datasets": {
            "gsm8k_sample": {
                "source": "local",
                "format": "gsm8k",
                "validation": {"size": 32, "seed": 1},
                "local": {"train": "data/gsm8k_sample/train.jsonl", "test": "data/gsm8k_sample/test.jsonl"},
            }
        },
        "defaults": {
            "backend": "verl",
            "data": {"dataset": "gsm8k_sample"},
            "sft": {"model": tiny_model},
            "grpo": {
                "total_steps": 2,
                "prompts_per_step": 16,
                "num_generations": 2,
                "max_prompt_length": 100,
                "max_response_length": 16,
                "save_freq": 1,
            },
            "verl": {
                "ppo_mini_batch_size": 16,
                "ppo_micro_batch_size_per_gpu": 1,
                "log_prob_micro_batch_size_per_gpu": 2,
                "rollout": {"tensor_model_parallel_size": 2},
                # This environment has no vLLM/flash-attn: skip the wrapper's environment check so verl itself
                # starts (Hydra, validate_config, Ray on both nodes) and stops at its own import.
                "env": {"GRPOFLOW_RAY_PORT": 36560, "GRPOFLOW_SKIP_ENV_CHECK": 1},
            },
            "resources": {"nodes": nodes, "gpus_per_node": 8, "cpus_per_task": 4, "mem_mb": 8000, "runtime": 10},
        },
        "experiments": {"twonode": {}},
        "evaluation": {"benchmarks": {"t": {"dataset": "gsm8k_sample", "split": "test"}}},
    }
    (wd / "twonode.yaml").write_text(yaml.safe_dump(config))
    proc = snakemake_slurm(
        # --retries 0: the job is meant to fail (no GPU stack); the profile's retries would run it three times.
        [
            "results/twonode/training_complete.json",
            "--latency-wait",
            "5",
            "--retries",
            "0",
            "--configfile",
            "twonode.yaml",
        ],
        wd,
        timeout=600,
        check=False,
    )
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    log = (wd / "logs" / "train_grpo" / "twonode.log").read_text(errors="replace")
    assert "[validate_config] All configuration checks passed successfully!" in log
    assert "GRPOFLOW_SKIP_ENV_CHECK=1: environment check skipped" in log and "job interpreter: " in log
    assert log.rstrip().splitlines()[-1].startswith("grpoflow: error: verl exited with status 1")
    assert not (wd / "results" / "twonode" / "training_complete.json").exists()
    if nodes == 1:
        assert "nodes=1, gpu=8" in out and "mpi=" not in out
        assert "ray_slurm" not in log and "trainer.nnodes=1" in log
        return
    assert "nodes=2, gres=gpu:8, mpi=srun, tasks_per_node=2" in out
    names = local_slurm["nodes"]
    assert f"2 node(s): {' '.join(names)}; head {names[0]}" in log
    assert "Ray cluster ready: 2 node(s), 16 GPU(s)" in log
    assert "Connected to Ray cluster" in log and "trainer.nnodes=2" in log
    assert "Ray stopped" in log
    job = re.search(r"job (\d+): 2 node", log).group(1)
    assert not leftover_ray(job)


def test_head_interface_override(local_slurm, tmp_path):
    """GRPOFLOW_RAY_HEAD_IFACE (verl.env, per experiment): the head's address is that interface's IPv4 address, read
    on the head node (here `lo`: both stand-in nodes share this host); an interface the head lacks fails at once."""
    for sub in ("bad", "lo"):
        (tmp_path / sub).mkdir()
    job = launch(
        tmp_path / "bad",
        f"python {PROBE} --out {tmp_path / 'probe.json'}",
        36570,
        extra_env="export GRPOFLOW_RAY_HEAD_IFACE=nosuchif0",
    )
    state = wait_job(job, timeout=120)
    log = output(tmp_path / "bad")
    assert state["JobState"] == "FAILED", log[-3000:]
    assert "grpoflow: error: no IPv4 address on interface nosuchif0 of the head node" in log
    assert "starting the Ray head" not in log
    job = launch(
        tmp_path / "lo",
        f"python {PROBE} --out {tmp_path / 'probe.json'}",
        36580,
        extra_env="export GRPOFLOW_RAY_HEAD_IFACE=lo",
    )
    state = wait_job(job)
    log = output(tmp_path / "lo")
    assert state["JobState"] == "COMPLETED", log[-4000:]
    assert f"starting the Ray head on {local_slurm['nodes'][0]} (127.0.0.1:36580, interface lo)" in log
    assert json.loads((tmp_path / "probe.json").read_text())["ray_address"] == "127.0.0.1:36580"
