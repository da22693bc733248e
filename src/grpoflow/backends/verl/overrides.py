"""An experiment's config → the Hydra overrides of ``python -m verl.trainer.main_ppo`` (verl 0.9.1 key names).

Pure Python (no verl, no Hydra): the Snakefile composes them on every dry-run. Each override remembers which
grpoflow config key it comes from, so ``verl.extra_overrides`` cannot silently fight the shared ``grpo``
section (one setting, one place), and the same list feeds both the shell command and the validation that
composes it against verl's real schema (``grpoflow.backends.verl.validate``).

Values known only when the job runs are shell expressions inside the command: the SFT model path
(``$(python -m grpoflow.discovery path results/E/sft.json)``) and absolute paths (``$PWD/...``). Absolute,
because Ray actors (the trainer, the checkpoint writers) do not share the driver's working directory on
other nodes; ``$PWD`` rather than the path itself, so moving the project does not change the command (which
would make Snakemake retrain).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from typing import Any, Iterable

# Imported here, unguarded: an import error of the reward module stops the command's composition (the DAG build,
# `snakemake -n`, validate) at once, not verl's first step on a command without the custom reward.
from grpoflow.backends.verl import rewards as rewards_verl
from grpoflow.errors import ConfigError
from grpoflow.rewards.combine import RewardSet, needs_group_terms

ENTRYPOINT = "python -m verl.trainer.main_ppo"

# Keys verl 0.9.1 composes without complaint but main_ppo never reads: a run using them silently trains on
# verl's default scorer (reward.* replaced them in 0.9).
LEGACY_KEYS = {
    "custom_reward_function.path": "reward.custom_reward_function.path",
    "custom_reward_function.name": "reward.custom_reward_function.name",
    "custom_reward_function.reward_kwargs": "+reward.custom_reward_function.reward_kwargs.NAME",
    "reward_model.reward_manager": "reward.reward_manager.name",
    "reward_model.enable": "reward.reward_model.enable",
    "reward_model.num_workers": "reward.num_workers",
    "reward_model.model.path": "reward.reward_model.model_path",
}
LEGACY_PREFIXES = ("custom_reward_function.", "reward_model.")

# Hydra override: optional +/++/~ prefix, a dotted key (Hydra allows @ and / in group keys), then '='.
_OVERRIDE = re.compile(r"^(?P<prefix>\+\+|\+|~)?(?P<key>[A-Za-z_][\w.@/-]*)(?:=(?P<value>.*))?$", re.S)
_SIMPLE_HYDRA = re.compile(r"^[A-Za-z0-9_./:+\-@%]+$")


@dataclass(frozen=True)
class Override:
    """One ``key=value``. ``source`` names the grpoflow config key it comes from (None: a grpoflow default
    that ``extra_overrides`` may change). ``shell`` marks values holding ``$PWD`` / ``$(...)``, which are
    double-quoted in the command so the job's shell expands them."""

    key: str
    text: str
    source: str | None = None
    prefix: str = ""
    shell: bool = False

    @property
    def hydra(self) -> str:
        return f"{self.prefix}{self.key}={self.text}"

    def shell_word(self) -> str:
        if self.shell:
            return f'{self.prefix}{self.key}="{self.text}"'
        word = self.hydra
        if "'" in word and not any(c in word for c in '"$`\\!'):
            return f'"{word}"'  # Hydra-quoted values read better in double quotes than in '"'"'
        return shlex.quote(word)


def hydra_value(value: Any) -> str:
    """A Python value in Hydra's override grammar."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if _SIMPLE_HYDRA.match(text) and text.lower() not in ("true", "false", "null", "none"):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def parse_override(text: str, where: str) -> tuple[str, str, str | None]:
    """``(prefix, key, value)`` of a Hydra override string; ConfigError when it is not one."""
    m = _OVERRIDE.match(text.strip())
    if not m or (m.group("value") is None and m.group("prefix") != "~"):
        raise ConfigError(
            f"config error: {where} = {text!r} is not a Hydra override: write key=value (e.g. actor_rollout_ref.rollout.max_num_seqs=512)"
        )
    return m.group("prefix") or "", m.group("key"), m.group("value")


def legacy_replacement(key: str) -> str | None:
    """The 0.9.1 key replacing a legacy key verl ignores (None if ``key`` is not legacy)."""
    if key in LEGACY_KEYS:
        return LEGACY_KEYS[key]
    for k, new in LEGACY_KEYS.items():
        if key.startswith(k + "."):
            return new
    if key.startswith(LEGACY_PREFIXES):
        return "the reward.* section"
    return None


def run_path(path: str) -> str:
    """A project-relative path as an absolute one, expanded by the job's shell (see module docstring)."""
    return path if path.startswith("/") else "$PWD/" + path


def model_path_expr(sft_json: str) -> str:
    return f"$(python -m grpoflow.discovery path {shlex.quote(sft_json)})"


def _lora(grpo: dict) -> list[tuple[str, Any, str]]:
    lora = grpo["lora"]
    if not lora["rank"]:
        return []
    return [
        ("actor_rollout_ref.model.lora_rank", lora["rank"], "grpo.lora.rank"),
        ("actor_rollout_ref.model.lora_alpha", lora["alpha"], "grpo.lora.alpha"),
        ("actor_rollout_ref.model.target_modules", lora["target_modules"], "grpo.lora.target_modules"),
    ]


# ---- the reward part: grpoflow's scorer and advantage estimator, as verl 0.9.1 loads them (backends/verl/rewards.py)


def reward_overrides(rewards_cfg: dict, *, max_response_length: int | None = None) -> list[str]:
    """The Hydra overrides that make verl 0.9.1 train on ``rewards_cfg`` (only keys 0.9.1 reads).

    Always: the custom reward function (``reward.custom_reward_function.path/name``), grpoflow's reward manager
    (passes token counts, so length-based rewards count tokens), the resolved reward config as
    ``+reward.custom_reward_function.reward_kwargs.*``. With group-level terms (``length``, ``normalize:
    per_prompt``): ``algorithm.adv_estimator=grpoflow`` and its settings under ``+algorithm.grpoflow.*``
    (the estimator module must be imported: see ``environment``)."""
    rset = RewardSet(rewards_cfg, max_response_length=max_response_length)
    unsupported = [f for f in rset.group_funcs if f not in rewards_verl.GROUP_REWARDS]
    if unsupported:
        raise ConfigError(
            f"config error: rewards.funcs: group-level reward(s) {unsupported} have no verl implementation"
        )
    kw = "+reward.custom_reward_function.reward_kwargs"
    out = [
        # By module name, not file path: the command does not change when the project moves, and every node
        # imports the installed package (the file, COMPUTE_SCORE_PATH, works as a path too).
        f"reward.custom_reward_function.path={hydra_value('pkg://' + rewards_verl.SCORE_MODULE)}",
        "reward.custom_reward_function.name=compute_score",
        "reward.reward_manager.source=importlib",
        f"reward.reward_manager.name={rewards_verl.REWARD_MANAGER}",
        f"reward.reward_manager.module.path={hydra_value('pkg://' + rewards_verl.PLUGIN_MODULE)}",
        f"{kw}.funcs={hydra_value(rset.funcs)}",
        f"{kw}.weights={hydra_value(rset.weights)}",
        f"{kw}.normalize={hydra_value(rset.normalize)}",
        f"{kw}.eps={hydra_value(rset.eps)}",
    ]
    for name in rset.funcs:
        for pname, value in rset.params[name].items():
            out.append(f"{kw}.params.{name}.{pname}={hydra_value(value)}")
    if rset.needs_groups:
        out += [
            f"algorithm.adv_estimator={rewards_verl.ESTIMATOR}",
            f"+algorithm.grpoflow.length_weight={hydra_value(rset.weight('length') if 'length' in rset.funcs else 0.0)}",
            f"+algorithm.grpoflow.normalize={hydra_value(rset.normalize)}",
            f"+algorithm.grpoflow.eps={hydra_value(rset.eps)}",
        ]
    return out


def reward_environment(rewards_cfg: dict) -> dict[str, str]:
    """Environment variables verl needs on every node (exported before ``ray start`` and for the driver):
    ``VERL_USE_EXTERNAL_MODULES`` so that ``import verl`` registers the ``grpoflow`` advantage estimator."""
    return {"VERL_USE_EXTERNAL_MODULES": rewards_verl.PLUGIN_MODULE} if needs_group_terms(rewards_cfg) else {}


def build(exp: dict, experiment: str, inputs: dict, checkpoint_dir: str) -> list[Override]:
    """The overrides for one resolved experiment, in command order (grpoflow's, the rewards', then
    ``verl.extra_overrides`` last, each replacing an earlier override of the same key)."""
    out = [_make(k, v, src) for k, v, src in _managed_items(exp, experiment, inputs, checkpoint_dir)]
    out = _with_reward_overrides(out, exp)
    return _with_extra_overrides(out, exp["verl"]["extra_overrides"])


def _managed_items(exp: dict, experiment: str, inputs: dict, checkpoint_dir: str) -> list[tuple[str, Any, str | None]]:
    """The table of what grpoflow sets: (verl key, value, the config key it comes from or None when fixed)."""
    grpo, verl, res = exp["grpo"], exp["verl"], exp["resources"]
    rollout = verl["rollout"]
    val = inputs.get("val")
    kl = grpo["kl_coef"] > 0
    # train_metrics.jsonl is read from verl's file logger; grpo.report_to adds the trackers every backend shares.
    logger = list(dict.fromkeys([*verl["logger"], "file", *grpo["report_to"]]))

    items: list[tuple[str, Any, str | None]] = [
        ("algorithm.adv_estimator", "grpo", None),
        ("algorithm.use_kl_in_reward", False, None),
        # data
        ("data.train_files", run_path(inputs["train"]), "data.train_split"),
        ("data.val_files", run_path(val or inputs["train"]), "data.val_split"),
        ("data.prompt_key", "prompt", None),
        ("data.train_batch_size", grpo["prompts_per_step"], "grpo.prompts_per_step"),
        ("data.max_prompt_length", grpo["max_prompt_length"], "grpo.max_prompt_length"),
        ("data.max_response_length", grpo["max_response_length"], "grpo.max_response_length"),
        # A prompt longer than max_prompt_length is dropped up front instead of killing the run mid-epoch.
        ("data.filter_overlong_prompts", True, None),
        ("data.truncation", "error", None),
        ("data.seed", grpo["seed"], "grpo.seed"),
        ("data.trust_remote_code", exp["sft"]["trust_remote_code"], "sft.trust_remote_code"),
        # model
        ("actor_rollout_ref.model.path", model_path_expr(inputs["sft"]), "sft"),
        ("actor_rollout_ref.model.trust_remote_code", exp["sft"]["trust_remote_code"], "sft.trust_remote_code"),
        (
            "actor_rollout_ref.model.enable_gradient_checkpointing",
            verl["gradient_checkpointing"],
            "verl.gradient_checkpointing",
        ),
        *_lora(grpo),
        # actor
        ("actor_rollout_ref.actor.strategy", verl["strategy"], "verl.strategy"),
        ("actor_rollout_ref.actor.fsdp_config.model_dtype", verl["model_dtype"], "verl.model_dtype"),
        ("actor_rollout_ref.actor.fsdp_config.param_offload", verl["param_offload"], "verl.param_offload"),
        ("actor_rollout_ref.actor.fsdp_config.optimizer_offload", verl["optimizer_offload"], "verl.optimizer_offload"),
        ("actor_rollout_ref.actor.fsdp_config.offload_policy", verl["offload_policy"], "verl.offload_policy"),
        ("actor_rollout_ref.actor.optim.lr", grpo["learning_rate"], "grpo.learning_rate"),
        ("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio", grpo["lr_warmup_ratio"], "grpo.lr_warmup_ratio"),
        ("actor_rollout_ref.actor.optim.lr_scheduler_type", grpo["lr_scheduler"], "grpo.lr_scheduler"),
        ("actor_rollout_ref.actor.optim.clip_grad", grpo["max_grad_norm"], "grpo.max_grad_norm"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", verl["ppo_mini_batch_size"], "verl.ppo_mini_batch_size"),
        (
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
            verl["ppo_micro_batch_size_per_gpu"],
            "verl.ppo_micro_batch_size_per_gpu",
        ),
        ("actor_rollout_ref.actor.use_dynamic_bsz", verl["use_dynamic_bsz"], "verl.use_dynamic_bsz"),
        ("actor_rollout_ref.actor.ppo_epochs", verl["ppo_epochs"], "verl.ppo_epochs"),
        ("actor_rollout_ref.actor.loss_agg_mode", verl["loss_agg_mode"], "verl.loss_agg_mode"),
        ("actor_rollout_ref.actor.entropy_coeff", verl["entropy_coeff"], "verl.entropy_coeff"),
        ("actor_rollout_ref.actor.clip_ratio_low", grpo["clip_ratio"], "grpo.clip_ratio"),
        (
            "actor_rollout_ref.actor.clip_ratio_high",
            grpo["clip_ratio_high"] if grpo["clip_ratio_high"] is not None else grpo["clip_ratio"],
            "grpo.clip_ratio_high",
        ),
        ("actor_rollout_ref.actor.use_kl_loss", kl, "grpo.kl_coef"),
    ]
    if kl:
        items += [
            ("actor_rollout_ref.actor.kl_loss_coef", grpo["kl_coef"], "grpo.kl_coef"),
            ("actor_rollout_ref.actor.kl_loss_type", "low_var_kl", None),
            (
                "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
                verl["log_prob_micro_batch_size_per_gpu"],
                "verl.log_prob_micro_batch_size_per_gpu",
            ),
            # verl 0.9.1 defaults the forward-only reference to fp32: twice the pinned host RAM and the per-layer
            # transfer to the GPU, for log-probs computed in bf16 anyway (its mixed-precision param_dtype).
            ("actor_rollout_ref.ref.fsdp_config.model_dtype", "bf16", None),
        ]
    items += [
        # rollout
        ("actor_rollout_ref.rollout.name", rollout["name"], "verl.rollout.name"),
        (
            "actor_rollout_ref.rollout.tensor_model_parallel_size",
            rollout["tensor_model_parallel_size"],
            "verl.rollout.tensor_model_parallel_size",
        ),
        (
            "actor_rollout_ref.rollout.gpu_memory_utilization",
            rollout["gpu_memory_utilization"],
            "verl.rollout.gpu_memory_utilization",
        ),
        ("actor_rollout_ref.rollout.enforce_eager", rollout["enforce_eager"], "verl.rollout.enforce_eager"),
        ("actor_rollout_ref.rollout.free_cache_engine", rollout["free_cache_engine"], "verl.rollout.free_cache_engine"),
        ("actor_rollout_ref.rollout.n", grpo["num_generations"], "grpo.num_generations"),
        ("actor_rollout_ref.rollout.temperature", grpo["temperature"], "grpo.temperature"),
        ("actor_rollout_ref.rollout.top_p", grpo["top_p"], "grpo.top_p"),
        ("actor_rollout_ref.rollout.top_k", grpo["top_k"], "grpo.top_k"),
        ("actor_rollout_ref.rollout.seed", grpo["seed"], "grpo.seed"),
        (
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
            verl["log_prob_micro_batch_size_per_gpu"],
            "verl.log_prob_micro_batch_size_per_gpu",
        ),
        # reward workers (the reward function itself comes from grpoflow.rewards below)
        ("reward.num_workers", verl["reward_workers"], "verl.reward_workers"),
        # trainer: steps, checkpoints, resume, logging, cluster shape
        ("trainer.total_training_steps", grpo["total_steps"], "grpo.total_steps"),
        # verl also stops at total_epochs × (rows // batch): one step per epoch is the floor, so this bound can
        # never end a run before total_training_steps (the upstream "finished early, exit 0" trap).
        ("trainer.total_epochs", grpo["total_steps"], "grpo.total_steps"),
        ("trainer.save_freq", grpo["save_freq"], "grpo.save_freq"),
        ("trainer.max_actor_ckpt_to_keep", grpo["max_checkpoints_to_keep"], "grpo.max_checkpoints_to_keep"),
        ("trainer.resume_mode", "auto", "checkpoint_dir"),
        ("trainer.default_local_dir", run_path(checkpoint_dir), "checkpoint_dir"),
        ("trainer.n_gpus_per_node", res["gpus_per_node"], "resources.gpus_per_node"),
        ("trainer.nnodes", res["nodes"], "resources.nodes"),
        ("trainer.val_before_train", bool(verl["val_before_train"] and val), "verl.val_before_train"),
        ("trainer.test_freq", verl["test_freq"] if val else -1, "verl.test_freq"),
        ("trainer.logger", logger, "verl.logger"),
        ("trainer.project_name", verl["project_name"], "verl.project_name"),
        ("trainer.experiment_name", experiment, "experiments (its name)"),
    ]
    return items


def _with_reward_overrides(out: list[Override], exp: dict) -> list[Override]:
    """``out`` with the rewards' overrides (reward function, manager, estimator) in, an absolute path inside the
    working dir written relative."""
    for text in reward_overrides(exp["rewards"], max_response_length=exp["grpo"]["max_response_length"]):
        prefix, key, value = parse_override(text, "grpoflow.backends.verl.overrides.reward_overrides()")
        path = _checkout_path(value or "")
        new = _make(key, run_path(path), "rewards") if path else Override(key, value or "", "rewards", prefix)
        out = _replace(out, new)
    return out


def _with_extra_overrides(out: list[Override], extra_overrides: list[str]) -> list[Override]:
    """``out`` with ``verl.extra_overrides`` last; refused when one sets a key grpoflow derives from the config or
    one verl 0.9.1 ignores."""
    managed = {o.key: o.source for o in out if o.source}
    for i, text in enumerate(extra_overrides):
        where = f"verl.extra_overrides[{i}]"
        prefix, key, value = parse_override(text, where)
        if key in managed:
            raise ConfigError(
                f"config error: {where} sets {key}, which grpoflow derives from {managed[key]}: set {managed[key]} instead"
            )
        new = legacy_replacement(key)
        if new:
            raise ConfigError(f"config error: {where} sets {key}, which verl 0.9.1 silently ignores: use {new}")
        out = _replace(out, Override(key, value if value is not None else "", None, prefix))
    return out


def _checkout_path(value: str) -> str | None:
    """A (Hydra-quoted) absolute path inside the working dir, as a relative one; else None. Keeps the reward
    module's path in the command independent of where the project lives."""
    text = value[1:-1] if len(value) >= 2 and value[0] == value[-1] == "'" else value
    root = os.getcwd().rstrip("/") + "/"
    return text[len(root) :] if text.startswith(root) and "\\" not in text and "'" not in text else None


def _make(key: str, value: Any, source: str | None) -> Override:
    if isinstance(value, str) and ("$PWD" in value or "$(" in value):
        if '"' in value or "`" in value:
            raise ConfigError(f"config error: a path for {key} contains a quote or backtick: rename it ({value})")
        return Override(key, value, source, shell=True)
    return Override(key, hydra_value(value), source)


def _replace(items: list[Override], new: Override) -> list[Override]:
    return [o for o in items if o.key != new.key] + [new]


def render(items: Iterable[Override], continuation: bool = True) -> str:
    sep = " \\\n    " if continuation else " "
    return sep.join(o.shell_word() for o in items)


def get(items: Iterable[Override], key: str) -> str | None:
    for o in items:
        if o.key == key:
            return o.text
    return None
