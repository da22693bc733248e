"""grpoflow.preflight and grpoflow.slurm_nodes pieces that need no SLURM: sinfo's time-limit and GRES fields, the
checkpoint size, and the environment probe run by a real interpreter (this venv: verl yes, vLLM no)."""

from __future__ import annotations

import contextlib
import os
import sys

import pytest

from grpoflow.deployment import CLUSTER, JobEnv
from grpoflow.preflight import PlaneNeeds, check_environments, checkpoint_bytes
from grpoflow.slurm_nodes import gpu_types, parse_sinfo, parse_time_limit


@pytest.mark.parametrize(
    "text, minutes",
    [
        ("infinite", None),
        ("UNLIMITED", None),
        ("1-00:00:00", 1440),
        ("2-12", 3600),
        ("1-2:30", 1590),
        ("2:00:00", 120),
        ("30:00", 30),  # minutes:seconds
        ("30:01", 31),
        ("90", 90),
    ],
)
def test_sinfo_time_limits(text, minutes):
    assert parse_time_limit(text) == minutes


def test_gres_types_and_an_old_five_field_line():
    assert gpu_types("gpu:h100:8(S:0-1),shard:8") == ("h100",) and gpu_types("gpu:8") == ()
    (n,) = parse_sinfo("a1|gpu*|224|2000000|gpu:H100:8(S:0-1)|2-00:00:00")
    assert (n.gpus, n.gpu_types, n.time_limit_min) == (8, ("h100",), 2880)
    (n,) = parse_sinfo("a1|gpu|224|2000000|gpu:8")
    assert (n.gpus, n.gpu_types, n.time_limit_min) == (8, (), None)


def test_a_32b_checkpoint_is_393_gb_with_fp32_masters():
    exp = {"architecture": "qwen3-32b", "verl": {"model_dtype": "fp32"}, "grpo": {"lora": {"rank": 0}}}
    size, how = checkpoint_bytes(exp)
    assert round(size / 1e9) == 393 and "fp32 params + AdamW state" in how
    assert round(checkpoint_bytes({**exp, "verl": {"model_dtype": "bf16"}})[0] / 1e9) == 197


def test_the_probe_runs_the_planes_interpreter_and_names_what_it_lacks():
    needs = PlaneNeeds()
    needs.add([("verl", "verl==0.9.1", "the trainer"), ("vllm", "vllm (verl[vllm])", "rollout")], "train_grpo (e)")
    needs.add([("vllm", "vllm (verl[vllm])", "evaluation.backend: vllm")], "evaluate (m, b)")
    needs.add([("vllm", "vllm (verl[vllm])", "evaluation.backend: vllm")], "evaluate (m, c)")
    raw = {"cluster_env": {"python": sys.executable}}
    failures, _ = check_environments(raw, {CLUSTER: JobEnv("", sys.executable)}, {CLUSTER: needs}, set())
    assert len(failures) == 1 and "\n" not in failures[0]
    assert failures[0].startswith(
        f"cluster_env.python: {sys.executable} lacks vllm (verl[vllm]) (for evaluate (m, b) +1 more: evaluation.backend: vllm; train_grpo (e): rollout); "
    )
    # Under --sdm conda the env is built per job: not probed here.
    failures, notes = check_environments(raw, {CLUSTER: JobEnv("", "python")}, {CLUSTER: needs}, {"conda"})
    assert failures == [] and "not checked at start" in notes[0]


def test_gpu_check_driver_against_cuda_and_compute_mode(tmp_path):
    from grpoflow import gpucheck
    from grpoflow.errors import GrpoflowError

    ok = [("0", "580.82.07", "Default"), ("1", "580.82.07", "Default")]
    gpucheck.check("j", cuda="13.0", gpus=ok)
    with pytest.raises(
        GrpoflowError,
        match=r"^j: the node's NVIDIA driver 570\.133\.20 is older than CUDA 13\.0 .* needs \(580\.65\.6\+\)",
    ):
        gpucheck.check("j", cuda="13.0", gpus=[("0", "570.133.20", "Default")])
    gpucheck.check("j", cuda="12.8", gpus=[("0", "550.54.15", "Default")])  # minor-version compatibility
    with pytest.raises(GrpoflowError, match=r"compute mode GPU 1: Exclusive_Process: verl runs two processes per GPU"):
        gpucheck.check("j", cuda=None, gpus=[("0", "580.82.07", "Default"), ("1", "580.82.07", "Exclusive_Process")])
    # A failure is recorded next to the output; a retry without a GPU fails at once naming it.
    out = tmp_path / "training_complete.json"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho '0, 580.82.07, Exclusive_Process'\n")
    (fake / "nvidia-smi").chmod(0o755)
    env = {"PATH": f"{fake}:{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": "0"}
    with mock_env(env), pytest.raises(GrpoflowError, match="compute mode"):
        gpucheck.checked("j", out)
    assert gpucheck.retry_request(str(out), 2) and not gpucheck.retry_request(str(out), 1)
    with (
        mock_env({"CUDA_VISIBLE_DEVICES": ""}),
        pytest.raises(
            GrpoflowError, match=r"^not retried on a GPU node: an earlier attempt's GPU check failed \(j: compute mode"
        ),
    ):
        gpucheck.checked("j", out)
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho '0, 580.82.07, Default'\n")
    with mock_env(env):
        gpucheck.checked("j", out)
    assert not gpucheck.record_path(out).exists()


@contextlib.contextmanager
def mock_env(values: dict):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_vllm_tensor_parallel_size_must_equal_the_evaluation_gpus():
    from grpoflow_testing import load_shipped

    from grpoflow.config import resolve_config
    from grpoflow.errors import ConfigError

    raw = load_shipped("config/qwen3-8b-gsm8k.yaml")
    raw["evaluation"] = {**raw["evaluation"], "backend": "vllm", "vllm": {"tensor_parallel_size": 2}}
    raw["evaluation"]["resources"] = {**raw["evaluation"].get("resources", {}), "gpus": 1}
    with pytest.raises(
        ConfigError,
        match=r"^config error: evaluation.vllm.tensor_parallel_size = 2 but evaluation.resources.gpus = 1: vLLM runs one rank per GPU; make them equal$",
    ):
        resolve_config(raw)
    raw["evaluation"]["resources"]["gpus"] = 2
    resolve_config(raw)


def test_disk_need_adds_up_per_filesystem_less_what_the_dir_holds(tmp_path):
    from types import SimpleNamespace

    from grpoflow_testing import load_shipped

    from grpoflow.config import resolve_config
    from grpoflow.preflight import check_disk

    raw = load_shipped("config/qwen3-32b-gsm8k.yaml")
    exp = next(iter(raw["experiments"]))
    raw["experiments"] = {
        "a": {**raw["experiments"][exp], "checkpoint_dir": str(tmp_path / "a")},
        "b": {**raw["experiments"][exp], "checkpoint_dir": str(tmp_path / "b")},
    }
    cfg = resolve_config(raw)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "shard.pt").write_bytes(b"x" * 1000)  # counted against a's need
    one = 393_145_479_168  # (4 + 8) B x Qwen3-32B's params
    fs = lambda free: lambda _p: SimpleNamespace(f_bavail=free, f_frsize=1)  # noqa: E731
    failures, notes = check_disk(cfg, ["a", "b"], statvfs=fs(8 * one - 1000))
    assert failures == [] and "needed" in notes[0]
    failures, _ = check_disk(cfg, ["a", "b"], statvfs=fs(8 * one - 1001))
    assert len(failures) == 2 and all(
        "grpo.max_checkpoints_to_keep + 1 = 4 checkpoints of ~393 GB" in f for f in failures
    )
    assert "(with the other experiments on this filesystem: 3145 GB)" in failures[0]
