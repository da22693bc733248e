"""Cluster-plane jobs run in the cluster environment named in the config, through profiles/slurm on the local SLURM.

The cluster environment here is a second, distinct Python environment built by the test: a venv at another
path (its own interpreter path and sys.prefix) that sees the local venv's packages through a .pth file and
adds what the local one lacks, TransferQueue (verl's default v1 trainer imports it; pinned in
requirements/cluster.lock, pure Python). It is named once, with `--config cluster_env={python: ...}`. Each job's
log says which interpreter ran it (grpoflow.envcheck), and the test asserts that from the jobs' own logs:

- train_grpo (backend verl): runs under the cluster interpreter (named by path, or by an activation prefix); its environment check finds verl and
  transfer_queue there and stops the job in seconds naming vllm and flash-attn, which need CUDA wheels and are
  not installed here (this is where it stops here). Without cluster_env the same job runs under Snakemake's
  interpreter and the check also names TransferQueue.
- merge_checkpoint (backend verl): runs verl's merger on a genuine FSDP2 checkpoint under the cluster
  interpreter, to the end (the merger runs on CPU).
- evaluate (evaluation.backend: vllm): runs under the cluster interpreter; its check names vllm in one line
  (vLLM needs CUDA: this is where it stops here).
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from grpoflow_testing import REPO, make_workdir, snakemake_slurm, submitted_jobs, unavailable

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

EXP = "env-verl"


def lock_pin(name: str) -> str:
    for line in (REPO / "requirements" / "cluster.lock").read_text().splitlines():
        if line.lower().startswith(name.lower() + "=="):
            return line.strip()
    raise AssertionError(f"{name} not pinned in requirements/cluster.lock")


@pytest.fixture(scope="module")
def cluster_python(tmp_path_factory) -> str:
    """A second environment: venv at another path + the local venv's packages (.pth) + TransferQueue."""
    root = tmp_path_factory.mktemp("cluster-env") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, capture_output=True)
    py = root / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # addsitedir (not a plain path line): the local site-packages' own .pth files (editable installs) apply too.
    Path(site, "grpoflow-local-packages.pth").write_text(
        f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, lock_pin("TransferQueue")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        unavailable(
            f"cannot pip install {lock_pin('TransferQueue')} into the test's cluster env: {proc.stderr.strip()[-300:]}"
        )
    # Distinct by construction: its own interpreter path and prefix, and a package the local env must not have.
    probe = "import sys, importlib.util as u; print(sys.executable, sys.prefix, u.find_spec('transfer_queue') is not None, u.find_spec('verl') is not None)"
    exe, prefix, tq, verl = subprocess.run(
        [str(py), "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert (exe, prefix, tq, verl) == (str(py), str(root), "True", "True")
    assert (
        subprocess.run(
            [sys.executable, "-c", "import importlib.util as u; print(u.find_spec('transfer_queue'))"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        == "None"
    )
    return str(py)


@pytest.fixture(scope="module")
def tiny(tiny_base, verl_full_checkpoints) -> dict:
    """A tiny Qwen3 SFT start and a genuine verl FSDP2 checkpoint of it at step 2 (tests/conftest.py)."""
    return {"base": tiny_base, "checkpoints": verl_full_checkpoints[2]}


def overlay(tmp_path: Path, base: str) -> Path:
    """One verl experiment on the shipped GSM8K sample, evaluated with vLLM; sbatch asks for 1 GPU each."""
    shipped = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg = {
        "datasets": {"gsm8k_sample": shipped["datasets"]["gsm8k_sample"]},
        "experiments": {
            EXP: {
                "backend": "verl",
                "data": {"dataset": "gsm8k_sample", "train_split": "train", "val_split": None},
                "sft": {"model": base},
                "grpo": {
                    "total_steps": 2,
                    "save_freq": 2,
                    "prompts_per_step": 2,
                    "num_generations": 2,
                    "max_prompt_length": 64,
                    "max_response_length": 32,
                },
                "verl": {
                    "ppo_mini_batch_size": 2,
                    "ppo_micro_batch_size_per_gpu": 1,
                    "log_prob_micro_batch_size_per_gpu": 1,
                    "rollout": {"name": "vllm", "tensor_model_parallel_size": 1},
                },
                "resources": {"nodes": 1, "gpus_per_node": 1, "cpus_per_task": 2, "mem_mb": 4000, "runtime": 10},
            }
        },
        "evaluation": {
            "backend": "vllm",
            "resources": {"gpus": 1},
            "benchmarks": {"gsm8k_sample": {"dataset": "gsm8k_sample", "split": "test", "limit": 2}},
        },
    }
    path = tmp_path / "env-verl.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def configfiles(tmp_path: Path, base: str) -> list[str]:
    return ["--configfile", str(overlay(tmp_path, base))]


def fresh(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def interpreter(log: Path) -> str:
    lines = [ln for ln in log.read_text().splitlines() if "job interpreter: " in ln]
    assert lines, f"{log} names no interpreter:\n{log.read_text()[-2000:]}"
    return lines[0].split("job interpreter: ", 1)[1].split(" (Python", 1)[0]


def error_line(log: Path) -> str:
    errors = [ln for ln in log.read_text().splitlines() if ln.startswith("grpoflow: error: ")]
    assert len(errors) == 1, log.read_text()[-3000:]
    return errors[0]


def run_train(wd: Path, files: list[str], extra: list[str]) -> str:
    # --retries 0: the profile resubmits a failed job (for time limits); an environment that lacks a package fails
    # the same way each time, and one attempt's log is the evidence.
    proc = snakemake_slurm(
        [f"results/{EXP}/training_complete.json", *files, *extra, "--retries", "0"], wd, timeout=600, check=False
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and len(submitted_jobs(out)) == 1, out[-4000:]
    return out


@pytest.mark.parametrize("way", ["python", "activate"])
def test_train_grpo_runs_in_the_named_cluster_env_and_stops_where_cuda_is_needed(
    local_slurm, cluster_python, tiny, tmp_path, way
):
    """cluster_env.python (the interpreter by path) or cluster_env.activate (the job sources the venv's activate
    script, then runs `python`; a module system's `module load` is not available here)."""
    wd = make_workdir(fresh(tmp_path / "cluster"))
    files = configfiles(tmp_path, tiny["base"])
    if way == "python":
        setting = f"cluster_env={{python: {cluster_python}}}"
    else:
        setting = f"cluster_env={{activate: 'source {Path(cluster_python).parent / 'activate'}'}}"
    out = run_train(wd, files, ["--config", setting])
    log = wd / "logs" / "train_grpo" / f"{EXP}.log"
    assert interpreter(log) == cluster_python
    line = error_line(log)
    assert line.startswith(
        f"grpoflow: error: environment check failed for train_grpo (backend verl): {cluster_python} lacks vllm (verl[vllm]) (for actor_rollout_ref.rollout.name=vllm), flash-attn (for attn_implementation flash_attention_2"
    )
    assert "TransferQueue" not in line and "verl==" not in line and "cluster_env.python or cluster_env.activate" in line
    assert "environment check for" not in log.read_text()  # it stopped at the check: no Ray, no verl
    # The command Snakemake printed (and sbatch ran) names the cluster interpreter for the wrapper and for verl.
    if way == "python":
        assert (
            f"{cluster_python} -m grpoflow.backends.verl.train" in out
            and f"{cluster_python} -m verl.trainer.main_ppo" in out
        )
    else:
        assert f"source {Path(cluster_python).parent / 'activate'} && python -m grpoflow.backends.verl.train" in out


def test_without_cluster_env_train_grpo_runs_in_snakemakes_env_and_names_the_setting(local_slurm, tiny, tmp_path):
    wd = make_workdir(fresh(tmp_path / "local"))
    run_train(wd, configfiles(tmp_path, tiny["base"]), [])
    log = wd / "logs" / "train_grpo" / f"{EXP}.log"
    local = interpreter(log)
    assert Path(local).resolve().parent == Path(sys.executable).resolve().parent or local == sys.executable
    line = error_line(log)
    assert (
        "TransferQueue (verl[vllm]) (for verl's default trainer.use_v1=true)" in line
        and "cluster_env.python or cluster_env.activate in the config or profile" in line
    )


def test_merge_and_vllm_evaluate_run_in_the_named_cluster_env(local_slurm, cluster_python, tiny, tmp_path):
    wd = make_workdir(fresh(tmp_path / "merge"))
    files = configfiles(tmp_path, tiny["base"])
    # What train_grpo would have left: the SFT record, verl's checkpoint at the final step, the completion marker.
    from grpoflow.discovery import discover_to_file

    results = wd / "results" / EXP
    results.mkdir(parents=True)
    discover_to_file(
        {
            "model": tiny["base"],
            "run_dir": None,
            "hf_subdir": "huggingface",
            "step": "latest",
            "trust_remote_code": False,
        },
        str(results / "sft.json"),
    )
    subprocess.run(["cp", "-r", str(tiny["checkpoints"]), str(results / "checkpoints")], check=True)
    (results / "training_complete.json").write_text(json.dumps({"experiment": EXP, "backend": "verl", "final_step": 2}))
    (results / "train_metrics.jsonl").write_text("")
    target = f"results/{EXP}/eval/gsm8k_sample.json"
    # Only these rules (plus the local data rules for the benchmark's Parquet): the files above stand in for the rest.
    proc = snakemake_slurm(
        [
            target,
            *files,
            "--config",
            f"cluster_env={{python: {cluster_python}}}",
            "--allowed-rules",
            "download_data",
            "convert_to_parquet",
            "merge_checkpoint",
            "evaluate",
            "--retries",
            "0",
        ],
        wd,
        timeout=900,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert len(submitted_jobs(out)) == 2, out[-4000:]
    merge_log = wd / "logs" / "merge_checkpoint" / f"{EXP}.log"
    assert interpreter(merge_log) == cluster_python
    assert "environment check for merge_checkpoint (backend verl) passed" in merge_log.read_text()
    record = json.loads((results / "model" / "grpoflow_merge.json").read_text())
    assert record["backend"] == "verl" and record["step"] == 2
    eval_log = wd / "logs" / "evaluate" / EXP / "gsm8k_sample.log"
    assert interpreter(eval_log) == cluster_python
    assert error_line(eval_log).startswith(
        f"grpoflow: error: environment check failed for evaluate (backend vllm): {cluster_python} lacks vllm (verl[vllm]) (for evaluation.backend: vllm); install them there"
    )
    assert proc.returncode != 0 and not (wd / target).exists()


TRL_EXP = "env-trl"


def trl_overlay(tmp_path: Path, base: str) -> list[str]:
    """One TRL-on-GPUs experiment (2 processes, vLLM colocate) on the shipped GSM8K sample; sbatch asks for 2 GPUs."""
    shipped = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg = {
        "datasets": {"gsm8k_sample": shipped["datasets"]["gsm8k_sample"]},
        "experiments": {
            TRL_EXP: {
                "backend": "trl",
                "data": {"dataset": "gsm8k_sample", "train_split": "train", "val_split": None},
                "sft": {"model": base},
                "grpo": {"total_steps": 2, "save_freq": 2, "prompts_per_step": 2, "num_generations": 2},
                "trl": {"use_cpu": False},
                "resources": {"nodes": 1, "gpus_per_node": 2, "cpus_per_task": 2, "mem_mb": 4000, "runtime": 10},
            }
        },
        "evaluation": {"benchmarks": {"gsm8k_sample": {"dataset": "gsm8k_sample", "split": "test", "limit": 2}}},
    }
    path = tmp_path / "env-trl.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return ["--configfile", str(path)]


def test_trl_on_gpus_runs_under_torchrun_in_the_named_cluster_env_and_stops_where_cuda_is_needed(
    local_slurm, cluster_python, tiny_base, tmp_path
):
    """train_grpo of `backend: trl` with `trl.use_cpu: false` is a cluster-plane job: through profiles/slurm its command
    (the environment check, then torchrun) runs under the cluster interpreter; the check finds TRL there and stops the
    job before torchrun starts anything, naming CUDA torch and vLLM (this machine's torch is the CPU build) and
    cluster_env, so the job log ends with that one line."""
    wd = make_workdir(fresh(tmp_path / "trl"))
    proc = snakemake_slurm(
        [f"results/{TRL_EXP}/training_complete.json", *trl_overlay(tmp_path, tiny_base)]
        + ["--config", f"cluster_env={{python: {cluster_python}}}", "--retries", "0"],
        wd,
        timeout=600,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and len(submitted_jobs(out)) == 1, out[-4000:]
    assert (
        f"{{ {cluster_python} -m grpoflow.envcheck train-trl-gpu colocate && env TORCH_ELASTIC_SHUTDOWN_TIMEOUT=900 "
        f"{cluster_python} -m torch.distributed.run --standalone --nproc-per-node 2 -m grpoflow.backends.trl.train"
    ) in out
    log = wd / "logs" / "train_grpo" / f"{TRL_EXP}.log"
    text = log.read_text()
    ran = [
        ln.split("job interpreter: ", 1)[1].split(" (Python", 1)[0]
        for ln in text.splitlines()
        if "job interpreter: " in ln
    ]
    assert ran == [cluster_python], text[-3000:]
    assert "torch.distributed" not in text and "Traceback" not in text, text[-3000:]
    assert text.rstrip().splitlines()[-1] == (
        f"grpoflow: error: environment check failed for train_grpo (backend trl on GPUs): {cluster_python} lacks CUDA torch "
        "(it has a CPU-only torch) (for trl.use_cpu false), vllm (verl[vllm]) (for trl.vllm.mode colocate); install them there "
        "(requirements/cluster.lock; flash-attn on a GPU node) or run the job in an environment that has them: cluster_env.python "
        "or cluster_env.activate in the config or profile, --sdm conda (envs/cluster.yaml), or --sdm apptainer with "
        "cluster_env.container (docs/cluster.md#deployment)"
    ), text[-3000:]
