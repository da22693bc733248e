"""The embedded demo's SFT stage: a TRL ``SFTTrainer`` run written as a real SFT run dir.

Cluster configs bring their own SFT run; the demo makes one, laid out like verl's SFT trainer writes it, so
``discover_sft_checkpoint`` finds it exactly as it finds a real run::

    run_dir/
      global_step_300/huggingface/   HF model + tokenizer + chat template + generation_config
      global_step_575/huggingface/   the start point the run chose (see below)
      latest_checkpointed_iteration.txt   "575"
      start_point.json                    how it was chosen: every validation accuracy measured, the band, the machine
      train_log.jsonl                     the trainer's loss / learning-rate log

The completion the model learns is a Qwen3-style think block holding the dataset's original solution, then the
boxed final answer (``completion_text``), i.e. what the answer verifier grades: the last ``\\boxed{}`` after the
last ``</think>``.

**The start point is defined by behaviour, not by a step count.** With ``target_accuracy`` set, the run
evaluates its model every ``eval_every`` steps on the validation split, greedily and with the answer verifier
(the evaluation library's own generation and scoring, so the number means what the report's numbers mean), and
stops at the first step whose accuracy lies in ``band``. That step becomes the run's latest checkpoint. The
demo's SFT accuracy rises steeply over a few hundred steps, and where exactly depends on the CPU's float
kernels; a fixed stop step turns that into start points anywhere from ~10 % to ~90 % on different machines,
where a band gives GRPO the same kind of start (room to improve, enough signal to learn from) on every one.
Without ``target_accuracy`` the run stops at ``max_steps`` (``schedule_steps`` longer than ``max_steps`` stops a
cosine schedule part-way).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import tempfile
import time
from pathlib import Path

from grpoflow.errors import ConfigError, DataError
from grpoflow.io import atomic_dir, atomic_write_json
from grpoflow.provenance import compute_environment
from grpoflow.training.common import read_rl_rows

log = logging.getLogger(__name__)

HF_SUBDIR = "huggingface"
LATEST_FILE = "latest_checkpointed_iteration.txt"
START_POINT_FILE = "start_point.json"

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


class ValidationProbe:
    """Greedy accuracy of a checkpoint on a validation split, measured as the ``evaluate`` rule measures it: the
    same prompt rendering, stop tokens, transformers generation and answer verifier (grpoflow.evaluation)."""

    def __init__(self, parquet: str, tokenizer, max_new_tokens: int, batch_size: int):
        from grpoflow.evaluation.settings import generation_settings, with_defaults
        from grpoflow.generation import encode_prompts, render_prompts

        rows = read_rl_rows(parquet, "the demo SFT's validation data (demo.sft.target_accuracy.split)")
        self.tokenizer = tokenizer
        self.prompt_ids = encode_prompts(tokenizer, render_prompts(tokenizer, [r["prompt"] for r in rows]))
        self.truths = [r["reward_model"]["ground_truth"] for r in rows]
        self.gen = generation_settings(
            with_defaults({"preset": "greedy", "max_new_tokens": max_new_tokens, "batch_size": batch_size})
        )

    def accuracy(self, checkpoint: Path) -> float:
        from grpoflow.evaluation import hf_backend
        from grpoflow.evaluation.metrics import score_completion
        from grpoflow.generation import ModelSource, stop_token_ids

        source = ModelSource(name=checkpoint.parent.name, kind="sft", path=str(checkpoint))
        stops = stop_token_ids(self.tokenizer, source)
        completions, _ = hf_backend.generate(source, self.tokenizer, self.prompt_ids, self.gen, stops)
        correct = sum(score_completion(outs[0], truth)["correct"] for outs, truth in zip(completions, self.truths))
        return correct / len(self.truths)


def _save(model, tokenizer, target: Path) -> None:
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    log.info("saved %s", target)


def _training_callback(spec: dict, out: Path, probe: ValidationProbe | None, chosen: dict):
    """Saves global_step_N/huggingface every ``save_steps``; with a probe, evaluates every ``eval_every`` steps and
    stops at the first step in the band (``chosen`` gets the evaluations and the step); stops at ``max_steps``."""
    import torch
    from transformers import TrainerCallback

    max_steps, save_steps = spec["max_steps"], spec["save_steps"]
    target = spec.get("target_accuracy")
    low, high = target["band"] if target else (None, None)
    evaluations = chosen.setdefault("evaluations", [])

    class StopAndSave(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
            step = state.global_step
            path = out / f"global_step_{step}" / HF_SUBDIR
            probing = probe is not None and step % target["eval_every"] == 0
            if step % save_steps == 0 or step >= max_steps or probing:
                _save(model, processing_class, path)
            if probing:
                # Generation must not move the training's random streams: the run is the same with or without probes.
                rng = torch.random.get_rng_state()
                accuracy = probe.accuracy(path)
                torch.random.set_rng_state(rng)
                model.train()
                evaluations.append({"step": step, "accuracy": accuracy})
                log.info(
                    "step %d: greedy accuracy on the validation split %.1f %% (band %g-%g %%)",
                    step,
                    100 * accuracy,
                    100 * low,
                    100 * high,
                )
                if low <= accuracy <= high:
                    chosen["step"] = step
                elif accuracy > high:
                    chosen["overshot_at"] = step
                else:
                    if step % save_steps and step < max_steps:
                        shutil.rmtree(path.parent)  # an evaluation-only save below the band
                if "step" in chosen or "overshot_at" in chosen:
                    control.should_training_stop = True
            if step >= max_steps:
                control.should_training_stop = True
            return control

    return StopAndSave()


def _not_in_band_error(spec: dict, chosen: dict) -> DataError:
    low, high = spec["target_accuracy"]["band"]
    seen = ", ".join(f"step {e['step']} {100 * e['accuracy']:.1f} %" for e in chosen["evaluations"][-4:])
    band = f"demo.sft.target_accuracy.band [{100 * low:g} %, {100 * high:g} %]"
    if "overshot_at" in chosen:
        return DataError(
            f"the demo SFT's validation accuracy jumped over {band} between two evaluations ({seen}): lower demo.sft.target_accuracy.eval_every (now {spec['target_accuracy']['eval_every']}) or widen the band"
        )
    return DataError(
        f"the demo SFT's validation accuracy did not reach {band} within demo.sft.max_steps = {spec['max_steps']} ({seen}): raise demo.sft.max_steps (and schedule_steps) or lower the band"
    )


def run_sft(spec: dict, model_dir: str, train_parquet: str, run_dir: str, val_parquet: str | None = None) -> dict:
    """Train ``model_dir`` on ``train_parquet`` per ``spec`` (the config's ``demo.sft``) into ``run_dir``; with
    ``spec["target_accuracy"]``, stop at the first step whose greedy accuracy on ``val_parquet`` is in its band."""
    schedule_steps = spec.get("schedule_steps") or spec["max_steps"]
    if schedule_steps < spec["max_steps"]:
        raise ConfigError(
            f"config error: demo.sft.schedule_steps = {schedule_steps} is shorter than demo.sft.max_steps = {spec['max_steps']}: make it >= max_steps (or null)"
        )
    target = spec.get("target_accuracy")
    if target and not val_parquet:
        raise ConfigError("config error: demo.sft.target_accuracy needs a validation split: set its split (e.g. val)")

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    dataset = Dataset.from_list(sft_examples(train_parquet))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    probe = ValidationProbe(val_parquet, tokenizer, target["max_new_tokens"], target["batch_size"]) if target else None

    started = time.time()
    chosen: dict = {}
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
            callbacks=[_training_callback(spec, out, probe, chosen)],
        )
        trainer.train()
        if target and "step" not in chosen:
            raise _not_in_band_error(spec, chosen)
        step = chosen.get("step", trainer.state.global_step)
        (out / LATEST_FILE).write_text(f"{step}\n", encoding="utf-8")
        with open(out / "train_log.jsonl", "w", encoding="utf-8") as fh:
            for row in trainer.state.log_history:
                fh.write(json.dumps(row) + "\n")
        start_point = {
            "step": step,
            "chosen_by": "target_accuracy" if target else "max_steps",
            "val_accuracy": next((e["accuracy"] for e in chosen["evaluations"] if e["step"] == step), None),
            "target_accuracy": target,
            "evaluations": chosen["evaluations"],
            "validation": val_parquet,
            "compute": compute_environment(),
        }
        atomic_write_json(out / START_POINT_FILE, start_point)
    summary = {"final_step": step, "seconds": round(time.time() - started, 1), "run_dir": run_dir}
    summary["val_accuracy"] = start_point["val_accuracy"]
    log.info("demo SFT done: %s", json.dumps(summary))
    return summary
