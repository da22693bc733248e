"""benchmarks/gpu_acceptance.py on the CPU (issue 33): its plan (parts, the pinned wheels to carry, the 64 MiB budget
measured from the files present), part selection, the table it writes, its --dry settings, and its refusal to
pretend without a CUDA device. No GPU and no network: the GPU parts themselves run only on a GPU machine
(docs/gpu-acceptance.md). The cluster parts (issue 39: verl, TRL colocate and server mode) need vLLM, verl and Ray,
which the lent machine cannot be given: their plan, their --dry commands (verl's checked against verl's own schema)
and their refusal where vLLM is missing."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys

import pytest
from grpoflow_testing import PYTHON, REPO, require

SCRIPT = REPO / "benchmarks" / "gpu_acceptance.py"
PARTS = ["gpucheck", "masters", "trl-full", "trl-lora", "sigterm", "eval", "tunix", "verl", "colocate", "server"]
CLUSTER = ["verl", "colocate", "server"]


def script(*args: str, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def ga():
    spec = importlib.util.spec_from_file_location("gpu_acceptance", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def locked(lock: str) -> dict[str, str]:
    out = {}
    for line in (REPO / "requirements" / lock).read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            out[name.strip().lower().replace("_", "-")] = version.strip()
    return out


def test_the_plan_lists_the_parts_and_the_exact_pins_to_download(tmp_path):
    proc = script("--plan", "--wheels", str(tmp_path / "none"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for key in PARTS:
        assert f"  {key} " in out
    download = next(line.strip() for line in out.splitlines() if " -m pip download " in line)
    argv = shlex.split(download)
    assert {"--no-deps", "--only-binary=:all:"} <= set(argv) and argv[argv.index("--python-version") + 1] == "3.12"
    pins = dict(a.split("==") for a in argv if "==" in a)
    local, tunix = locked("local.lock"), locked("tunix.lock")
    for name in ("trl", "datasets", "jsonschema", "math-verify", "google-re2", "cachetools"):
        assert pins[name] == local[name], name
    assert pins["google-tunix"] == tunix["google-tunix"]
    assert "torch" not in pins and "transformers" not in pins, "the GPU image's own torch/transformers are used"
    build = next(line.strip() for line in out.splitlines() if " -m pip wheel " in line)
    assert "--no-deps" in build and build.split()[-1] == "antlr4-python3-runtime==" + local["antlr4-python3-runtime"]
    assert "wheel folder: none measured" in out
    assert "--no-index" in out and "timeout 540 python3 benchmarks/gpu_acceptance.py" in out


def test_the_budget_is_measured_from_the_wheel_files_present(tmp_path):
    """Sparse files named like the planned wheels stand in for the downloaded ones: only their sizes are read."""
    folder = tmp_path / "whl"
    folder.mkdir()
    (folder / "trl-1.16.0-py3-none-any.whl").write_bytes(b"x" * 1000)
    (folder / "grpoflow-0.1.0-py3-none-any.whl").write_bytes(b"x" * 500)
    proc = script("--plan", "--wheels", str(folder))
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("wheel folder"))
    assert "2 wheels, 0.00 MiB of 64 MiB: fits" in line and "missing: datasets" in line and "missing: trl" not in line

    with open(folder / "datasets-5.2.0-py3-none-any.whl", "wb") as f:
        f.truncate(64 * 2**20)  # with the other two: 1,500 bytes over
    proc = script("--plan", "--wheels", str(folder))
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("wheel folder"))
    assert proc.returncode == 1 and "64.00 MiB of 64 MiB: DOES NOT FIT" in line


def test_parts_are_selected_by_key_in_run_order_and_an_unknown_one_is_named(ga):
    assert [p.key for p in ga.selected_parts("tunix,gpucheck")] == ["gpucheck", "tunix"]
    assert [p.key for p in ga.selected_parts(None)] == PARTS
    assert [p.key for p in ga.selected_parts("cluster,gpucheck")] == ["gpucheck", *CLUSTER]
    proc = script("--plan", "--parts", "gpucheck,vllm")
    assert proc.returncode != 0 and proc.stderr.strip().splitlines()[-1] == (
        "gpu_acceptance: unknown part(s) vllm: choose from " + ", ".join(PARTS) + " (or a group: cluster)"
    )
    only = script("--plan", "--parts", "gpucheck", "--wheels", "/nonexistent").stdout
    assert "trl==" not in only and "google-tunix==" not in only and "jsonschema==" in only


def test_without_a_cuda_device_every_part_says_skipped_and_the_table_is_still_written(tmp_path):
    out = tmp_path / "out"
    proc = script("--out", str(out), "--work", str(tmp_path / "work"), env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ": skipped: " in ln]
    assert lines == [f"{k}: skipped: no CUDA device" for k in PARTS]
    data = json.loads((out / "gpu-acceptance.json").read_text())
    assert data["env"]["device"] == "no CUDA device"
    assert [(r["part"], r["status"]) for r in data["results"]] == [(k, "skipped") for k in PARTS]
    md = (out / "gpu-acceptance.md").read_text()
    assert "| part | status | result |" in md and md.count("| skipped | skipped: no CUDA device |") == len(PARTS)
    assert not list(out.glob("*.tmp")) and not (out / "work").exists(), "scratch stays out of the output dir"


def test_dry_runs_each_parts_cpu_side_with_the_gpu_settings(tmp_path):
    out = tmp_path / "out"
    proc = script("--dry", "--parts", "masters,trl-full,trl-lora,sigterm", "--out", str(out), "--work", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = {r["part"]: r for r in json.loads((out / "gpu-acceptance.json").read_text())["results"]}
    assert "bf16 update lost = True" in results["masters"]["line"]
    full, lora = (results[k]["estimate"]["phases"]["update (forward + backward)"] for k in ("trl-full", "trl-lora"))
    assert full["reference"] > 0 and lora["reference"] == 0, "beta 0.04: a reference copy only without LoRA"
    assert full["weights"] == pytest.approx(0.596e9 * 4 / 2**30, rel=0.02), "fp32 masters of Qwen3-0.6B"
    argv = shlex.split(results["trl-lora"]["command"])
    assert argv[1:8] == [
        "-m",
        "grpoflow.backends.trl.launch",
        "--nproc-per-node",
        "1",
        "--shutdown-timeout",
        "900",
        "--",
    ]
    assert argv[8:10] == [str(SCRIPT), "--probe-train"]
    spec = json.loads(argv[argv.index("--spec") + 1])
    assert spec["trl"]["use_cpu"] is False and spec["trl"]["processes"] == 1 and spec["trl"]["vllm"]["mode"] == "none"
    assert spec["grpo"]["lora"]["rank"] == 16 and spec["grpo"]["learning_rate"] == 1e-6
    sig = shlex.split(results["sigterm"]["command"])
    assert sig[8:10] == ["-m", "grpoflow.backends.trl.train"], "the SIGTERM part runs the job's module itself"
    assert "grace 900 s" in results["sigterm"]["line"]


def test_the_eval_part_runs_the_evaluate_job_on_the_model_given(tmp_path):
    model = tmp_path / "trained-demo"
    proc = script(
        "--dry", "--parts", "eval", "--eval-model", str(model), "--out", str(tmp_path), "--work", str(tmp_path)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (result,) = json.loads((tmp_path / "gpu-acceptance.json").read_text())["results"]
    argv = shlex.split(result["command"])
    assert argv[1:4] == ["-m", "grpoflow.workflow", "evaluate"]
    kwargs = json.loads(argv[argv.index("--kwargs") + 1])
    assert kwargs["model"] == {"kind": "external", "path": str(model)}
    assert kwargs["run"]["settings"]["backend"] == "transformers"
    assert (kwargs["benchmark"]["dataset"], kwargs["benchmark"]["split"]) == ("arith", "test")


def test_the_table_escapes_pipes_and_is_replaced_whole(ga, tmp_path):
    results = [{"part": "eval", "status": "pass", "line": "a | b"}]
    json_path, md_path = ga.write_outputs(tmp_path, results, {"device": "NVIDIA H100 80GB HBM3", "versions": "v"})
    assert "| eval | pass | a / b |" in md_path.read_text()
    assert json.loads(json_path.read_text())["results"] == results
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu-acceptance.json", "gpu-acceptance.md"]


def test_make_gpu_acceptance_runs_the_script_with_the_given_arguments(tmp_path):
    proc = subprocess.run(
        ["make", "-s", "gpu-acceptance", f"GPU_PYTHON={PYTHON}", f"GPU_ARGS=--plan --wheels {tmp_path}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 0 and "wheels to bring" in proc.stdout, proc.stdout + proc.stderr


def test_building_the_wheel_folder_without_the_registry_fails_in_one_line_naming_it(tmp_path):
    """PIP_NO_INDEX stands in for a machine where PyPI does not answer (the test makes no network call)."""
    proc = script("--build-wheels", str(tmp_path / "whl"), "--parts", "gpucheck", env={"PIP_NO_INDEX": "1"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("gpu_acceptance: pip download failed (exit 1): ") and "needs the package registry" in last


def test_the_plan_lists_the_cluster_parts_and_says_why_the_lent_machine_cannot_run_them(tmp_path):
    """The sizes are PyPI's for the cluster lock's pins (read 2026-11-29, recorded in the script): the plan must name
    the same versions the lock pins, and the verdict that vLLM, Ray and verl do not fit the 64 MiB a call carries."""
    proc = script("--plan", "--wheels", str(tmp_path / "none"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for key in CLUSTER:
        assert f"  {key} " in out
    lock = locked("cluster.lock")
    for name in ("vllm", "ray", "verl", "flashinfer-cubin"):
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(f"{name}=="))
        assert line.strip().startswith(f"{name}=={lock[name]} ") and f"(cluster.lock: {lock[name]})" in line, line
    verdict = next(ln for ln in out.splitlines() if "vllm + ray + verl alone" in ln)
    assert "343.5 MiB, 5.4x the 64 MiB a call carries" in verdict
    assert 'GPU_PYTHON=<cluster_env>/bin/python GPU_ARGS="--parts cluster"' in out
    assert "NCCL weight sync needs 2 GPUs" in out
    only = script("--plan", "--parts", "gpucheck", "--wheels", str(tmp_path)).stdout
    assert "cluster parts" not in only


def test_dry_composes_the_verl_part_as_the_train_grpo_rule_does_and_verl_accepts_it(tmp_path):
    """The verl part's command is train_grpo's (the backend's command through grpoflow.deployment, the wrapper in
    front of main_ppo, grpoflow's reward module and manager), with the thread variables Snakemake exports; verl
    0.9.1's own schema and validate_config accept it (verl is in the test environment); merge and evaluate are the
    rules' commands."""
    require("verl")
    out = tmp_path / "out"
    proc = script("--dry", "--parts", "verl", "--out", str(out), "--work", str(tmp_path / "w"), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (r,) = json.loads((out / "gpu-acceptance.json").read_text())["results"]
    assert "overrides compose against verl's schema and pass its validate_config" in r["line"], r["line"]
    assert "estimate peak" in r["line"] and "rollout" in r["line"]
    command = r["command"]
    assert command.startswith("export HF_HUB_OFFLINE=1 ") and " && " in command
    wrapper, trainer = command.split(" -- ", 1)
    assert wrapper.split(" && ", 1)[1].split()[1:3] == ["-m", "grpoflow.backends.verl.train"]
    argv = shlex.split(trainer.replace("\\\n", " "))
    assert argv[1:3] == ["-m", "verl.trainer.main_ppo"]
    overrides = dict(a.split("=", 1) for a in argv[3:] if "=" in a)
    assert overrides["trainer.total_training_steps"] == "2" and overrides["trainer.n_gpus_per_node"] == "1"
    assert overrides["actor_rollout_ref.rollout.tensor_model_parallel_size"] == "1"
    assert overrides["reward.custom_reward_function.path"] == "pkg://grpoflow.backends.verl.rewards"
    assert overrides["actor_rollout_ref.model.path"].endswith("sft-v512.json)")
    assert len(set(r["threads"].values())) == 1, "Snakemake's six thread variables, equal"
    merge = shlex.split(r["merge"])
    assert merge[1:4] == ["-m", "grpoflow.workflow", "merge_checkpoint"]
    assert json.loads(merge[merge.index("--kwargs") + 1])["backend"] == "verl"
    evaluate = shlex.split(r["evaluate"])
    assert json.loads(evaluate[evaluate.index("--kwargs") + 1])["run"]["settings"]["backend"] == "vllm"


def test_dry_runs_colocate_with_vllm_a_moving_rate_and_rewards_that_differ(tmp_path):
    out = tmp_path / "out"
    proc = script("--dry", "--parts", "colocate,server", "--out", str(out), "--work", str(tmp_path / "w"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = {r["part"]: r for r in json.loads((out / "gpu-acceptance.json").read_text())["results"]}
    argv = shlex.split(results["colocate"]["command"])
    assert argv[8:10] == [str(SCRIPT), "--probe-train"], "under the probe that records every weight sync"
    spec = json.loads(argv[argv.index("--spec") + 1])
    assert spec["trl"]["vllm"]["mode"] == "colocate" and spec["trl"]["use_cpu"] is False
    assert spec["grpo"]["learning_rate"] == 1e-3 and spec["grpo"]["total_steps"] == 2
    assert spec["rewards"]["funcs"] == ["binary", "soft_overlong"]
    assert "vLLM" in " ".join(results["colocate"]["estimate"]["phases"][results["colocate"]["estimate"]["peak_phase"]])
    server = shlex.split(results["server"]["server_command"])
    assert server[1:5] == ["-m", "vllm.entrypoints.cli.main", "serve", str(tmp_path / "w" / "qwen3-0.6b-v512")]
    assert '{"backend": "nccl"}' in server, "TRL's server with vLLM's NCCL weight-transfer engine"


def test_a_cluster_part_without_its_packages_says_what_it_needs_and_where_it_runs(ga, monkeypatch, tmp_path):
    """A package name that exists nowhere stands in for vLLM on the lent machine's image (not installed there)."""
    monkeypatch.setitem(ga.cluster.PACKAGES, "verl", ("grpoflow_no_such_package",))
    result = ga.cluster.part_verl(ga, tmp_path)
    assert result["status"] == "skipped"
    assert result["line"].startswith("needs grpoflow_no_such_package (the cluster environment")
    assert "over the device tool's 64 MiB" in result["line"] and 'GPU_ARGS="--parts verl"' in result["line"]


def test_a_weight_sync_passes_only_when_vllm_equals_the_trainer_after_the_weights_moved(ga):
    verdict = ga.cluster.sync_verdict
    first = {"trainer_step": 0, "compared": 310, "unequal": 0, "max_abs_diff": 0.0, "unmatched": [], "watched": "w",
             "changed_fraction": 0.0}  # fmt: skip
    moved = {**first, "trainer_step": 1, "changed_fraction": 0.42}
    assert verdict([first, moved])["ok"]
    assert not verdict([first])["ok"], "no sync after an optimizer step: nothing shown"
    assert not verdict([first, {**moved, "changed_fraction": 0.0}])["ok"], "a sync that moved nothing shows nothing"
    assert not verdict([first, {**moved, "unequal": 3, "max_abs_diff": 0.01}])["ok"]
    assert not verdict([first, {**moved, "unmatched": ["model.layers.0.mlp.gate_up_proj.weight"]}])["ok"]
    served = {"trainer_step": 1, "after_vs_trainer": 0.004, "before_vs_after": 0.3, "tolerance": 0.05}
    assert verdict([{"trainer_step": 0}, served])["ok"]
    assert not verdict([served | {"before_vs_after": 0.001}])["ok"]


def test_vllms_packed_tensors_are_rebuilt_from_the_trainers(ga):
    torch = require("torch")
    trainer = {f"model.layers.0.self_attn.{p}_proj.weight": torch.full((2, 3), float(i)) for i, p in enumerate("qkv")}
    trainer["model.layers.0.mlp.down_proj.weight"] = torch.ones(3, 4)
    qkv = ga.cluster.expected_tensor("model.layers.0.self_attn.qkv_proj.weight", trainer)
    assert qkv.shape == (6, 3) and qkv[:, 0].tolist() == [0, 0, 1, 1, 2, 2]
    assert (
        ga.cluster.expected_tensor("model.layers.0.mlp.down_proj.weight", trainer)
        is trainer["model.layers.0.mlp.down_proj.weight"]
    )
    assert ga.cluster.expected_tensor("model.layers.0.mlp.gate_up_proj.weight", trainer) is None


def test_what_a_job_started_in_a_session_of_its_own_is_found_and_killed(ga):
    """What the verl part does at its time limit (cluster.run_shell): verl's wrapper starts verl in a session of its
    own, which killing the job's process group does not reach; every process the job started carries the job's mark
    in its environment. A sleeping process in its own session stands in for verl."""
    mark = f"test-{os.getpid()}"
    env = {**os.environ, ga.cluster.JOB_MARK: mark}
    child = subprocess.Popen(["setsid", "sleep", "300"], env=env)
    other = subprocess.Popen(["setsid", "sleep", "300"])  # not the job's: left alone
    try:
        ga.cluster.stop_marked(mark, grace=1)
        assert child.wait(timeout=30) == -9
        assert other.poll() is None
    finally:
        for p in (child, other):
            p.kill()
            p.wait()


def test_the_server_legs_command_is_train_grpos_with_the_trainer_under_the_probe(ga, tmp_path):
    """Whatever grpoflow's server mode puts around the trainer runs as the rule would run it; only the training
    module is swapped for the kit's probe (on main server mode is refused, so a colocate config shows the swap)."""
    cfg = ga.cluster.sync_config(ga, tmp_path, "colocate", "colocate", 80)
    shell = ga.cluster.server_leg_shell(ga, cfg, tmp_path)
    assert shell.startswith(ga.cluster.RULE_SHELL + "export HF_HUB_OFFLINE=1 ")
    assert "-m grpoflow.backends.trl.train" not in shell
    argv = shlex.split(shell.split(" && ", 1)[1])
    assert argv[:3] == [sys.executable, str(SCRIPT), "--probe-train"]
    assert json.loads(argv[argv.index("--spec") + 1])["trl"]["vllm"]["mode"] == "colocate"
