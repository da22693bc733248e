"""Which interpreter each job gets (grpoflow.deployment), what the environment check asks for (grpoflow.envcheck),
and what `snakemake -n -p` prints for each way of deploying the cluster environment. Fast: no SLURM, no run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from grpoflow_testing import REPO, make_workdir, snakemake

from grpoflow import envcheck
from grpoflow.backends.verl.environment import MERGE as VERL_MERGE
from grpoflow.backends.verl.environment import training_needs
from grpoflow.deployment import CLUSTER, LOCAL, TUNIX, VLLM_CPU, JobEnv, job_envs
from grpoflow.errors import GrpoflowError

LOCAL_PY = "/venvs/local/bin/python"


OFFLINE = 'export HF_HUB_OFFLINE=1 HF_HOME="$PWD"/resources/hf VLLM_NO_USAGE_STATS=1 RAY_USAGE_STATS_ENABLED=0'


def test_each_way_of_deploying_picks_the_cluster_interpreter_explicitly():
    """Every job exports offline Hub access with the shared HF_HOME first; an interpreter named by path has its bin/
    first on PATH (as activating its venv would)."""
    local_env = JobEnv(f'{OFFLINE} PATH=/venvs/local/bin:"$PATH"', LOCAL_PY)
    none = job_envs({}, set(), LOCAL_PY)
    # then the env check names what is missing
    assert none == {LOCAL: local_env, CLUSTER: local_env, TUNIX: local_env, VLLM_CPU: local_env}
    named = job_envs({"cluster_env": {"python": "/shared/cluster env/bin/python"}}, set(), LOCAL_PY)
    assert (
        named[CLUSTER].run()
        == f"{OFFLINE} PATH='/shared/cluster env/bin':\"$PATH\" && '/shared/cluster env/bin/python'"
    )
    assert named[LOCAL] == local_env
    mod = job_envs({"cluster_env": {"activate": "module load cuda/12.8; source /s/v/bin/activate;"}}, set(), LOCAL_PY)
    assert mod[CLUSTER].run() == f"{OFFLINE} && module load cuda/12.8; source /s/v/bin/activate && python"
    # --sdm conda activates each rule's env (envs/local.yaml, envs/cluster.yaml): `python` is that env's.
    conda = JobEnv(OFFLINE, "python")
    assert job_envs({"cluster_env": {"python": "/x/bin/python"}}, {"conda"}, LOCAL_PY) == {
        LOCAL: conda,
        CLUSTER: conda,
        TUNIX: conda,
        VLLM_CPU: conda,
    }
    # --sdm apptainer: the image's python for cluster jobs only; without an image, the named env.
    app = job_envs({"cluster_env": {"container": "docker://img", "python": "/x/bin/python"}}, {"apptainer"}, LOCAL_PY)
    assert app == {LOCAL: local_env, CLUSTER: conda, TUNIX: local_env, VLLM_CPU: local_env}
    assert (
        job_envs({"cluster_env": {"python": "/x/bin/python"}}, {"apptainer"}, LOCAL_PY)[CLUSTER].python
        == "/x/bin/python"
    )
    assert (
        job_envs({"hf_home": "/shared/hf"}, {"conda"}, LOCAL_PY)[CLUSTER].setup
        == "export HF_HUB_OFFLINE=1 HF_HOME=/shared/hf VLLM_NO_USAGE_STATS=1 RAY_USAGE_STATS_ENABLED=0"
    )


def test_every_python_call_of_a_command_gets_the_interpreter_and_nothing_else():
    cmd = 'env A=1 python -m grpoflow.backends.verl.train --marker m -- \\\n    python -m verl.trainer.main_ppo x="$(python -m grpoflow.discovery path s.json)" y=/opt/python -m z=mypython'
    out = JobEnv("", "/c/bin/python").command(cmd)
    assert out.count("/c/bin/python -m ") == 3 and "y=/opt/python -m" in out and "z=mypython" in out
    assert (
        JobEnv("source /c/bin/activate", "python")
        .command("python -m a")
        .startswith("source /c/bin/activate && python -m a")
    )


def test_train_check_follows_the_trainers_overrides():
    names = lambda ov: [m for m, _, _ in training_needs(ov)]  # noqa: E731
    assert names({}) == ["verl", "transfer_queue", "vllm", "flash_attn"]
    assert names(
        {"trainer.use_v1": "false", "actor_rollout_ref.model.override_config.attn_implementation": "sdpa"}
    ) == ["verl", "vllm"]


def test_a_missing_package_is_one_line_naming_the_interpreter_and_the_settings():
    with pytest.raises(GrpoflowError) as err:
        envcheck.check("eval-vllm")
    msg = str(err.value)
    assert "\n" not in msg and sys.executable in msg and "vllm (verl[vllm]) (for evaluation.backend: vllm)" in msg
    assert "cluster_env.python" in msg and "--sdm conda" in msg
    envcheck.check(VERL_MERGE)  # verl is installed here: passes
    proc = subprocess.run(
        [sys.executable, "-m", "grpoflow.envcheck", "eval-vllm"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1 and f"job interpreter: {sys.executable}" in proc.stderr
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith("grpoflow: error: environment check failed for evaluate (backend vllm)")
    )
    assert "Traceback" not in proc.stderr


def test_dry_run_shows_each_job_with_its_interpreter(tmp_path):
    wd = make_workdir(tmp_path)
    base = ["-n", "-p", "--profile", str(REPO / "profiles/slurm"), "--configfile", "config/qwen3-8b-gsm8k.yaml"]
    out = snakemake([*base, "--config", "cluster_env={python: /shared/envs/grpoflow-cluster/bin/python}"], wd).stdout
    py = "/shared/envs/grpoflow-cluster/bin/python"
    assert (
        f"{py} -m grpoflow.backends.verl.train" in out
        and f"{py} -m verl.trainer.main_ppo" in out
        and f"$({py} -m grpoflow.discovery path" in out
    )
    assert f"{py} -m grpoflow.workflow merge_checkpoint" in out and f"{py} -m grpoflow.workflow evaluate" in out
    # Data rules are local `script:` rules: Snakemake's own interpreter, no cluster env.
    assert "node-shape check" not in out  # a dry-run never asks SLURM
    out = snakemake(
        [*base, "--config", "cluster_env={activate: 'module load cuda; source /s/venv/bin/activate'}"], wd
    ).stdout
    assert "module load cuda; source /s/venv/bin/activate && python -m grpoflow.workflow merge_checkpoint" in out


@pytest.mark.parametrize(
    "entry", [("grpoflow.job", "--plan"), ("grpoflow.workflow", "--kwargs")], ids=["job", "workflow-shim"]
)
def test_shell_job_runs_the_library_function_with_its_check_first(tmp_path, entry):
    """`python -m grpoflow.job evaluate --plan` (and its shim `python -m grpoflow.workflow evaluate --kwargs`, which
    finished runs' shell lines name) with evaluation.backend vllm stops at the check, before reading any input."""
    module, flag = entry
    log = tmp_path / "eval.log"
    kwargs = {
        "run": {"settings": {"backend": "vllm"}},
        "model_name": "m",
        "model": {},
        "benchmark_name": "b",
        "benchmark": {},
        "prompt": None,
        "inputs": {},
        "metrics_path": str(tmp_path / "m.json"),
        "samples_path": str(tmp_path / "s.jsonl"),
    }
    proc = subprocess.run(
        [sys.executable, "-m", module, "evaluate", "--log", str(log), flag, json.dumps(kwargs)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    text = log.read_text()
    assert f"job interpreter: {sys.executable}" in text and text.rstrip().splitlines()[-1].startswith(
        "grpoflow: error: environment check failed for evaluate"
    )


def test_multinode_under_apptainer_is_refused_in_one_line():
    from grpoflow_testing import load_shipped

    from grpoflow.config import resolve_config
    from grpoflow.deployment import check_multinode
    from grpoflow.errors import ConfigError

    raw = load_shipped("config/qwen3-32b-gsm8k.yaml")
    raw["defaults"]["resources"]["nodes"] = 2
    cfg = resolve_config(raw)
    image = {"cluster_env": {"container": "docker://verlai/verl:x"}}
    check_multinode(cfg, image, set())  # no --sdm apptainer: the image is not used
    check_multinode(cfg, {}, {"apptainer"})  # no image for the cluster plane
    with pytest.raises(
        ConfigError, match=r"resources.nodes = 2 with --sdm apptainer and cluster_env.container: "
    ) as err:
        check_multinode(cfg, image, {"apptainer"})
    assert "\n" not in str(err.value)
