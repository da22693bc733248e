"""TRL on GPUs runs in the cluster plane (cluster_env, like verl): the plane, the job-start environment check that
stops a GPU job in the wrong environment in seconds with one line naming cluster_env (this machine's torch is the
CPU build, so the check's failure is real here), and what `snakemake -n -p` shows for the recipe configs."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest
from grpoflow_testing import REPO, make_workdir, snakemake
from trainkit import resolved

from grpoflow import envcheck
from grpoflow.backends.trl import gpu_env
from grpoflow.backends.trl.commandline import command
from grpoflow.deployment import CLUSTER, LOCAL, experiment_plane
from grpoflow.errors import GrpoflowError

EXP = "tiny-arith-seed1"
GPU = {"defaults": {"trl": {"use_cpu": False}, "resources": {"gpus_per_node": 2}, "grpo": {"lora": {"rank": 8}}}}


def spec_of(command_line: str) -> dict:
    """The --spec JSON of a train_grpo command line (plain, under torchrun, or in the check's brace group)."""
    argv = shlex.split(command_line)
    return json.loads(argv[argv.index("--spec") + 1].removesuffix(";"))  # "...'; }" in the brace group


def test_trl_on_gpus_runs_where_verl_runs(default_config):
    assert experiment_plane(resolved(default_config).experiment(EXP)) == LOCAL
    assert experiment_plane(resolved(default_config, GPU).experiment(EXP)) == CLUSTER


def test_the_check_names_cuda_torch_trl_vllm_and_cluster_env(default_config):
    cfg = resolved(default_config, GPU)
    spec = spec_of(command(cfg, EXP, {"train": "t", "sft": "s"}, {"marker": "m", "metrics": "x"}))
    assert envcheck.torch_cuda_build() is None, "this machine's torch is the CPU build (requirements/local.lock)"
    with pytest.raises(GrpoflowError) as err:
        gpu_env.check(spec)
    msg = str(err.value)
    assert "\n" not in msg and sys.executable in msg
    assert "CUDA torch (it has a CPU-only torch) (for trl.use_cpu false)" in msg
    assert "vllm (verl[vllm]) (for trl.vllm.mode colocate)" in msg
    assert "cluster_env.python" in msg and "--sdm conda" in msg and "use_cpu" not in msg.split("; ", 1)[1]


def test_a_gpu_job_in_the_wrong_environment_stops_before_loading_anything(default_config, tmp_path):
    cfg = resolved(default_config, {**GPU, "defaults": {**GPU["defaults"], "trl": {"use_cpu": False, "processes": 1}}})
    outs = {"marker": str(tmp_path / "m.json"), "metrics": str(tmp_path / "x.jsonl")}
    cmd = command(cfg, EXP, {"train": str(tmp_path / "none.parquet"), "sft": str(tmp_path / "none.json")}, outs)
    argv = shlex.split(cmd)
    assert argv[:3] == ["python", "-m", "grpoflow.backends.trl.train"]
    proc = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert lines[-1].startswith("grpoflow: error: environment check failed for train_grpo (backend trl on GPUs)")
    assert "cluster_env" in lines[-1]
    # Stopped before reading the (missing) sft.json or training data, let alone a model.
    assert "none.json" not in proc.stderr and "Loading" not in proc.stderr


# Recipe 004 ships on its one 24 GB GPU; 002 on 2 GPUs (an Accelerate launch), and its grid goes to one process per
# run with gpus_per_node: 1 (cheaper in GPU-hours, its config says why).
@pytest.mark.parametrize(
    "config, overlay, n",
    [
        ("config/qwen2.5-math-1.5b-lora-binary.yaml", None, 1),
        ("config/qwen3-0.6b-lora-ablations.yaml", None, 2),
        ("config/qwen3-0.6b-lora-ablations.yaml", "defaults: {resources: {gpus_per_node: 1}}\n", 1),
    ],
)
def test_dry_run_of_the_recipe_configs_shows_torchrun_vllm_and_the_cluster_interpreter(tmp_path, config, overlay, n):
    wd = make_workdir(tmp_path)
    files = [config]
    if overlay is not None:
        (wd / "overlay.yaml").write_text(overlay)
        files.append("overlay.yaml")
    py = "/shared/envs/grpoflow-cluster/bin/python"
    out = snakemake(
        ["-n", "-p", "--profile", str(REPO / "profiles/slurm"), "--configfile", *files]
        + ["--config", f"cluster_env={{python: {py}}}"],
        wd,
    )
    text = out.stdout + out.stderr
    if n == 2:
        launch = (
            f"{{ {py} -m grpoflow.envcheck train-trl-gpu colocate lora && "
            f"{py} -m grpoflow.backends.trl.launch --nproc-per-node 2 --shutdown-timeout 900 -- -m grpoflow.backends.trl.train"
        )
    else:
        launch = f"{py} -m grpoflow.backends.trl.train"
        assert "grpoflow.backends.trl.launch" not in text
    assert launch in text, text[-3000:]
    spec = spec_of(text[text.index(launch) :].splitlines()[0])
    assert spec["trl"]["vllm"]["mode"] == "colocate" and spec["trl"]["processes"] == n
    assert spec["trl"]["vllm"]["gpu_memory_utilization"] == 0.3 and spec["trl"]["vllm"]["tensor_parallel_size"] == 1
    assert f"{py} -m grpoflow.workflow merge_checkpoint" in text, "the merge runs in the same environment"
    assert f"with TRL on {n} GPU process(es), vLLM colocate in bfloat16. GPU memory per GPU" in text
    train = text[text.index("rule train_grpo") :]
    assert f"gpu={n}," in train[: train.index("\n\n")], "SLURM is asked for the GPUs the processes use (--gpus)"


def test_the_check_before_torchrun_is_the_same_check_in_one_line():
    """`python -m grpoflow.envcheck train-trl-gpu <mode> [lora]`, what the command runs before torchrun."""
    proc = subprocess.run(
        [sys.executable, "-m", "grpoflow.envcheck", "train-trl-gpu", "none"], capture_output=True, text=True, timeout=60
    )
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert last.startswith("grpoflow: error: environment check failed for train_grpo (backend trl on GPUs)")
    assert "CUDA torch" in last and "vllm" not in last.split(";")[0] and "cluster_env" in last
    bad = subprocess.run([sys.executable, "-m", "grpoflow.envcheck", "train-trl-gpu"], capture_output=True, text=True)
    assert bad.returncode == 2 and "train-trl-gpu <vllm mode> [lora]" in bad.stderr
