"""`python -m grpoflow.validate`: every shipped config composes against verl 0.9.1's real Hydra schema and
passes verl's own validate_config; a wrong key fails here, not in a cluster job."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import yaml
from verlkit import REPO, VERL_CONFIGS, load

from grpoflow.backends.verl import overrides as ov
from grpoflow.backends.verl.validate import validate_experiment
from grpoflow.config import deep_merge, resolve_config
from grpoflow.errors import ConfigError
from grpoflow.validate import validate_config_files

pytestmark = pytest.mark.verl


@pytest.mark.parametrize("path", VERL_CONFIGS)
def test_shipped_config_validates_against_verl(path):
    started = time.perf_counter()
    results = validate_config_files([str(REPO / path)])
    assert results and all(r["overrides"] > 50 for r in results)
    for r in results:
        assert r["reward_function"] in (
            "pkg://grpoflow.backends.verl.rewards:compute_score",
            f"{REPO}/src/grpoflow/backends/verl/rewards.py:compute_score",
        )
        assert r["adv_estimator"] in ("grpo", "grpoflow")
    assert time.perf_counter() - started < 60


def with_extra(tmp_path, extra: list[str], base: str = "config/qwen3-8b-gsm8k.yaml", **defaults) -> str:
    raw = deep_merge(load(base), {"defaults": {"verl": {"extra_overrides": extra}, **defaults}})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


@pytest.mark.parametrize(
    "extra, message",
    [
        # a key verl does not have (the recipe's `data.response_key` is an SFT key)
        (
            ["data.response_key=solution"],
            r"verl 0\.9\.1 rejects the composed command: Could not override 'data.response_key'",
        ),
        # the 32B recipe's form: `+` on a key 0.9.1 already has
        (
            ["+actor_rollout_ref.rollout.max_num_seqs=512"],
            r"rejects the composed command: Could not append to config. An item is already at 'actor_rollout_ref.rollout.max_num_seqs'",
        ),
        # `+` adding a key verl does not read (it composes, then nothing reads it)
        (
            ["+actor_rollout_ref.actor.fsdp_config.param_dtype=bf16"],
            r"adds actor_rollout_ref.actor.fsdp_config.param_dtype with '\+': verl 0\.9\.1 has no such key",
        ),
        # a typo inside a structured section
        (
            ["actor_rollout_ref.rollout.gpu_memory_utilisation=0.7"],
            r"Could not override 'actor_rollout_ref.rollout.gpu_memory_utilisation'",
        ),
        # the Kaggle recipe's reward flags compose but verl never reads them
        (
            ["+reward.funcs=[format2,cosine,length]"],
            r"adds reward.funcs with '\+': verl 0\.9\.1 has no such key and would ignore it",
        ),
        # verl's own validate_config: micro-batch given twice (deprecated + new key)
        (["actor_rollout_ref.actor.ppo_micro_batch_size=8"], r"config validation fails: .*ppo_micro_batch_size"),
        # verl's rollout dataclass, as its workers build it: the removed sync mode
        (["actor_rollout_ref.rollout.mode=sync"], r"config validation fails: .*sync"),
    ],
)
def test_wrong_keys_fail_validation(tmp_path, extra, message):
    with pytest.raises(ConfigError, match=message) as err:
        validate_config_files([with_extra(tmp_path, extra)])
    assert "\n" not in str(err.value)


def test_recipe_model_dtype_with_plus_fails(tmp_path):
    """The 32B recipe passes `+actor_rollout_ref.actor.fsdp_config.model_dtype=bf16`; grpoflow sets that key
    itself (refused at config load), and verl refuses the `+` form for an existing key."""
    with pytest.raises(ConfigError, match="derives from verl.model_dtype"):
        resolve_config(
            yaml.safe_load(open(with_extra(tmp_path, ["+actor_rollout_ref.actor.fsdp_config.model_dtype=bf16"])))
        )
    from grpoflow.backends.verl.validate import compose

    with pytest.raises(
        Exception,
        match="Could not append to config. An item is already at 'actor_rollout_ref.actor.fsdp_config.model_dtype'",
    ):
        compose(["+actor_rollout_ref.actor.fsdp_config.model_dtype=bf16"])


def test_legacy_reward_keys_are_refused_even_if_composed(monkeypatch):
    """Keys verl composes but main_ppo ignores are caught after composition too (whatever produced them)."""
    cfg = resolve_config(load("config/qwen3-8b-gsm8k.yaml"))
    real = ov.build

    def build_with_legacy(*args, **kwargs):
        return real(*args, **kwargs) + [ov.Override("custom_reward_function.path", "/somewhere/reward.py", "rewards")]

    monkeypatch.setattr(ov, "build", build_with_legacy)
    with pytest.raises(
        ConfigError,
        match=r"custom_reward_function.path set, but verl 0\.9\.1's main_ppo ignores them \(use reward.custom_reward_function.path\)",
    ):
        validate_experiment(cfg, "qwen3-8b-gsm8k")


def test_free_form_plus_keys_are_allowed(tmp_path):
    results = validate_config_files(
        [
            with_extra(
                tmp_path,
                [
                    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
                    "actor_rollout_ref.rollout.max_num_seqs=512",
                ],
            )
        ]
    )
    assert results[0]["experiment"] == "qwen3-8b-gsm8k"


def test_lora_validates_without_vllm(tmp_path):
    path = with_extra(tmp_path, [], grpo={"lora": {"rank": 16, "alpha": 32}})
    assert validate_config_files([path])[0]["reference_policy"] is True


def test_cli_reports_each_experiment_and_the_time():
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "grpoflow.validate", "--configfile", "config/qwen3-32b-gsm8k.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    elapsed = time.perf_counter() - started
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("OK qwen3-32b-gsm8k: ") and "pass validate_config" in proc.stdout
    assert elapsed < 60
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpoflow.validate",
            "--configfile",
            "config/qwen3-32b-gsm8k.yaml",
            "--experiment",
            "nope",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 1 and bad.stderr.startswith("grpoflow: error: --experiment 'nope' is not in")
