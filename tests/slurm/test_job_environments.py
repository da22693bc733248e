"""Cluster-plane jobs run in the cluster environment named in the config, through profiles/slurm on the local SLURM.

The cluster environment here is a second, distinct Python environment built by the test: a venv at another
path (its own interpreter path and sys.prefix) that sees the local venv's packages through a .pth file and
adds what the local one lacks, TransferQueue (verl's default v1 trainer imports it; pinned in
requirements/cluster.lock, pure Python). It is named once, with `--config cluster_env={python: ...}`. Each job's
log says which interpreter ran it (grpoflow.envcheck), and the test asserts that from the jobs' own logs:

- train_grpo (backend verl): the start check (grpoflow.preflight, onstart) runs the cluster interpreter (named by
  path, or by an activation prefix), finds verl and transfer_queue there and refuses the run before any sbatch,
  naming vllm and flash-attn, which need CUDA wheels and are not installed here. Without cluster_env it runs
  Snakemake's interpreter and also names TransferQueue. With the start check passed by
  ``verl.env.GRPOFLOW_SKIP_ENV_CHECK: 1`` for the check of what main_ppo imports, the job runs under the cluster
  interpreter (its log says so) and verl stops at its own import.
- merge_checkpoint (backend verl): runs verl's merger on a genuine FSDP2 checkpoint under the cluster
  interpreter, to the end (the merger runs on CPU).
- evaluate (evaluation.backend: vllm): refused at the start check, naming vllm in one line (vLLM needs CUDA).
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from grpoflow_testing import REPO, make_workdir, snakemake_slurm, submitted_jobs, unavailable, verl_vllm_overlay

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.xdist_group("cluster-env")]  # one cluster venv

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
    return verl_vllm_overlay(tmp_path / "env-verl.yaml", EXP, base)


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


def refused_at_start(wd: Path, files: list[str], extra: list[str]) -> tuple[str, list[str]]:
    proc = snakemake_slurm([f"results/{EXP}/training_complete.json", *files, *extra], wd, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and submitted_jobs(out) == [] and "Traceback" not in out, out[-4000:]
    return out, [ln for ln in out.splitlines() if ln.startswith("grpoflow: cluster_env")]


@pytest.mark.parametrize("way", ["python", "activate"])
def test_train_grpo_is_refused_at_start_by_the_named_cluster_envs_own_interpreter(
    local_slurm, cluster_python, tiny, tmp_path, way
):
    """cluster_env.python (the interpreter by path) or cluster_env.activate (the start check sources the venv's
    activate script, as the job would, then runs `python`; a module system's `module load` is not available here)."""
    wd = make_workdir(fresh(tmp_path / "cluster"))
    files = configfiles(tmp_path, tiny["base"])
    if way == "python":
        setting = f"cluster_env={{python: {cluster_python}}}"
    else:
        setting = f"cluster_env={{activate: 'source {Path(cluster_python).parent / 'activate'}'}}"
    out, lines = refused_at_start(wd, files, ["--config", setting])
    assert len(lines) == 1, out[-3000:]
    assert lines[0].startswith(
        f"grpoflow: cluster_env.{way}: {cluster_python} lacks flash-attn (for train_grpo ({EXP}): attn_implementation flash_attention_2, verl's default), vllm (verl[vllm]) (for "
    ), lines
    assert (
        "TransferQueue" not in lines[0]
        and "verl==" not in lines[0]
        and "cluster_env.python or cluster_env.activate" in lines[0]
    )
    assert not (wd / "logs" / "train_grpo").exists()


def test_without_cluster_env_train_grpo_is_refused_naming_the_setting(local_slurm, tiny, tmp_path):
    wd = make_workdir(fresh(tmp_path / "local"))
    out, lines = refused_at_start(wd, configfiles(tmp_path, tiny["base"]), [])
    assert len(lines) == 1, out[-3000:]
    assert lines[0].startswith(f"grpoflow: cluster_env (unset: Snakemake's own interpreter): {sys.executable} lacks")
    assert (
        "TransferQueue (verl[vllm]) (for train_grpo (env-verl): verl's default trainer.use_v1=true)" in lines[0]
        and "cluster_env.python or cluster_env.activate in the config or profile" in lines[0]
    )


def test_the_train_job_runs_under_the_named_cluster_interpreter(local_slurm, cluster_python, tiny, tmp_path):
    """Past the start check (skipped for this experiment, and evaluation by transformers), the job itself runs under
    the cluster interpreter, with its bin/ first on PATH; verl then stops at its own import of vLLM."""
    wd = make_workdir(fresh(tmp_path / "job"))
    overlay_path = overlay(tmp_path, tiny["base"])
    cfg = yaml.safe_load(overlay_path.read_text())
    cfg["experiments"][EXP]["verl"]["env"] = {"GRPOFLOW_SKIP_ENV_CHECK": 1}
    cfg["evaluation"]["backend"] = "transformers"
    overlay_path.write_text(yaml.safe_dump(cfg))
    proc = snakemake_slurm(
        [
            f"results/{EXP}/training_complete.json",
            "--configfile",
            str(overlay_path),
            "--config",
            f"cluster_env={{python: {cluster_python}}}",
            "--retries",
            "0",
        ],
        wd,
        timeout=600,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and len(submitted_jobs(out)) == 1, out[-4000:]
    log = wd / "logs" / "train_grpo" / f"{EXP}.log"
    assert interpreter(log) == cluster_python
    assert (
        f"{cluster_python} -m grpoflow.backends.verl.train" in out
        and f"{cluster_python} -m verl.trainer.main_ppo" in out
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
    # Only merge_checkpoint: the files above stand in for the rest.
    proc = snakemake_slurm(
        [
            f"results/{EXP}/model",
            *files,
            "--config",
            f"cluster_env={{python: {cluster_python}}}",
            "--allowed-rules",
            "merge_checkpoint",
            "--retries",
            "0",
        ],
        wd,
        timeout=900,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and len(submitted_jobs(out)) == 1, out[-4000:]
    assert f"grpoflow: preflight: cluster environment {cluster_python} has verl" in out
    merge_log = wd / "logs" / "merge_checkpoint" / f"{EXP}.log"
    assert interpreter(merge_log) == cluster_python
    assert "environment check for merge_checkpoint (backend verl) passed" in merge_log.read_text()
    record = json.loads((results / "model" / "grpoflow_merge.json").read_text())
    assert record["backend"] == "verl" and record["step"] == 2
    # vLLM evaluation of the merged model: refused at the start, before any sbatch.
    target = f"results/{EXP}/eval/gsm8k_sample.json"
    proc = snakemake_slurm(
        [
            target,
            *files,
            "--config",
            f"cluster_env={{python: {cluster_python}}}",
            "--allowed-rules",
            "download_data",
            "convert_to_parquet",
            "evaluate",
        ],
        wd,
        timeout=900,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and submitted_jobs(out) == [], out[-4000:]
    assert (
        f"grpoflow: cluster_env.python: {cluster_python} lacks vllm (verl[vllm]) (for evaluate ({EXP}, gsm8k_sample): evaluation.backend: vllm); install them there"
        in out
    )
    assert proc.returncode != 0 and not (wd / target).exists()


TRL_EXP = "env-trl"


def trl_overlay(tmp_path: Path, base: str, vllm_mode: str) -> list[str]:
    """One TRL-on-GPUs experiment (2 processes) on the shipped GSM8K sample; sbatch asks for 2 GPUs."""
    shipped = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg = {
        "datasets": {"gsm8k_sample": shipped["datasets"]["gsm8k_sample"]},
        "experiments": {
            TRL_EXP: {
                "backend": "trl",
                "data": {"dataset": "gsm8k_sample", "train_split": "train", "val_split": None},
                "sft": {"model": base},
                "grpo": {"total_steps": 2, "save_freq": 2, "prompts_per_step": 2, "num_generations": 2},
                "trl": {"use_cpu": False, "vllm": {"mode": vllm_mode}},
                "resources": {"nodes": 1, "gpus_per_node": 2, "cpus_per_task": 2, "mem_mb": 4000, "runtime": 10},
            }
        },
        "evaluation": {"benchmarks": {"gsm8k_sample": {"dataset": "gsm8k_sample", "split": "test", "limit": 2}}},
    }
    path = tmp_path / f"env-trl-{vllm_mode}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return ["--configfile", str(path)]


def test_trl_on_gpus_runs_under_torchrun_in_the_named_cluster_env_and_stops_where_cuda_is_needed(
    local_slurm, cluster_python, tiny_base, tmp_path
):
    """train_grpo of `backend: trl` with `trl.use_cpu: false` is a cluster-plane job. With vLLM colocate, the cluster
    environment's lack of vLLM is found at onstart, before any sbatch. Without vLLM, through profiles/slurm its command
    (the environment check, then torchrun) runs under the cluster interpreter; the check finds TRL there and stops the
    job before torchrun starts anything, naming CUDA torch (this machine's torch is the CPU build, which only the
    job's check reads) and cluster_env, so the job log ends with that one line."""
    wd = make_workdir(fresh(tmp_path / "trl"))
    target = f"results/{TRL_EXP}/training_complete.json"
    env = ["--config", f"cluster_env={{python: {cluster_python}}}", "--retries", "0"]
    proc = snakemake_slurm([target, *trl_overlay(tmp_path, tiny_base, "colocate"), *env], wd, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and submitted_jobs(out) == [], out[-4000:]
    assert (
        f"grpoflow: cluster_env.python: {cluster_python} lacks vllm (verl[vllm]) (for train_grpo ({TRL_EXP}): "
        "trl.vllm.mode colocate)" in out
    ), out[-4000:]

    proc = snakemake_slurm([target, *trl_overlay(tmp_path, tiny_base, "none"), *env], wd, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and len(submitted_jobs(out)) == 1, out[-4000:]
    assert (
        f"{{ {cluster_python} -m grpoflow.envcheck train-trl-gpu none && {cluster_python} -m grpoflow.backends.trl.launch "
        "--nproc-per-node 2 --shutdown-timeout 900 -- -m grpoflow.backends.trl.train"
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
        "(it has a CPU-only torch) (for trl.use_cpu false); install them there "
        "(requirements/cluster.lock; flash-attn on a GPU node) or run the job in an environment that has them: cluster_env.python "
        "or cluster_env.activate in the config or profile, --sdm conda (envs/cluster.yaml), or --sdm apptainer with "
        "cluster_env.container (docs/cluster.md#deployment)"
    ), text[-3000:]
