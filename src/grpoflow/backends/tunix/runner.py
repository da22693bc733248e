"""The Tunix backend's training run: Tunix 0.1.7 ``GRPOLearner`` on JAX (CPU, TPU or GPU), resumable, with the
same outputs as the other backends.

What it does, in order (``run_training``):

1. checks the checkpoint dir (one trainer at a time, the settings it was trained with: grpoflow.checkpoint_record),
   removes Orbax saves that were cut off (``<step>.orbax-checkpoint-tmp*``) and the metrics of steps that will be
   trained again;
2. loads the start model (an HF Qwen3 dir: grpoflow.backends.tunix.qwen3) as the actor, and a second copy as the
   frozen reference when ``grpo.kl_coef > 0``; with ``grpo.lora``, qwix adapters on the start model are the actor
   and the start model itself is the reference;
3. builds Tunix's ``RLCluster`` (one mesh for actor, reference and rollout; vanilla or vLLM rollout) and
   ``GRPOLearner`` with the one reward function of grpoflow's registry (grpoflow.backends.tunix.rewards);
4. trains to ``grpo.total_steps``. Tunix's ``PeftTrainer`` restores the newest Orbax checkpoint under
   ``<checkpoint_dir>/actor/`` by itself (weights and optimizer state) and fast-forwards the data iterator, which
   is deterministic (``grpo.seed``), so a resumed run sees the prompts it would have seen;
5. writes ``train_metrics.jsonl`` and the completion marker, only when the newest complete checkpoint is
   ``grpo.total_steps``.

SIGTERM (SLURM's time limit, preemption, Ctrl-C of a supervisor) ends the run at the next step boundary: the data
iterator stops, Tunix's learner leaves its loop and its trainer saves the last finished step (``PeftTrainer.close``
→ ``_save_last_checkpoint``). A later SIGTERM is the same stop (common.SigtermStop): only SIGKILL ends the save.
"""

from __future__ import annotations

import logging
import math
import shutil
import time
from pathlib import Path

import numpy as np

from grpoflow.backends.tunix import METRICS, REWARD_COMPONENT_PREFIX
from grpoflow.backends.tunix.ckpt import ACTOR_SUBDIR, LIVE_METRICS, checkpoints, cut_off_saves, latest_complete
from grpoflow.discovery import model_path as sft_model_path
from grpoflow.errors import ConfigError, DataError
from grpoflow.io import exclusive_dir
from grpoflow.progress import StepProgress
from grpoflow.training import common

log = logging.getLogger(__name__)

# Settings a rerun may change and still resume: common.RESUMABLE_GRPO, and how the same steps are laid out in
# memory (mesh, recomputation, attention kernel, host offload), e.g. to fit after an out-of-memory failure.
RESUMABLE_CHANGES = common.RESUMABLE_GRPO | {
    ("tunix", key) for key in ("mesh", "remat", "flash_attention", "flash_attention_block_size", "offload_to_cpu")
}


# --------------------------------------------------------------------------------------------------------------
# Checkpoint dir


def identity(spec: dict, model_path: str) -> dict:
    """What the checkpoints are trained from (grpoflow.checkpoint_record): settings, start model, data content."""
    return common.training_identity(spec, "tunix", RESUMABLE_CHANGES, model_path)


def prepare_checkpoint_dir(spec: dict, model_path: str) -> int:
    """Checks and tidies the checkpoint dir; returns the step training resumes from (0: the start model)."""
    ckpt_dir = Path(spec["checkpoint_dir"])
    (ckpt_dir / ACTOR_SUBDIR).mkdir(parents=True, exist_ok=True)
    latest = latest_complete(ckpt_dir)
    latest_step = common.check_resume_point(spec, identity(spec, model_path), latest)
    for entry in cut_off_saves(ckpt_dir):
        log.warning("removing %s: its save was cut off", entry)
        shutil.rmtree(entry)
    common.keep_live_metrics_until(ckpt_dir / LIVE_METRICS, latest_step)
    if latest:
        log.info("resuming from %s (step %d of %d)", latest[1], latest_step, spec["grpo"]["total_steps"])
    else:
        log.info("no checkpoint in %s: training from the start model", ckpt_dir)
    return latest_step


# --------------------------------------------------------------------------------------------------------------
# Data: a deterministic, endless iterator of prompt batches


def load_prompts(parquet: str, tokenizer, max_prompt_length: int, where: str) -> list[dict]:
    """The train split's rows as ``{"prompt": chat-templated text, "ground_truth": str}`` (prompts longer than
    ``max_prompt_length`` tokens dropped, as with TRL: grpoflow.training.common.prompts_within)."""
    kept = common.prompts_within(parquet, tokenizer, max_prompt_length, where)
    return [{"prompt": text, "ground_truth": str(row["reward_model"]["ground_truth"])} for text, row in kept]


class PromptBatches:
    """Batches of ``prompts_per_step`` prompts in a seeded order, epoch after epoch, as Tunix wants them (numpy
    arrays: Tunix repeats every column ``num_generations`` times with ``np.repeat``).

    Deterministic in ``seed``, so Tunix's fast-forward after a restore (it skips the batches already trained)
    lands on the prompts the interrupted run would have seen next. Each batch also sets the rollout's sampling
    seed to (seed, batch index): Tunix's sampler otherwise uses PRNGKey(0) for every call (tunix/generate/
    sampler.py), which would draw the same noise at every step. ``stop()`` ends the iteration at the next batch
    (SIGTERM), which makes Tunix's learner leave its loop and save the last finished step.
    """

    def __init__(self, rows: list[dict], prompts_per_step: int, seed: int, rollout_config=None):
        if len(rows) < prompts_per_step:
            raise DataError(
                f"the training data has {len(rows)} usable prompts, fewer than grpo.prompts_per_step = {prompts_per_step}"
            )
        self.rows, self.size, self.seed = rows, prompts_per_step, seed
        self.rollout_config = rollout_config
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True

    def __iter__(self):
        rng = np.random.default_rng(self.seed)
        index = 0
        while True:
            order = rng.permutation(len(self.rows))
            for start in range(0, len(order) - self.size + 1, self.size):
                if self.stopped:
                    return
                if self.rollout_config is not None:
                    self.rollout_config.seed = self.seed * 1_000_003 + index
                chosen = [self.rows[i] for i in order[start : start + self.size]]
                index += 1
                yield {
                    "prompts": np.array([r["prompt"] for r in chosen], dtype=object),
                    "ground_truth": np.array([r["ground_truth"] for r in chosen], dtype=object),
                }


# --------------------------------------------------------------------------------------------------------------
# Metrics: Tunix's scalars -> one train_metrics.jsonl row per optimizer step


class MetricRows:
    """A Tunix metrics-logging backend (``MetricsLoggerOptions(backend_kwargs={"custom_backend": [...]})``) that
    collects the scalars of each step into the project's metric keys (``METRICS``).

    Tunix logs a rollout's metrics (rewards, lengths, grpoflow's) under its global step, counted from 0 before
    the update they feed, and the update's (loss, kl, grad norm, learning rate) under the optimizer step after it:
    step N's row joins this attempt's (N − first)th rollout and the actor scalars of N. A row is written (appended and flushed, so a killed run
    keeps it) once the next step's actor scalars arrive, and the last one by ``flush``.
    """

    def __init__(self, live: Path, total: int, first_step: int, health=None):
        self.live, self.total, self.first_step = live, total, first_step
        self.health = health  # grpoflow.health.HealthMonitor
        self.rollout: dict[int, dict] = {}
        self.actor: dict[int, dict] = {}
        self.written = first_step
        self.progress = StepProgress(total)
        self.finished_at: dict[int, float] = {}  # when each step's update was reported
        self.first_rollout: int | None = None  # Tunix's global step of this attempt's first rollout

    # the LoggingBackend protocol
    def log_scalar(self, event: str, value, **kwargs) -> None:
        step = kwargs.get("step")
        if step is None:
            return
        key = METRICS.get(event)
        if key is None and event.startswith(REWARD_COMPONENT_PREFIX):
            key = "reward/" + event[len(REWARD_COMPONENT_PREFIX) :]
        if key is None:
            return
        try:
            number = float(value)
        except (TypeError, ValueError):
            return
        if event.startswith("actor/"):
            if int(step) not in self.actor:
                self.finished_at[int(step)] = time.monotonic()
            self.actor.setdefault(int(step), {})[key] = number
            self._write_before(int(step))
        else:
            # Tunix's global step restarts at 0 after a resume from its final or signal-time save (PeftTrainer.
            # _save_last_checkpoint writes no custom metadata, so RLLearner restores global_step 0): count rollouts
            # from the first one this attempt reports instead.
            if self.first_rollout is None:
                self.first_rollout = int(step)
            row = self.first_step + 1 + int(step) - self.first_rollout
            self.rollout.setdefault(row, {})[key] = number

    def close(self) -> None:
        pass

    def flush(self, last_step: int) -> None:
        self._write_before(last_step + 1)

    def _write_before(self, step: int) -> None:
        while self.written + 1 < step:
            n = self.written + 1
            self.written = n
            if n not in self.actor:
                continue
            row = {"step": n, **self.rollout.pop(n, {}), **self.actor.pop(n)}
            if n - 1 in self.finished_at:
                row["time_s"] = round(self.finished_at[n] - self.finished_at.pop(n - 1), 3)
            nonfinite = sorted(k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v))
            row = {k: v for k, v in row.items() if k not in nonfinite}  # JSON has no NaN: named instead
            if nonfinite:
                row["nonfinite"] = nonfinite
            common.append_live_metrics(self.live, row)
            log.info("%s", self.progress.line(n, row))
            if self.health is not None:
                self.health.observe(row)  # logs a line per check that fires; raises HealthStop for health.stop_on


# --------------------------------------------------------------------------------------------------------------
# Training


def _optimizer(grpo: dict, tunix: dict):
    import optax

    total, peak = grpo["total_steps"], grpo["learning_rate"]
    warmup = int(grpo["lr_warmup_ratio"] * total)
    kind = grpo["lr_scheduler"]
    if kind == "constant":
        schedule = (
            optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), optax.constant_schedule(peak)], [warmup])
            if warmup
            else peak
        )
    elif kind == "cosine":
        schedule = optax.warmup_cosine_decay_schedule(0.0, peak, warmup, max(total, warmup + 1), end_value=0.0)
    elif kind == "linear":
        schedule = optax.join_schedules(
            [optax.linear_schedule(0.0, peak, warmup), optax.linear_schedule(peak, 0.0, max(total - warmup, 1))],
            [warmup],
        )
    else:
        raise ConfigError(
            f"config error: grpo.lr_scheduler = {kind!r} is not supported by the tunix backend (constant, cosine, linear)"
        )

    def clipped_adamw(learning_rate):
        return optax.chain(
            optax.clip_by_global_norm(grpo["max_grad_norm"]),
            optax.adamw(learning_rate, b1=0.9, b2=tunix["adam_b2"], eps=1e-8, weight_decay=tunix["weight_decay"]),
        )

    # inject_hyperparams around the whole chain: Tunix logs the learning rate from opt_state.hyperparams.
    return optax.inject_hyperparams(clipped_adamw)(learning_rate=schedule)


def _mesh(tunix: dict):
    import jax

    n = jax.device_count()
    fsdp, tp = tunix["mesh"]["fsdp"], tunix["mesh"]["tp"]
    if fsdp == -1:
        fsdp = n // tp
    if fsdp * tp != n:
        raise ConfigError(
            f"config error: tunix.mesh fsdp × tp = {fsdp} × {tp} = {fsdp * tp} but this job sees {n} {jax.devices()[0].platform} device(s): set tunix.mesh to match (fsdp: -1 takes all)"
        )
    axis_types = (jax.sharding.AxisType.Auto,) * 2
    return jax.make_mesh((fsdp, tp), ("fsdp", "tp"), axis_types=axis_types)


def train(spec: dict, model_path: str, resumed_from: int) -> int:
    """Tunix GRPO from ``model_path`` (or the newest checkpoint) to ``grpo.total_steps``; returns the newest
    complete checkpoint's step when it stops."""
    from transformers import AutoTokenizer

    from grpoflow.backends.tunix import qwen3

    grpo, tunix, where = spec["grpo"], spec["tunix"], f"experiments.{spec['experiment']}"
    # Tunix and Orbax log every rollout's trajectory ids and every save's phases at INFO through absl: the job log
    # keeps grpoflow's progress line per step and their warnings.
    logging.getLogger("absl").setLevel(logging.WARNING)
    ckpt_dir = Path(spec["checkpoint_dir"]).absolute()  # Orbax refuses relative paths (the rules' are relative)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.chat_template is None:
        raise DataError(
            f"the start model's tokenizer ({model_path}) has no chat template: GRPO renders the dataset's chat prompts with it; use an SFT checkpoint saved with its tokenizer"
        )
    rows = load_prompts(spec["train"], tokenizer, grpo["max_prompt_length"], where)
    mesh = _mesh(tunix)
    if tunix["flash_attention"]:
        qwen3.check_flash_attention(mesh.devices.flat[0].platform)
    started = time.monotonic()
    actor, reference = _load_models(model_path, mesh, grpo, tunix)
    log.info(
        "loaded %s%s in %.1f s",
        model_path,
        " (+ reference)" if reference is not None else "",
        time.monotonic() - started,
    )
    rollout = _rollout_config(grpo, tunix, tokenizer, model_path)
    live, health = ckpt_dir / LIVE_METRICS, common.health_monitor(spec, ckpt_dir / LIVE_METRICS)
    rows_out = MetricRows(live, grpo["total_steps"], resumed_from, health)
    cluster = _cluster(spec, actor, reference, tokenizer, mesh, rollout, rows_out, ckpt_dir)
    learner = _learner(spec, cluster, tokenizer)
    batches = PromptBatches(rows, grpo["prompts_per_step"], grpo["seed"], rollout)
    _run_until_done_or_stopped(learner, batches)
    final = cluster.actor_trainer.train_steps
    rows_out.flush(final)
    log.info("training stopped at step %d of %d after %.0f s", final, grpo["total_steps"], time.monotonic() - started)
    latest = latest_complete(ckpt_dir)
    return latest[0] if latest else 0


def _load_models(model_path: str, mesh, grpo: dict, tunix: dict) -> tuple:
    """(actor, reference): the model to train and the KL reference (None without a KL term)."""
    from grpoflow.backends.tunix import qwen3

    options = {k: tunix[k] for k in ("remat", "flash_attention", "flash_attention_block_size")}
    lora = grpo["lora"] if (grpo.get("lora") or {}).get("rank", 0) > 0 else None
    if lora:
        # LoRA: the start model is frozen and is the reference too (Tunix shares the backbone between them).
        base = qwen3.load(model_path, mesh, tunix["param_dtype"], tunix["compute_dtype"], **options)
        return qwen3.with_lora(base, lora), (base if grpo["kl_coef"] > 0 else None)
    actor = qwen3.load(model_path, mesh, tunix["param_dtype"], tunix["compute_dtype"], **options)
    # The reference is never trained: its weights in the compute dtype (bf16 on TPU) halve its memory.
    reference = (
        qwen3.load(model_path, mesh, tunix["compute_dtype"], tunix["compute_dtype"], **options)
        if grpo["kl_coef"] > 0
        else None
    )
    return actor, reference


def _rollout_config(grpo: dict, tunix: dict, tokenizer, model_path: str):
    """Tunix's rollout settings: lengths, sampling, stop token, the vLLM engine's memory share."""
    from tunix.rl.rollout import base_rollout

    return base_rollout.RolloutConfig(
        max_tokens_to_generate=grpo["max_response_length"],
        max_prompt_length=grpo["max_prompt_length"],
        kv_cache_size=grpo["max_prompt_length"] + grpo["max_response_length"] + 8,
        temperature=grpo["temperature"],
        top_p=grpo["top_p"],
        top_k=None if grpo["top_k"] < 0 else grpo["top_k"],
        eos_tokens=[tokenizer.eos_token_id],
        rollout_vllm_hbm_utilization=tunix["vllm_hbm_utilization"],
        rollout_vllm_model_version=model_path if tunix["rollout_engine"] == "vllm" else "",
    )


def _cluster(spec: dict, actor, reference, tokenizer, mesh, rollout, rows_out: MetricRows, ckpt_dir: Path):
    """Tunix's RLCluster: actor, reference and rollout on one mesh, with the optimizer, step count, checkpointing
    (``grpo.save_freq``, ``max_checkpoints_to_keep``) and metrics backends (MetricRows + ``grpo.report_to``)."""
    import orbax.checkpoint as ocp
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.sft import metrics_logger

    grpo, tunix = spec["grpo"], spec["tunix"]
    backends: dict = {"custom_backend": [lambda: rows_out, *_trackers(grpo["report_to"], ckpt_dir, spec["experiment"])]}
    training_config = rl_cluster_lib.RLTrainingConfig(
        actor_optimizer=_optimizer(grpo, tunix),
        eval_every_n_steps=10**9,  # grpoflow evaluates in its own rule
        max_steps=grpo["total_steps"],
        mini_batch_size=grpo["prompts_per_step"],
        checkpoint_root_directory=str(ckpt_dir),
        checkpointing_options=ocp.CheckpointManagerOptions(
            save_interval_steps=grpo["save_freq"], max_to_keep=grpo["max_checkpoints_to_keep"]
        ),
        metrics_logging_options=metrics_logger.MetricsLoggerOptions(
            log_dir=str(ckpt_dir / "tensorboard"), backend_kwargs=backends
        ),
        pbar_description=None,
    )
    roles = (rl_cluster_lib.Role.ACTOR, rl_cluster_lib.Role.REFERENCE, rl_cluster_lib.Role.ROLLOUT)
    return rl_cluster_lib.RLCluster(
        actor=actor,
        reference=reference,
        tokenizer=tokenizer,
        cluster_config=rl_cluster_lib.ClusterConfig(
            role_to_mesh={role: mesh for role in roles},
            rollout_engine=tunix["rollout_engine"],
            offload_to_cpu=tunix["offload_to_cpu"],
            training_config=training_config,
            rollout_config=rollout,
        ),
    )


def _learner(spec: dict, cluster, tokenizer):
    """Tunix's GRPO learner on ``cluster`` with grpoflow's rewards (one batch-scored reward + its metrics)."""
    from tunix.rl.grpo import grpo_learner

    from grpoflow.backends.tunix.rewards import build_reward_fns

    grpo, tunix = spec["grpo"], spec["tunix"]
    reward_fns, metric_fn = build_reward_fns(
        spec["rewards"], grpo["num_generations"], tokenizer=tokenizer, max_response_length=grpo["max_response_length"]
    )
    return grpo_learner.GRPOLearner(
        rl_cluster=cluster,
        algo_config=algo_config(grpo, tunix),
        reward_fns=reward_fns,
        metric_fns=[_prefixed(metric_fn)],
    )


def algo_config(grpo: dict, tunix: dict):
    """Tunix's GRPOConfig for the spec's ``grpo`` and ``tunix`` sections (GRPOLearner sets its temperature from the
    rollout config)."""
    from tunix.rl.grpo import grpo_learner

    algo = grpo_learner.GRPOConfig(
        num_generations=grpo["num_generations"],
        num_iterations=1,
        beta=grpo["kl_coef"],
        epsilon=grpo["clip_ratio"],
        loss_agg_mode=tunix["loss_agg_mode"],
    )
    # Tunix's grpo policy loss reads epsilon_high when the config has it (tunix/rl/algo_core.py).
    algo.epsilon_high = grpo["clip_ratio_high"] if grpo["clip_ratio_high"] is not None else grpo["clip_ratio"]
    return algo


def _run_until_done_or_stopped(learner, batches: PromptBatches) -> None:
    """Tunix's training loop; SIGTERM stops the batches at the next step, then Tunix's learner leaves its loop and
    saves the last step."""
    stop = common.process_sigterm_stop()  # installed at the job's start (common.train_main)
    stop.watch(batches.stop)
    try:
        learner.train(batches)
    except StopIteration:
        # Stopped before Tunix's first batch (its learner reads one to size the batches): nothing trained.
        if not batches.stopped:
            raise
    finally:
        stop.watch(None)


def _trackers(report_to: list[str], ckpt_dir: Path, experiment: str) -> list:
    """Factories of Tunix's logging backends for ``grpo.report_to`` (Tunix builds none of its defaults once a custom
    backend, MetricRows, is given)."""
    from tunix.sft import metrics_logger

    factories = []
    for tracker in report_to:
        if tracker == "tensorboard":
            factories.append(lambda: metrics_logger.TensorboardBackend(log_dir=str(ckpt_dir / "tensorboard")))
        elif tracker == "wandb":  # the schema allows these two
            factories.append(lambda: metrics_logger.WandbBackend(project="grpoflow", name=experiment))
    return factories


def _prefixed(metric_fn):
    """Tunix splits a metric name at its first '/' into logger prefix and name: keep grpoflow's apart."""

    def grpoflow_metrics(**kwargs):
        return {f"grpoflow/{k}": v for k, v in metric_fn(**kwargs).items()}

    return grpoflow_metrics


def run_training(spec: dict) -> dict:
    """Train (or resume) to ``grpo.total_steps``; write the metrics and the completion marker. Returns the marker."""
    from grpoflow.backends.tunix.device import require_declared_tpu

    require_declared_tpu(f"train_grpo ({spec['experiment']})")  # before the lock, the data and the model
    total = spec["grpo"]["total_steps"]
    model_path = sft_model_path(spec["sft"])
    with exclusive_dir(spec["checkpoint_dir"]):
        resumed_from = prepare_checkpoint_dir(spec, model_path)
        if resumed_from == total:
            log.info("step %d is the planned final step: nothing left to train", total)
            final_step = total
        else:
            final_step = train(spec, model_path, resumed_from)
        return finish(spec, model_path, final_step)


def finish(spec: dict, model_path: str, final_step: int) -> dict:
    """The metrics output, then the completion marker: only for a complete run."""
    ckpt_dir = Path(spec["checkpoint_dir"])
    return common.finish_run(
        spec,
        backend="tunix",
        live=ckpt_dir / LIVE_METRICS,
        final_step=final_step,
        final_checkpoint=str(checkpoints(ckpt_dir).get(final_step, ckpt_dir / ACTOR_SUBDIR / str(final_step))),
        checkpoint_format="orbax",
        start_model=model_path,
    )
