"""benchmarks/gpu_acceptance.py on the CPU (issue 33): its plan (parts, the pinned wheels to carry, the 64 MiB budget
measured from the files present), part selection, the table it writes, its --dry settings, and its refusal to
pretend without a CUDA device. No GPU and no network: the GPU parts themselves run only on a GPU machine
(docs/gpu-acceptance.md)."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys

import pytest
from grpoflow_testing import PYTHON, REPO

SCRIPT = REPO / "benchmarks" / "gpu_acceptance.py"
PARTS = ["gpucheck", "masters", "trl-full", "trl-lora", "sigterm", "eval", "tunix"]


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
    proc = script("--plan", "--parts", "gpucheck,vllm")
    assert proc.returncode != 0 and proc.stderr.strip().splitlines()[-1] == (
        "gpu_acceptance: unknown part(s) vllm: choose from " + ", ".join(PARTS)
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
    assert kwargs["settings"]["backend"] == "transformers"
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
