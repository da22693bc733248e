"""The embedded demo's SFT stage: a short TRL ``SFTTrainer`` run written as a real SFT run dir.

Cluster configs bring their own SFT run; the demo makes one, laid out like verl's SFT trainer writes it, so
``discover_sft_checkpoint`` finds it exactly as it finds a real run::

    run_dir/
      global_step_300/huggingface/   HF model + tokenizer + chat template + generation_config
      global_step_600/huggingface/
      global_step_900/huggingface/
      latest_checkpointed_iteration.txt   "900"
      train_log.jsonl                     the trainer's loss / learning-rate log

The completion the model learns is a Qwen3-style think block holding the dataset's original solution, then the
boxed final answer (``completion_text``), i.e. what the answer verifier grades: the last ``\\boxed{}`` after the
last ``</think>``.

``schedule_steps`` longer than ``max_steps`` stops a cosine schedule part-way: the demo SFT stays imperfect on
purpose, so GRPO has room to improve it.
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
import time
from pathlib import Path

from grpoflow.backends.common import read_rl_rows
from grpoflow.errors import ConfigError
from grpoflow.io import atomic_dir

log = logging.getLogger(__name__)

HF_SUBDIR = "huggingface"
LATEST_FILE = "latest_checkpointed_iteration.txt"

_FINAL_LINE = re.compile(r"^\s*####.*$", re.MULTILINE)
_CALCULATOR = re.compile(r"<<[^<>]*>>")  # GSM8K's calculator annotations: "48/2 = <<48/2=24>>24"


def completion_text(ground_truth: str, answer: str | None = None) -> str:
    """``<think>\\n{solution}\\n</think>\\n\\boxed{ground_truth}``; the solution is the original answer text without
    its ``#### N`` line (and GSM8K calculator annotations), empty when the dataset has none."""
    reasoning = _CALCULATOR.sub("", _FINAL_LINE.sub("", answer or "")).strip()
    return f"<think>\n{reasoning}\n</think>\n\\boxed{{{ground_truth}}}"


def row_completion(row: dict) -> str:
    """The SFT completion of a verl RL row (its ground truth and, when recorded, the original solution)."""
    return completion_text(row["reward_model"]["ground_truth"], (row.get("extra_info") or {}).get("answer"))


def sft_examples(train_parquet: str) -> list[dict]:
    """Prompt/completion chat examples (TRL's conversational prompt-completion format) from verl RL rows."""
    rows = read_rl_rows(train_parquet, "the demo SFT data (demo.sft.dataset / demo.sft.split)")
    return [
        {"prompt": row["prompt"], "completion": [{"role": "assistant", "content": row_completion(row)}]} for row in rows
    ]


def _stop_and_save_callback(spec: dict, out: Path):
    from transformers import TrainerCallback

    max_steps, save_steps = spec["max_steps"], spec["save_steps"]

    class StopAndSave(TrainerCallback):
        """Saves global_step_N/huggingface every save_steps and at max_steps; stops at max_steps even when the
        learning-rate schedule is longer."""

        def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
            step = state.global_step
            if step % save_steps == 0 or step >= max_steps:
                target = out / f"global_step_{step}" / HF_SUBDIR
                model.save_pretrained(target)
                processing_class.save_pretrained(target)
                log.info("saved %s", target)
            if step >= max_steps:
                control.should_training_stop = True
            return control

    return StopAndSave()


def run_sft(spec: dict, model_dir: str, train_parquet: str, run_dir: str) -> dict:
    """Train ``model_dir`` on ``train_parquet`` per ``spec`` (the config's ``demo.sft``) into ``run_dir``."""
    schedule_steps = spec.get("schedule_steps") or spec["max_steps"]
    if schedule_steps < spec["max_steps"]:
        raise ConfigError(
            f"config error: demo.sft.schedule_steps = {schedule_steps} is shorter than demo.sft.max_steps = {spec['max_steps']}: make it >= max_steps (or null)"
        )

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    dataset = Dataset.from_list(sft_examples(train_parquet))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)

    started = time.time()
    with atomic_dir(run_dir) as out, tempfile.TemporaryDirectory(prefix="grpoflow-sft-") as scratch:
        args = SFTConfig(
            output_dir=scratch,
            max_steps=schedule_steps,
            per_device_train_batch_size=spec["batch_size"],
            learning_rate=spec["learning_rate"],
            lr_scheduler_type=spec["lr_scheduler"],
            warmup_steps=spec["warmup_ratio"],
            seed=spec["seed"],
            data_seed=spec["seed"],
            completion_only_loss=True,
            # CPU: TRL defaults to bf16 and gradient checkpointing, both only slow a tiny fp32 model down.
            bf16=False,
            use_cpu=True,
            gradient_checkpointing=False,
            save_strategy="no",
            logging_steps=max(1, min(50, spec["max_steps"] // 10)),
            report_to=[],
            disable_tqdm=True,
            dataset_num_proc=None,
        )
        trainer = SFTTrainer(
            model=model,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[_stop_and_save_callback(spec, out)],
        )
        trainer.train()
        step = trainer.state.global_step
        (out / LATEST_FILE).write_text(f"{step}\n", encoding="utf-8")
        with open(out / "train_log.jsonl", "w", encoding="utf-8") as fh:
            for row in trainer.state.log_history:
                fh.write(json.dumps(row) + "\n")
    summary = {"final_step": step, "seconds": round(time.time() - started, 1), "run_dir": run_dir}
    log.info("demo SFT done: %s", json.dumps(summary))
    return summary
