"""GRPO training with TRL's ``GRPOTrainer`` (the trl backend), resumable and honest about completion.

``run_training(spec)`` (spec from ``grpoflow.backends.trl.commandline.training_spec``):

1. reads the start model from sft.json, the prompts from the train Parquet (overlong prompts dropped, like
   verl's ``filter_overlong_prompts``), the reward from ``grpoflow.rewards``;
2. resumes from the newest *complete* ``checkpoint-N`` in the checkpoint dir (cut-off saves are removed), after
   checking the checkpoints were trained from the same settings, start model and data
   (``grpoflow.checkpoint_record``, ``grpoflow_run.json``); otherwise it stops naming the change, unless
   ``resume_across_changes`` says to continue (never on a finished run: that would only relabel it);
3. trains ``grpo.total_steps`` optimizer steps of ``prompts_per_step × num_generations`` completions, saving
   every ``grpo.save_freq`` steps and at the end (tokenizer + chat template in every checkpoint), appending one
   metrics row per step to ``<checkpoint_dir>/train_metrics.jsonl`` (the live copy, kept across restarts);
4. on SIGTERM (SLURM time limit, Ctrl-C in Snakemake) finishes the current step, saves a checkpoint and exits 1;
5. only when the final step equals ``grpo.total_steps``: writes the metrics output and then the completion marker,
   each atomically.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import time
from pathlib import Path

from grpoflow.backends.trl import METRICS
from grpoflow.backends.trl.ckpt import LIVE_METRICS, is_complete, is_peft_checkpoint, latest_complete, step_dirs
from grpoflow.backends.trl.rewards import ZNORM_FUNC, build_reward_funcs
from grpoflow.discovery import model_path as sft_model_path
from grpoflow.errors import ConfigError, DataError, GrpoflowError
from grpoflow.io import exclusive_dir
from grpoflow.plan import GrpoSettings, TrainingPlan
from grpoflow.progress import StepProgress
from grpoflow.training import common
from grpoflow.training.common import map_metrics, number

log = logging.getLogger(__name__)

# Settings a rerun may change and still resume (common.RESUMABLE_GRPO, plus TRL's logging interval).
# trl.processes keeps the global batch (each process takes an equal share of a step's completions), and
# trl.shutdown_timeout is the launcher's: neither changes what a step trains.
RESUMABLE_CHANGES = common.RESUMABLE_GRPO | {
    ("trl", "logging_steps"),
    ("trl", "processes"),
    ("trl", "shutdown_timeout"),
}


# --------------------------------------------------------------------------------------------------------------
# Metrics


def metrics_row(step: int, logs: dict) -> dict:
    """TRL's logs of one step as a train_metrics.jsonl row (METRICS, plus rewards/<f>/mean -> reward/<f>)."""
    row = map_metrics(step, logs, METRICS)
    for key, value in logs.items():
        if number(value) is not None:
            if key.startswith("rewards/") and key.endswith("/mean") and key != f"rewards/{ZNORM_FUNC}/mean":
                row["reward/" + key[len("rewards/") : -len("/mean")]] = value
    # With per-prompt z-norm TRL's `reward` is the normalised sum (~0); the report wants R itself.
    if isinstance(logs.get("reward_unnormalized"), (int, float)):
        row["reward"] = logs["reward_unnormalized"]
    return row


# --------------------------------------------------------------------------------------------------------------
# Checkpoint dir: resume point, what the checkpoints were trained from


def identity(spec: dict, model_path: str) -> dict:
    """What the checkpoints are trained from (grpoflow.checkpoint_record): settings, start model, data content."""
    return common.training_identity(spec, "trl", RESUMABLE_CHANGES, model_path)


def prepare_checkpoint_dir(spec: dict, model_path: str) -> tuple[int, Path] | None:
    """Checks and tidies the checkpoint dir; returns (step, path) of the checkpoint to resume from, or None."""
    ckpt_dir = Path(spec["checkpoint_dir"])
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    latest = latest_complete(ckpt_dir)
    total = spec["grpo"]["total_steps"]
    latest_step = common.check_resume_point(spec, identity(spec, model_path), latest)
    for step, path in step_dirs(ckpt_dir).items():
        if step > latest_step and not is_complete(path, step):
            log.warning("removing %s: its save was cut off (no complete trainer_state.json)", path)
            shutil.rmtree(path)
    common.keep_live_metrics_until(ckpt_dir / LIVE_METRICS, latest_step)
    if latest:
        log.info("resuming from %s (step %d of %d)", latest[1], latest_step, total)
    else:
        log.info("no checkpoint in %s: training from the start model", ckpt_dir)
    return latest


# --------------------------------------------------------------------------------------------------------------
# Data


def load_prompts(parquet: str, tokenizer, max_prompt_length: int, where: str):
    """The train split as a ``datasets.Dataset`` with ``prompt`` (chat messages) and the reward's columns."""
    from datasets import Dataset

    kept = [row for _, row in common.prompts_within(parquet, tokenizer, max_prompt_length, where)]
    return Dataset.from_list(
        [
            {
                "prompt": r["prompt"],
                "ground_truth": r["reward_model"]["ground_truth"],
                "data_source": r.get("data_source"),
                "extra_info": r.get("extra_info") or {},
            }
            for r in kept
        ]
    )


# --------------------------------------------------------------------------------------------------------------
# Trainer callbacks


def _callbacks(live_metrics: Path, spec: dict):
    import torch
    from transformers import TrainerCallback

    class MetricsLog(TrainerCallback):
        """One row per logged step, appended and flushed, so a killed run keeps what it measured; and the step's
        progress line in the job log. ``extra``: what grpoflow measured in the step besides TRL's logs (the
        weight-sync check's row keys), asked at each row."""

        progress: StepProgress | None = None
        health = common.health_monitor(spec, live_metrics)  # continues from the rows before a resume
        extra: list = []

        def on_train_begin(self, args, state, control, **kwargs):
            self.progress = StepProgress(args.max_steps)

        def on_log(self, args, state, control, logs=None, **kwargs):
            # Every process logs the same (gathered) numbers: rank 0 alone writes them.
            if not state.is_world_process_zero or not logs or "train_runtime" in logs or state.global_step == 0:
                return
            row = metrics_row(state.global_step, logs)
            for source in self.extra:
                row.update(source())
            common.append_live_metrics(live_metrics, row)
            if self.progress is not None:
                log.info("%s", self.progress.line(state.global_step, row))
            self.health.observe(row)  # logs a line per check that fires; raises HealthStop for health.stop_on

    class StopOnSigterm(TrainerCallback):
        """SIGTERM (grpoflow.training.common.SigtermStop) ends the run at the next step boundary with a checkpoint."""

        def __init__(self):
            self.signal = common.process_sigterm_stop()  # installed at the job's start (grpoflow.backends.trl.train)

        def on_step_end(self, args, state, control, **kwargs):
            stop = self.signal.requested
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                # Each process gets SIGTERM on its own, possibly a step apart: all stop at the first step any saw it,
                # so they save the same checkpoint together (a save is collective) instead of waiting on each other.
                device = "cuda" if torch.distributed.get_backend() == "nccl" else "cpu"
                flag = torch.tensor([1 if stop else 0], device=device)
                torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
                stop = bool(flag.item())
            if stop:
                control.should_save = True
                control.should_training_stop = True
            return control

    return [MetricsLog(), StopOnSigterm()]


# --------------------------------------------------------------------------------------------------------------
# Training


def warmup_steps(grpo: GrpoSettings) -> int:
    """grpo.lr_warmup_ratio as steps, rounded up as transformers rounds a ratio (TrainingArguments.get_warmup_steps;
    given the ratio itself it would read 1.0 as one step)."""
    return math.ceil(grpo.lr_warmup_ratio * grpo.total_steps)


def lr_scheduler_type(grpo: GrpoSettings) -> str:
    """transformers' ``constant`` schedule ignores warmup_steps: a warm-up asked for goes to ``constant_with_warmup``
    (what verl's and Tunix's constant schedules do with a warm-up ratio)."""
    if grpo.lr_scheduler == "constant" and warmup_steps(grpo):
        return "constant_with_warmup"
    return grpo.lr_scheduler


def grpo_config_kwargs(spec: dict) -> dict:
    """GRPOConfig's arguments from the job's spec: its grpo settings typed (grpoflow.plan), its trl section."""
    grpo, trl = GrpoSettings.from_dict(spec["grpo"]), spec["trl"]
    G = grpo.num_generations
    completions = grpo.prompts_per_step * G
    # Each of the n processes takes completions / n of a step (TRL: generation_batch_size = per-device batch ×
    # processes × gradient-accumulation steps = completions), so the global batch is the same for any n.
    per_process = completions // trl["processes"]
    micro = trl["completions_per_device_batch"] or per_process
    gpu, lora = not trl["use_cpu"], bool(grpo.lora.rank)
    dtype = trl["param_dtype"]
    if dtype == "auto":
        # fp32 master weights (bf16 autocast on GPUs) unless the weights are a LoRA run's frozen base.
        dtype = "auto" if gpu and lora else "float32"
    vllm = trl["vllm"]
    kwargs = dict(
        output_dir=spec["checkpoint_dir"],
        max_steps=grpo.total_steps,
        # One generation round of prompts_per_step × G completions per optimizer step, in micro-batches of `micro`.
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=per_process // micro,
        num_generations=G,
        max_completion_length=grpo.max_response_length,
        learning_rate=grpo.learning_rate,
        lr_scheduler_type=lr_scheduler_type(grpo),
        warmup_steps=warmup_steps(grpo),
        beta=grpo.kl_coef,
        epsilon=grpo.clip_ratio,
        epsilon_high=grpo.clip_ratio_high if grpo.clip_ratio_high is not None else grpo.clip_ratio,
        max_grad_norm=grpo.max_grad_norm,
        temperature=grpo.temperature,
        top_p=grpo.top_p,
        top_k=0 if grpo.top_k < 0 else grpo.top_k,
        loss_type=trl["loss_type"],
        seed=grpo.seed,
        data_seed=grpo.seed,
        save_strategy="steps",
        save_steps=grpo.save_freq,
        save_total_limit=grpo.max_checkpoints_to_keep,
        logging_steps=trl["logging_steps"],
        use_cpu=trl["use_cpu"],
        # TRL defaults to bf16 and gradient checkpointing; on CPU both only slow training down (or fail).
        bf16=gpu,
        gradient_checkpointing=gpu,
        model_init_kwargs={"dtype": dtype, "trust_remote_code": spec["trust_remote_code"]},
        use_vllm=vllm["mode"] != "none",
        remove_unused_columns=False,
        report_to=list(grpo.report_to),
        # The per-step progress line (grpoflow.progress) replaces tqdm's bar, which a log file shows as one endless line.
        disable_tqdm=True,
    )
    if vllm["mode"] != "none":
        kwargs.update(
            vllm_mode=vllm["mode"],
            vllm_importance_sampling_correction=vllm["importance_sampling_correction"],
            **(vllm_server_kwargs() if vllm["mode"] == "server" else vllm_colocate_kwargs(grpo, vllm)),
        )
    kwargs.update(trl["extra_args"])
    return kwargs


def vllm_colocate_kwargs(grpo: GrpoSettings, vllm: dict) -> dict:
    return dict(
        vllm_gpu_memory_utilization=vllm["gpu_memory_utilization"],
        vllm_tensor_parallel_size=vllm["tensor_parallel_size"],
        # Room for the longest prompt kept (grpo.max_prompt_length) and a full completion, nothing more.
        vllm_max_model_length=grpo.max_prompt_length + grpo.max_response_length,
    )


def vllm_server_kwargs() -> dict:
    """Where the job's vLLM server listens: grpoflow.backends.trl.vllm_server started it and exported its address
    and the port of the weight-sync group (both free ports, so two jobs on one node do not meet)."""
    from grpoflow.backends.trl.vllm_server import client_settings

    return client_settings()


def grpo_config(spec: dict, reward_kwargs: dict):
    """TRL's GRPOConfig for the spec; TRL's own objections become one-line config errors."""
    from trl import GRPOConfig

    where = f"experiments.{spec['experiment']}"
    try:
        return GRPOConfig(**{**grpo_config_kwargs(spec), **reward_kwargs})
    except TypeError as exc:  # an unknown key in trl.extra_args
        raise ConfigError(f"config error: {where}.trl.extra_args: {exc}: see trl.GRPOConfig for the accepted arguments")
    except ValueError as exc:
        raise ConfigError(f"config error: {where}: TRL rejects the settings: {exc}")


def stop_kwargs(spec: dict, tokenizer, model_path: str) -> dict:
    """Rollouts stop on the tokens evaluation stops on (grpoflow.generation.stop_token_ids: the
    tokenizer's EOS, the model's generation_config EOS, ChatML's <|im_end|>/<|endoftext|>). TRL alone stops on the
    first two only, so a base model whose generation config lists only <|endoftext|> (Qwen2.5-Math) would run on
    past the chat template's end of turn. HF generate takes them as eos_token_id, vLLM as stop_token_ids."""
    from grpoflow.generation import ModelSource, stop_token_ids

    ids = stop_token_ids(tokenizer, ModelSource(name="start", kind="sft", path=model_path))
    return {"stop_token_ids": ids} if spec["trl"]["vllm"]["mode"] != "none" else {"eos_token_id": ids}


def peft_config(lora: dict):
    if not lora or lora.get("rank", 0) <= 0:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=lora["rank"],
        lora_alpha=lora["alpha"],
        lora_dropout=lora["dropout"],
        target_modules=lora["target_modules"],
        task_type="CAUSAL_LM",
    )


def run_training(spec: dict) -> dict | None:
    """Train (or resume) to ``grpo.total_steps``; write the metrics and the completion marker. Returns the marker
    (None on ranks other than 0: under torchrun rank 0 alone holds the checkpoint-dir lock, tidies the dir, writes
    the metrics and the marker; the others train)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != spec["trl"]["processes"]:
        raise ConfigError(
            f"config error: experiments.{spec['experiment']}.trl.processes = {spec['trl']['processes']} but this job runs {world} process(es): "
            "start it with the command train_grpo composes (torchrun --nproc-per-node trl.processes)"
        )
    if not spec["trl"]["use_cpu"]:
        import torch

        have = torch.cuda.device_count()
        if have < world:
            raise GrpoflowError(
                f"train_grpo of {spec['experiment']} runs {world} training process(es) on GPUs (trl.processes) but this job sees {have} GPU(s) "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): ask for them with resources.gpus_per_node, and run it in the cluster environment (cluster_env)"
            )
    if world == 1:
        return _run(spec, rank=0)
    from accelerate import PartialState

    # The process group the trainer will use (accelerate's shared state), set up now so that rank 0 can hand the
    # resume point (or its refusal) to the others before any of them loads a model.
    state = PartialState(cpu=spec["trl"]["use_cpu"])
    if spec["trl"]["use_cpu"]:
        _accept_cpu_rank_locations()
    return _run(spec, rank=state.process_index)


def _accept_cpu_rank_locations() -> None:
    """accelerate names each CPU process's device ``cpu:<rank>``, and HF Trainer resumes several processes with
    ``torch.load(optimizer.pt, map_location=args.device)``; torch restores only the location ``cpu``
    (``torch.serialization.default_restore_location``), so a gloo run could not resume. A tensor asked onto
    ``cpu:N`` is a CPU tensor: this deserializer keeps it where it is. It tags nothing, so saving is unchanged."""
    import torch.serialization as ser

    if not any(getattr(d, "__name__", "") == "_cpu_rank" for _, _, d in ser._package_registry):

        def _cpu_rank(obj, location: str):
            return obj if location.startswith("cpu:") else None

        ser.register_package(99, lambda obj: None, _cpu_rank)


def _run(spec: dict, rank: int) -> dict | None:
    total = spec["grpo"]["total_steps"]
    model_path = sft_model_path(spec["sft"])
    lock = exclusive_dir(spec["checkpoint_dir"]) if rank == 0 else contextlib.nullcontext()
    with lock:
        resume, refusal = None, None
        if rank == 0:
            try:
                resume = prepare_checkpoint_dir(spec, model_path)
            except GrpoflowError as err:
                refusal = err
        resume = _from_rank_zero(resume, refusal)
        if resume is not None and resume[0] == total:
            # Trained to the end before (e.g. killed while writing the outputs): HF Trainer would train one step more.
            log.info("%s is the planned final step: nothing left to train", resume[1])
            final_step = total
        else:
            final_step = train(spec, model_path, resume[1] if resume else None)
        return finish(spec, model_path, final_step) if rank == 0 else None


def _from_rank_zero(resume, refusal: GrpoflowError | None):
    """Rank 0's resume point, or its refusal raised on every rank (one process: as it is)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        box = [resume, None if refusal is None else (type(refusal), str(refusal))]
        dist.broadcast_object_list(box, src=0)
        resume, err = box
        if err is not None:
            raise err[0](err[1])
    elif refusal is not None:
        raise refusal
    return resume


def train(spec: dict, model_path: str, resume: Path | None) -> int:
    """GRPOTrainer from ``model_path`` (or ``resume``) to ``grpo.total_steps``; returns the step it stopped at."""
    grpo = spec["grpo"]
    trainer = build_trainer(spec, model_path)
    started = time.time()
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    if spec["trl"]["vllm"]["mode"] == "colocate":
        from grpoflow.backends.trl.vllm_engine import shut_down

        shut_down(trainer)
    log.info(
        "training stopped at step %d of %d after %.0f s",
        trainer.state.global_step,
        grpo["total_steps"],
        time.time() - started,
    )
    return trainer.state.global_step


def build_trainer(spec: dict, model_path: str):
    """The GRPOTrainer of the spec, starting from ``model_path``."""
    import torch
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    grpo, where = spec["grpo"], f"experiments.{spec['experiment']}"
    tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=spec["trust_remote_code"])
    if tokenizer.chat_template is None:
        raise DataError(
            f"the start model's tokenizer ({model_path}) has no chat template: GRPO renders the dataset's chat prompts with it; use an SFT checkpoint saved with its tokenizer"
        )
    dataset = load_prompts(spec["train"], tokenizer, grpo["max_prompt_length"], where)
    # The reward set as the plan decoded from the spec has it (grpoflow.plan.TrainingPlan): built, not resolved again.
    plan = TrainingPlan.decode("trl", spec)
    rewards = build_reward_funcs(
        plan.rewards, grpo["num_generations"], tokenizer=tokenizer, max_response_length=grpo["max_response_length"]
    )
    # trl.extra_args.generation_kwargs (if any) adds to the stop tokens rather than dropping them.
    stops = stop_kwargs(spec, tokenizer, model_path)
    generation = {**stops, **spec["trl"]["extra_args"].get("generation_kwargs", {})}
    args = grpo_config(spec, {**rewards.config_kwargs, "generation_kwargs": generation})
    vllm = spec["trl"]["vllm"]
    if vllm["mode"] == "colocate":
        from grpoflow.backends.trl.vllm_engine import configure_colocate

        configure_colocate(spec["trl"])
    torch.manual_seed(grpo["seed"])
    callbacks = _callbacks(Path(spec["checkpoint_dir"]) / LIVE_METRICS, spec)
    trainer = GRPOTrainer(
        model=model_path,
        reward_funcs=rewards.reward_funcs,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config(grpo.get("lora")),
        callbacks=callbacks,
    )
    if vllm["mode"] == "colocate":
        from grpoflow.backends.trl.vllm_engine import log_engine

        log_engine(trainer)
    if vllm.get("check_weight_sync"):
        from grpoflow.backends.trl.weight_sync import check_for

        callbacks[0].extra = [check_for(trainer, vllm["mode"]).take]
    # TRL ends a completion (HF generate's mask) and tells it from a truncated one (completions/clipped_ratio, and
    # mask_truncated_completions) by trainer.eos_token_ids, which it takes from the tokenizer's and the model
    # generation_config's EOS only. Qwen2.5-Math's list only <|endoftext|>: every rollout that ended at the chat
    # template's <|im_end|> (a stop token here) counted as truncated. The stop tokens end a completion too.
    trainer.eos_token_ids = list(dict.fromkeys([*trainer.eos_token_ids, *next(iter(stops.values()))]))
    return trainer


def finish(spec: dict, model_path: str, final_step: int) -> dict:
    """The metrics output, then the completion marker: only for a complete run."""
    ckpt_dir = Path(spec["checkpoint_dir"])
    final = ckpt_dir / f"checkpoint-{final_step}"
    if final_step == spec["grpo"]["total_steps"] and not is_complete(final, final_step):
        raise GrpoflowError(
            f"training of {spec['experiment']} reached step {final_step} but {final} is missing or incomplete: rerun to save it again"
        )
    return common.finish_run(
        spec,
        backend="trl",
        live=ckpt_dir / LIVE_METRICS,
        final_step=final_step,
        final_checkpoint=str(final),
        checkpoint_format="peft_adapter" if is_peft_checkpoint(final) else "hf_model",
        start_model=model_path,
    )
