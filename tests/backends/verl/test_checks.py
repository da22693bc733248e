"""The cheap verl checks run at config load: each rule with its one-line message, and agreement with verl's
own validate_config (whatever the cheap checks accept, verl accepts)."""

from __future__ import annotations

import contextlib
import io
import itertools
import time
import warnings

import pytest
from verlkit import load

from grpoflow.backends.verl.checks import check_verl_experiment
from grpoflow.config import deep_merge, resolve_config, saved_steps
from grpoflow.errors import ConfigError

BASE = "config/qwen3-32b-gsm8k.yaml"


def resolve(override: dict):
    return resolve_config(deep_merge(load(BASE), {"defaults": override}))


@pytest.mark.parametrize(
    "override, message",
    [
        ({"resources": {"gpus_per_node": 0}}, r"resources.gpus_per_node = 0: the verl backend trains on GPUs"),
        ({"grpo": {"num_generations": 1}}, r"grpo.num_generations = 1: GRPO .* at least 2"),
        (
            {"grpo": {"prompts_per_step": 100, "num_generations": 3}, "verl": {"ppo_mini_batch_size": 50}},
            r"100 × 3 = 300 is not divisible by the 8 GPUs",
        ),
        ({"verl": {"ppo_mini_batch_size": 256}}, r"verl.ppo_mini_batch_size = 256 exceeds grpo.prompts_per_step = 128"),
        (
            {"verl": {"ppo_mini_batch_size": 48}},
            r"prompts_per_step = 128 is not a multiple of verl.ppo_mini_batch_size = 48",
        ),
        (
            {"grpo": {"prompts_per_step": 4, "num_generations": 2}, "verl": {"ppo_mini_batch_size": 2}},
            r"2 × 2 = 4 completions do not split over 8 GPUs",
        ),
        (
            {"verl": {"ppo_micro_batch_size_per_gpu": 48}},
            r"ppo_micro_batch_size_per_gpu = 48 does not divide the 64 completions",
        ),
        (
            {"verl": {"log_prob_micro_batch_size_per_gpu": 48}},
            r"log_prob_micro_batch_size_per_gpu = 48 does not divide the 128 completions",
        ),
        (
            {"verl": {"rollout": {"tensor_model_parallel_size": 3}}},
            r"tensor_model_parallel_size = 3 must divide resources.gpus_per_node = 8",
        ),
        ({"grpo": {"lora": {"rank": 1024}}}, r"grpo.lora.rank = 1024: vLLM serves LoRA ranks up to 512"),
        ({"data": {"val_split": None}}, r"data.val_split is null but verl.test_freq"),
        ({"merge_step": 40}, r"merge_step = 40: that checkpoint will not exist .*kept steps: 100, 125, 150"),
        (
            {"resources": {"nodes": 2}, "verl": {"extra_overrides": ["ray_kwargs.ray_init.num_cpus=64"]}},
            r"Ray refuses num_cpus when attaching",
        ),
        ({"verl": {"env": {"BAD-NAME": "1"}}}, r"'BAD-NAME' is not a valid environment variable name"),
    ],
)
def test_bad_settings_fail_at_config_load_in_one_line(override, message):
    with pytest.raises(ConfigError, match=message) as err:
        resolve(override)
    assert "\n" not in str(err.value) and str(err.value).startswith("config error: experiments.qwen3-32b-gsm8k.")


def test_dynamic_batch_size_skips_the_micro_batch_arithmetic():
    with pytest.raises(ConfigError, match="ppo_micro_batch_size_per_gpu = 48 does not divide"):
        resolve({"verl": {"ppo_micro_batch_size_per_gpu": 48}})
    cfg = resolve({"verl": {"use_dynamic_bsz": True, "ppo_micro_batch_size_per_gpu": 48}})  # the same value is accepted
    verl = cfg.experiment("qwen3-32b-gsm8k")["verl"]
    assert verl["use_dynamic_bsz"] is True and verl["ppo_micro_batch_size_per_gpu"] == 48


def test_saved_steps_follow_verls_rotation():
    assert saved_steps(150, 25, 3) == [100, 125, 150]
    assert saved_steps(10, 4, None) == [4, 8, 10]  # the final step is always saved
    resolve({"merge_step": 125})


def test_the_check_is_milliseconds():
    cfg = resolve({})
    exp = cfg.experiment("qwen3-32b-gsm8k")
    started = time.perf_counter()
    for _ in range(20):
        check_verl_experiment("qwen3-32b-gsm8k", exp)
    assert (time.perf_counter() - started) / 20 < 0.05


@pytest.mark.verl
def test_what_the_cheap_checks_accept_verl_accepts():
    """Over a grid of batch shapes, every setting the cheap checks pass also passes verl 0.9.1's validate_config
    and its actor config (compose once, then vary the numbers in the composed config)."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_reference_policy
    from verl.utils.config import validate_config

    from grpoflow.backends.verl import commandline as vc
    from grpoflow.backends.verl.validate import compose, training_inputs

    cfg = resolve({})
    name = "qwen3-32b-gsm8k"
    argv = vc.trainer_argv(cfg, name, training_inputs(cfg, name), "/m", "/wd")
    composed = compose(argv[3:])
    accepted = rejected_by_cheap = 0
    grid = itertools.product([1, 2], [2, 4, 8], [8, 24, 32], [2, 3], [8, 16], [1, 2, 4])
    for nodes, gpn, prompts, G, mini, micro in grid:
        exp = cfg.experiment(name)
        trial = deep_merge(
            exp,
            {
                "resources": {"nodes": nodes, "gpus_per_node": gpn},
                "grpo": {"prompts_per_step": prompts, "num_generations": G},
                "verl": {
                    "ppo_mini_batch_size": mini,
                    "ppo_micro_batch_size_per_gpu": micro,
                    "log_prob_micro_batch_size_per_gpu": micro,
                    "rollout": {"tensor_model_parallel_size": 2},
                },
            },
        )
        try:
            check_verl_experiment(name, trial)
        except ConfigError:
            rejected_by_cheap += 1
            continue
        c = composed.copy()
        OmegaConf.update(c, "trainer.nnodes", nodes)
        OmegaConf.update(c, "trainer.n_gpus_per_node", gpn)
        OmegaConf.update(c, "data.train_batch_size", prompts)
        OmegaConf.update(c, "actor_rollout_ref.rollout.n", G)
        OmegaConf.update(c, "actor_rollout_ref.actor.ppo_mini_batch_size", mini)
        OmegaConf.update(c, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", micro)
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            validate_config(c, use_reference_policy=need_reference_policy(c), use_critic=False)
        accepted += 1
    assert accepted > 20 and rejected_by_cheap > 50
