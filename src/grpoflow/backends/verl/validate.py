"""Check verl experiments against verl's real configuration before anything is submitted: verl's Backend.validate,
which ``python -m grpoflow.validate --configfile config/qwen3-32b-gsm8k.yaml [--experiment NAME ...]`` runs.

For each verl experiment of the config, the exact overrides `train_grpo` passes to
``python -m verl.trainer.main_ppo`` (job-time values filled with placeholders) are

1. composed with Hydra's compose API against verl's own ``ppo_trainer`` config: an unknown key, a ``+`` on a
   key that exists, a malformed value fail here;
2. checked for keys verl 0.9.1 accepts but never reads: the legacy top-level ``custom_reward_function.*`` /
   ``reward_model.*`` (a run using them trains on verl's default scorer), and ``+``-added keys outside the
   free-form dicts verl passes on (``reward.custom_reward_function.reward_kwargs``, ``override_config``, ...);
3. run through verl's own ``validate_config`` (what main_ppo runs first: batch arithmetic, micro-batch keys)
   and turned into verl's config dataclasses (what the workers do on the cluster: wrong value types, unknown
   keys inside structured sections).

Needs verl 0.9.1 (the cluster environment, or the CI/test environment); not vLLM (a LoRA check verl imports
from vLLM is replaced by the same table when vLLM is absent).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import sys
import time
import types
import warnings
from typing import Any

from grpoflow.backends.verl import commandline as vcommand
from grpoflow.backends.verl import overrides as ov
from grpoflow.errors import ConfigError
from grpoflow.training import ResolvedConfig

PLACEHOLDER_MODEL = "/grpoflow-validate/sft-model"
# Free-form dicts verl hands on as keyword arguments: `+` keys under them are read.
FREE_FORM = (
    "reward.custom_reward_function.reward_kwargs.",
    "actor_rollout_ref.model.override_config.",
    "critic.model.override_config.",
    "actor_rollout_ref.rollout.engine_kwargs.",
    "actor_rollout_ref.actor.optim.override_optimizer_config.",
    "data.apply_chat_template_kwargs.",
    "data.mm_processor_kwargs.",
    "ray_kwargs.ray_init.",
)
# Sections verl 0.9.1 turns into its config dataclasses before training (engine_workers, agent loop, trainer);
# the actor is converted by validate_config itself. Others (algorithm, reward) stay plain dicts in verl, so
# free-form keys there (e.g. the grpoflow estimator's +algorithm.grpoflow.*) are fine.
DATACLASS_SECTIONS = ("actor_rollout_ref.rollout", "actor_rollout_ref.rollout.checkpoint_engine")


def _stub_vllm_lora_rank() -> None:
    """verl's validate_config imports vLLM's LoRA-rank table when LoRA is on; without vLLM, use the same one."""
    if importlib.util.find_spec("vllm") is not None:
        return
    name = "verl.workers.rollout.vllm_rollout.utils"
    if name in sys.modules:
        return
    allowed = (1, 8, 16, 32, 64, 128, 256, 320, 512)

    def get_vllm_max_lora_rank(rank: int) -> int:
        if not 0 < rank <= allowed[-1]:
            raise ValueError(f"LoRA rank {rank} is outside vLLM's supported range 1..{allowed[-1]}")
        return next(r for r in allowed if rank <= r)

    stub = types.ModuleType(name)
    stub.get_vllm_max_lora_rank = get_vllm_max_lora_rank
    sys.modules[name] = stub


def training_inputs(cfg: ResolvedConfig, experiment: str) -> dict:
    """The train_grpo inputs of an experiment (as the Snakefile wires them)."""
    data = cfg.experiment(experiment)["data"]
    inputs = {"train": cfg.parquet(data["dataset"], data["train_split"]), "sft": f"results/{experiment}/sft.json"}
    if data.get("val_split"):
        inputs["val"] = cfg.parquet(data["dataset"], data["val_split"])
    return inputs


def _worker_ref_config(resolved):
    """The reference policy's section as verl's engine worker rewrites it before instantiating it."""
    from omegaconf import open_dict

    ref = resolved.actor_rollout_ref.ref.copy()
    with open_dict(ref):
        ref.ppo_mini_batch_size = resolved.actor_rollout_ref.actor.ppo_mini_batch_size
        ref.ppo_micro_batch_size = ref.pop("log_prob_micro_batch_size", None)
        ref.ppo_micro_batch_size_per_gpu = ref.pop("log_prob_micro_batch_size_per_gpu", None)
        ref.use_dynamic_bsz = ref.pop("log_prob_use_dynamic_bsz", False)
        ref.ppo_max_token_len_per_gpu = ref.pop("log_prob_max_token_len_per_gpu", None)
    return ref


def check_added_keys(items: list[ov.Override]) -> None:
    for o in items:
        if o.prefix.startswith("+") and o.source is None and not o.key.startswith(FREE_FORM):
            raise ConfigError(
                f"verl.extra_overrides adds {o.key} with '+': verl 0.9.1 has no such key and would ignore it (keys it reads are composed without '+'; free-form ones live under {', '.join(k.rstrip('.') for k in FREE_FORM[:3])}, ...)"
            )


def compose(hydra_overrides: list[str]):
    import verl.trainer.config as verl_config
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=os.path.dirname(verl_config.__file__), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=hydra_overrides)


def validate_experiment(cfg: ResolvedConfig, experiment: str, quiet: bool = True) -> dict[str, Any]:
    """Compose + check one experiment; raises ConfigError naming the problem. Returns a short summary."""
    from omegaconf import OmegaConf

    started = time.perf_counter()
    exp = cfg.experiment(experiment)
    inputs = training_inputs(cfg, experiment)
    items = ov.build(exp, experiment, inputs, cfg.checkpoint_dir(experiment))
    argv = vcommand.trainer_argv(cfg, experiment, inputs, PLACEHOLDER_MODEL, os.getcwd())
    hydra_overrides = argv[len(ov.ENTRYPOINT.split()) :]
    where = f"experiments.{experiment}"
    try:
        composed = compose(hydra_overrides)
    except Exception as err:  # Hydra's ConfigCompositionException / OverrideParseException
        raise ConfigError(f"{where}: verl 0.9.1 rejects the composed command: {' '.join(str(err).split())}")
    check_added_keys(items)
    legacy = [k for k in ov.LEGACY_KEYS if OmegaConf.select(composed, k) not in (None, {}, [])]
    if legacy:
        raise ConfigError(
            f"{where}: {', '.join(legacy)} set, but verl 0.9.1's main_ppo ignores them (use {ov.LEGACY_KEYS[legacy[0]]})"
        )

    _stub_vllm_lora_rank()
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink) if quiet else contextlib.nullcontext(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Disabled critic as adv_estimator != gae": expected for GRPO
            ref, critic = need_reference_policy(composed), need_critic(composed)
            validate_config(composed, use_reference_policy=ref, use_critic=critic)
            resolved = OmegaConf.create(OmegaConf.to_container(composed, resolve=True))
            for section in DATACLASS_SECTIONS:
                omega_conf_to_dataclass(OmegaConf.select(resolved, section))
            if ref:
                omega_conf_to_dataclass(_worker_ref_config(resolved))
    except Exception as err:  # AssertionError/ValueError/TypeError from verl's checks and dataclasses
        raise ConfigError(
            f"{where}: verl 0.9.1's config validation fails: {type(err).__name__}: {' '.join(str(err).split())[:400]}"
        )
    if critic:
        raise ConfigError(
            f"{where}: the composed config trains a critic (algorithm.adv_estimator = {composed.algorithm.adv_estimator}): GRPO needs none; check the rewards' estimator"
        )
    return {
        "experiment": experiment,
        "overrides": len(hydra_overrides),
        "reference_policy": ref,
        "adv_estimator": composed.algorithm.adv_estimator,
        "reward_function": f"{composed.reward.custom_reward_function.path}:{composed.reward.custom_reward_function.name}",
        "seconds": round(time.perf_counter() - started, 2),
    }


def summary(result: dict) -> str:
    """The line ``python -m grpoflow.validate`` prints for one experiment's result."""
    return (
        f"{result['overrides']} overrides compose against verl 0.9.1 and pass validate_config (estimator "
        f"{result['adv_estimator']}, reference policy {'on' if result['reference_policy'] else 'off'}, reward "
        f"{result['reward_function']}) in {result['seconds']} s"
    )
