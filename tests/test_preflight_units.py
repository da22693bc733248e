"""grpoflow.preflight and grpoflow.slurm_nodes pieces that need no SLURM: sinfo's time-limit and GRES fields, the
checkpoint size, and the environment probe run by a real interpreter (this venv: verl yes, vLLM no)."""

from __future__ import annotations

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
        f"cluster_env.python: {sys.executable} lacks vllm (verl[vllm]) (for train_grpo (e): rollout; evaluate (m, b) +1 more: evaluation.backend: vllm); "
    )
    # Under --sdm conda the env is built per job: not probed here.
    failures, notes = check_environments(raw, {CLUSTER: JobEnv("", "python")}, {CLUSTER: needs}, {"conda"})
    assert failures == [] and "not checked at start" in notes[0]
