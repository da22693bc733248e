"""The Tunix backend without JAX: its interface, command, config checks, environment, data order and metrics."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest

from grpoflow import backends, deployment
from grpoflow.backends import tunix as tunix_backend
from grpoflow.backends.tunix.runner import MetricRows, PromptBatches
from grpoflow.config import deep_merge, resolve_config
from grpoflow.errors import ConfigError, DataError


def test_tunix_is_a_registered_backend_with_the_common_interface():
    module = backends.get("tunix")
    for name in backends.INTERFACE:
        assert hasattr(module, name), name
    grpo_keys = {k for k in module.SETTINGS if k.startswith("grpo.")}
    # Every grpo.* key the other backends map is mapped here too.
    for other in ("trl", "verl"):
        theirs = {k for k in backends.get(other).SETTINGS if k.startswith("grpo.")}
        assert theirs <= grpo_keys, theirs - grpo_keys


def test_command_is_the_tunix_entry_point_with_only_training_settings(make_spec, tmp_path):
    spec = make_spec(tmp_path)
    assert set(spec) == {
        "experiment", "sft", "train", "grpo", "rewards", "tunix", "checkpoint_dir",
        "resume_across_changes", "marker", "metrics",
    }  # fmt: skip
    assert spec["tunix"] == {
        "mesh": {"fsdp": -1, "tp": 1},
        "rollout_engine": "vanilla",
        "vllm_hbm_utilization": 0.2,
        "param_dtype": "float32",
        "compute_dtype": "float32",
        "weight_decay": 0.0,
        "adam_b2": 0.999,
        "loss_agg_mode": "sequence-mean-token-mean",
        "offload_to_cpu": False,
        "remat": "none",
        "flash_attention": False,
        "flash_attention_block_size": 256,
    }  # tunix.tpu only feeds the config-load memory check: not in the command, so declaring it reruns nothing


def _resolve(default_config, **exp):
    raw = deep_merge(default_config, {"defaults": {"backend": "tunix"}})
    raw["experiments"] = {"t": exp}
    return resolve_config(raw)


@pytest.mark.parametrize(
    "override, match",
    [
        ({"grpo": {"num_generations": 1}}, r"num_generations = 1: Tunix's GRPOConfig needs at least 2"),
        (
            {"tunix": {"param_dtype": "bfloat16"}, "grpo": {"learning_rate": 3.0e-6}},
            r"tunix.param_dtype = bfloat16 with grpo.learning_rate = 3e-06",
        ),
        ({"tunix": {"mesh": {"fsdp": 0}}}, r"tunix.mesh.fsdp"),
    ],
)
def test_bad_tunix_settings_are_one_line_config_errors(default_config, override, match):
    with pytest.raises(ConfigError, match=match) as err:
        _resolve(default_config, **override)
    assert "\n" not in str(err.value)


def test_other_backends_sections_do_not_reach_a_tunix_experiment(default_config):
    exp = _resolve(default_config).experiment("t")
    assert "tunix" in exp and "trl" not in exp and "verl" not in exp


def test_tunix_jobs_run_in_the_tunix_environment(tmp_path):
    venv = tmp_path / ".venv-tunix" / "bin" / "python"
    envs = deployment.job_envs({}, set(), "/l/bin/python", tunix_venv_python=str(venv))
    assert envs[deployment.TUNIX].python == str(venv)
    assert deployment.job_envs({}, set(), "/l/bin/python")[deployment.TUNIX].python == "/l/bin/python"
    named = deployment.job_envs({"tunix_env": {"python": "/t/bin/python"}}, set(), "/l/bin/python", str(venv))
    assert named[deployment.TUNIX].python == "/t/bin/python" and named[deployment.CLUSTER].python == "/l/bin/python"
    assert deployment.job_envs({}, {"conda"}, "/l/bin/python", str(venv))[deployment.TUNIX].python == "python"
    assert deployment.experiment_plane({"backend": "tunix"}) == deployment.TUNIX


def test_prompt_batches_are_seeded_and_stop_at_a_step_boundary():
    rows = [{"prompt": f"p{i}", "ground_truth": str(i)} for i in range(10)]

    class Rollout:
        seed = None

    first = PromptBatches(rows, 3, seed=7, rollout_config=Rollout())
    batches = iter(first)
    taken = [next(batches) for _ in range(5)]  # 3 per epoch of 10 (the last 1 is dropped), then a new order
    assert all(b["prompts"].dtype == object and len(b["prompts"]) == 3 for b in taken)
    again = iter(PromptBatches(rows, 3, seed=7))
    assert [list(next(again)["prompts"]) for _ in range(5)] == [list(b["prompts"]) for b in taken]
    assert Rollout.seed is None and first.rollout_config.seed == 7 * 1_000_003 + 4
    first.stop()
    assert next(batches, None) is None
    other = iter(PromptBatches(rows, 3, seed=8))
    assert [list(next(other)["prompts"]) for _ in range(3)] != [list(b["prompts"]) for b in taken[:3]]


def test_metric_rows_join_each_rollout_with_the_update_it_fed(tmp_path):
    live = tmp_path / "m.jsonl"
    rows = MetricRows(live, total=7, first_step=4)  # a resumed attempt: steps 5.. ; Tunix's global step restarted at 0
    for g, reward in ((0, 0.5), (1, 0.75)):
        rows.log_scalar("grpoflow/train/reward", np.float32(reward), step=g)
        rows.log_scalar("grpoflow/train/reward/accuracy", reward, step=g)
        rows.log_scalar("completions/train/mean_length", 10 + g, step=g)
        rows.log_scalar("actor/train/loss", 0.1 * g, step=5 + g)
        rows.log_scalar("actor/train/kl", 0.01, step=5 + g)
        rows.log_scalar("rewards/train/min", 0.0, step=g)  # not in METRICS: ignored
    rows.log_scalar("actor/train/loss", 0.3, step=7)  # step 6 is now complete
    got = [json.loads(line) for line in live.read_text().splitlines()]
    assert [r["step"] for r in got] == [5, 6]
    assert got[0] == {
        "step": 5,
        "reward": 0.5,
        "reward/accuracy": 0.5,
        "response_length": 10.0,
        "loss": 0.0,
        "kl": 0.01,
    }
    assert got[1]["reward"] == 0.75 and "time_s" in got[1]
    rows.flush(7)
    assert [json.loads(line)["step"] for line in live.read_text().splitlines()] == [5, 6, 7]


def test_the_settings_table_is_what_the_runner_builds():
    """SETTINGS names, for each grpo key, the Tunix object the runner sets: spot-check against the runner's source."""
    import inspect

    from grpoflow.backends.tunix import qwen3, runner

    source = inspect.getsource(runner)
    for key, target in tunix_backend.SETTINGS.items():
        if key.startswith("grpo.lora."):  # qwen3.lora_provider reads the whole section
            field = key.rsplit(".", 1)[1]
            assert f'lora["{field}"]' in inspect.getsource(qwen3) or field == "target_modules", key
            continue
        field = key.split(".", 1)[1]
        assert f'grpo["{field}"]' in source, f"{key} ({target}) is not read by the runner"


def test_dry_run_names_the_tunix_interpreter(tmp_path):
    from grpoflow_testing import REPO, make_workdir, snakemake

    wd = make_workdir(tmp_path)
    proc = snakemake(
        ["-n", "-p", "--configfile", str(REPO / "config" / "config.yaml"), str(REPO / "config" / "demo-tunix.yaml")],
        wd,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    words = shlex.split(next(ln for ln in out.splitlines() if "grpoflow.backends.tunix.train" in ln))
    python = words[words.index("grpoflow.backends.tunix.train") - 2]
    # `make setup-tunix` built .venv-tunix next to the Snakefile (make test does): the jobs name it by path.
    assert python == str(REPO / ".venv-tunix" / "bin" / "python"), python


def test_tunix_evaluation_mesh_and_pad_token():
    """evaluation.backend: tunix splits heads over as many devices as divide them, and pads with a stop token that
    no prompt holds (the sampler masks its pad id wherever it occurs, prompts included)."""
    import types

    from grpoflow.backends.tunix.generate import pick_pad_id, sampling_mesh

    assert sampling_mesh(4, 32, 8) == (1, 4)  # v5p-8, Qwen3-8B
    assert sampling_mesh(8, 32, 8) == (1, 8)  # v6e-8
    assert sampling_mesh(8, 4, 2) == (4, 2)  # the demo's tiny model: 2 KV heads
    assert sampling_mesh(1, 4, 2) == (1, 1)  # CPU
    tok = types.SimpleNamespace(pad_token_id=5)
    assert pick_pad_id(tok, [[1, 2], [3]], [5, 7]) == 5  # the tokenizer's pad, a stop token in no prompt
    assert pick_pad_id(tok, [[1, 5], [3]], [5, 7]) == 7  # ... unless a prompt holds it
    assert pick_pad_id(types.SimpleNamespace(pad_token_id=9), [[1]], [5, 7]) == 5  # a pad that is no stop token
    with pytest.raises(DataError, match="every stop token"):
        pick_pad_id(tok, [[5, 7]], [5, 7])
