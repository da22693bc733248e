"""The TRL backend of train_grpo: its command, its config check, and real (short) GRPO runs on CPU that
checkpoint, log per-step metrics, resume after SIGTERM or SIGKILL, and mark completion only at the planned step."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from trainkit import BIN, SMALL_ARITH, read_jsonl, resolved

from grpoflow.backends.trl.ckpt import LIVE_METRICS, is_complete, latest_complete
from grpoflow.backends.trl.commandline import command
from grpoflow.backends.trl.runner import prepare_checkpoint_dir
from grpoflow.checkpoint_record import read_record
from grpoflow.errors import ConfigError

# The module shares one short TRL run (short_run): one worker builds it and runs every test that reads it.
pytestmark = pytest.mark.xdist_group("trl-short-run")


EXP = "tiny-arith-seed1"
# A few seconds per run: 2 prompts × 4 completions of at most 12 tokens per step.
SHORT = {"grpo": {"prompts_per_step": 2, "num_generations": 4, "max_response_length": 12, "learning_rate": 1e-3}}
STEP_KEYS = {
    "step",
    "reward",
    "reward_std",
    "reward/accuracy",
    "accuracy",
    "response_length",
    "response_length_max",
    "truncated_fraction",
    "entropy",
    "loss",
    "learning_rate",
    "grad_norm",
    "time_s",
}


def spec_command(default_config, tmp_path: Path, arith_parquet: dict, sft_json: str, **grpo) -> tuple[str, dict]:
    """The command train_grpo would run for EXP, its outputs under tmp_path."""
    override = {**SMALL_ARITH, "defaults": {**SHORT, "grpo": {**SHORT["grpo"], **grpo}}}
    cfg = resolved(default_config, {**override, "experiments": {EXP: {"checkpoint_dir": str(tmp_path / "ckpt")}}})
    outputs = {"marker": str(tmp_path / "training_complete.json"), "metrics": str(tmp_path / "train_metrics.jsonl")}
    cmd = command(cfg, EXP, {"train": arith_parquet["train"], "val": arith_parquet["val"], "sft": sft_json}, outputs)
    return cmd, {**outputs, "checkpoint_dir": tmp_path / "ckpt"}


def launch(cmd: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    # exec: signals reach the trainer itself, as with SLURM's or Snakemake's kill of the job's process group.
    return subprocess.Popen(
        f"exec {cmd}", shell=True, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def wait_for_checkpoint(proc: subprocess.Popen, ckpt_dir: Path, step: int, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        latest = latest_complete(ckpt_dir)
        if latest and latest[0] >= step:
            return
        assert proc.poll() is None, "training ended before the checkpoint it should be killed after"
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint-{step} after {timeout} s")


# ---- the command and the config check (fast) --------------------------------------------------------------


def test_command_holds_exactly_the_training_settings(default_config):
    ins = {
        "train": "results/data/arith/train.parquet",
        "val": "results/data/arith/val.parquet",
        "sft": f"results/{EXP}/sft.json",
    }
    outs = {"marker": f"results/{EXP}/training_complete.json", "metrics": f"results/{EXP}/train_metrics.jsonl"}

    def cmd(override=None):
        return command(resolved(default_config, override), EXP, ins, outs)

    argv = shlex.split(cmd())
    assert argv[:4] == ["python", "-m", "grpoflow.backends.trl.train", "--spec"] and len(argv) == 5
    spec = json.loads(argv[4])
    assert (
        spec["grpo"]["seed"] == 1
        and spec["checkpoint_dir"] == f"results/{EXP}/checkpoints"
        and spec["sft"] == ins["sft"]
    )
    assert "evaluation" not in spec and "resources" not in spec and "upload" not in spec
    # Evaluation, upload and resource settings do not rerun training; training settings do.
    assert (
        cmd(
            {"evaluation": {"max_new_tokens": 7}, "defaults": {"upload": {"dry_run": True}, "resources": {"mem_mb": 1}}}
        )
        == cmd()
    )
    assert cmd({"defaults": {"grpo": {"learning_rate": 1e-4}}}) != cmd()


@pytest.mark.parametrize(
    "override, match",
    [
        ({"trl": {"completions_per_device_batch": 48}}, "completions_per_device_batch = 48 does not divide the 128"),
        ({"grpo": {"num_generations": 1}}, "num_generations = 1"),
    ],
)
def test_batch_arithmetic_is_checked_when_the_config_loads(default_config, override, match):
    with pytest.raises(ConfigError, match=match):
        resolved(default_config, {"defaults": override})
    resolved(default_config, {"defaults": {"trl": {"completions_per_device_batch": 32}}})


def test_config_maps_onto_grpo_config_and_bad_extra_args_are_config_errors(default_config, tmp_path):
    from grpoflow.backends.trl.runner import grpo_config

    ins = {"train": "t.parquet", "sft": "sft.json"}
    outs = {"marker": "m.json", "metrics": "x.jsonl"}
    cfg = resolved(
        default_config,
        {"defaults": {"grpo": {"clip_ratio_high": 0.28, "top_k": -1}, "trl": {"completions_per_device_batch": 32}}},
    )
    spec = json.loads(shlex.split(command(cfg, EXP, ins, outs))[4])
    args = grpo_config(spec, {"reward_weights": [1.0]})
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.generation_batch_size) == (
        32,
        4,
        128,
    )
    assert (args.num_generations, args.max_steps, args.max_completion_length) == (8, 200, 32)
    assert (args.beta, args.epsilon, args.epsilon_high, args.top_k, args.temperature) == (0.0, 0.2, 0.28, 0, 0.7)
    assert args.use_cpu and not args.bf16 and not args.gradient_checkpointing and args.loss_type == "dapo"
    assert (args.save_steps, args.save_total_limit, args.seed, args.output_dir) == (
        50,
        2,
        1,
        f"results/{EXP}/checkpoints",
    )
    assert args.report_to == [] and args.disable_tqdm  # the progress line replaces tqdm in the job log
    tracked = resolved(default_config, {"defaults": {"grpo": {"report_to": ["tensorboard"]}}})
    assert grpo_config(json.loads(shlex.split(command(tracked, EXP, ins, outs))[4]), {}).report_to == ["tensorboard"]
    spec["trl"]["extra_args"] = {"no_such_option": 1}
    with pytest.raises(ConfigError, match=f"experiments.{EXP}.trl.extra_args: .*no_such_option"):
        grpo_config(spec, {})


# ---- real training -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def short_run(default_config, tmp_path_factory, arith_parquet, tiny_sft_json):
    """A complete 3-step run (checkpoints every 2 steps), exactly as the rule runs it."""
    tmp = tmp_path_factory.mktemp("grpo")
    cmd, paths = spec_command(default_config, tmp, arith_parquet, tiny_sft_json, total_steps=3, save_freq=2)
    proc = launch(cmd, tmp / "log")
    assert proc.wait(timeout=300) == 0, (tmp / "log").read_text()[-3000:]
    return cmd, paths


@pytest.mark.slow
def test_run_writes_metrics_marker_and_self_contained_checkpoints(short_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, paths = short_run
    rows = read_jsonl(paths["metrics"])
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(STEP_KEYS <= set(r) for r in rows), set(rows[0])
    assert rows == read_jsonl(paths["checkpoint_dir"] / LIVE_METRICS)

    marker = json.loads(Path(paths["marker"]).read_text())
    assert marker["experiment"] == EXP and marker["backend"] == "trl"
    assert marker["planned_steps"] == marker["final_step"] == 3
    assert marker["metrics_summary"] == rows[-1] and marker["checkpoint_format"] == "hf_model"
    assert marker["provenance"]["config_hash"] and "trl" in marker["provenance"]["packages"]
    final = Path(marker["final_checkpoint"])
    assert final == paths["checkpoint_dir"] / "checkpoint-3" and is_complete(final, 3)
    assert (paths["checkpoint_dir"] / "checkpoint-2").is_dir()
    for name in (
        "model.safetensors",
        "tokenizer.json",
        "chat_template.jinja",
        "generation_config.json",
        "optimizer.pt",
    ):
        assert (final / name).is_file(), name
    assert AutoTokenizer.from_pretrained(final).chat_template
    AutoModelForCausalLM.from_pretrained(final)


@pytest.mark.slow
def test_job_log_has_one_progress_line_per_step(short_run):
    _, paths = short_run
    log = (Path(paths["marker"]).parent / "log").read_text()
    lines = [ln.split(": ", 1)[1] for ln in log.splitlines() if "grpoflow.backends.trl.runner: step " in ln]
    assert [ln.split(" | ")[0] for ln in lines] == ["step 1/3 (33%)", "step 2/3 (66%)", "step 3/3 (100%)"], log[-2000:]
    assert all(" | reward " in ln and " | accuracy " in ln and " s/step | ETA " in ln for ln in lines), lines


@pytest.mark.slow
def test_resume_refuses_checkpoints_trained_with_other_settings(short_run, tmp_path):
    cmd, paths = short_run
    spec = json.loads(shlex.split(cmd)[4])
    ckpt = tmp_path / "ckpt"
    shutil.copytree(paths["checkpoint_dir"], ckpt)
    spec["checkpoint_dir"] = str(ckpt)
    model = json.loads(Path(spec["sft"]).read_text())["path"]

    changed = {**spec, "grpo": {**spec["grpo"], "learning_rate": 0.5}}
    where = f"experiments.{EXP}"
    # Finished: refused even when opted in (nothing would be trained; it would only relabel the weights).
    for opt_in in (False, True):
        with pytest.raises(ConfigError) as err:
            prepare_checkpoint_dir({**changed, "resume_across_changes": opt_in}, model)
        assert str(err.value) == (
            f"config error: {ckpt} holds checkpoints (up to step 3) trained with other settings: grpo.learning_rate 0.001 -> 0.5; that run "
            f"is finished, so continuing would train nothing and only relabel its weights: set {where}.checkpoint_dir to a fresh dir "
            "to train from the start, or restore those settings"
        )
    with pytest.raises(ConfigError, match="total_steps = 2 but .*checkpoint-3 is already past it"):
        prepare_checkpoint_dir({**spec, "grpo": {**spec["grpo"], "total_steps": 2}}, model)
    # More steps (or another save frequency) continue the same run.
    longer = {**spec, "grpo": {**spec["grpo"], "total_steps": 10, "save_freq": 5}}
    assert prepare_checkpoint_dir(longer, model) == (3, ckpt / "checkpoint-3")
    # Not finished: refused naming the change and the two ways on; opted in, it continues and the record keeps the old settings.
    with pytest.raises(
        ConfigError,
        match=rf"grpo.learning_rate 0.001 -> 0.5: set {where}.checkpoint_dir to a fresh dir to train from the start, "
        rf"or set {where}.resume_across_changes: true to continue from step 3 under the new settings$",
    ):
        prepare_checkpoint_dir({**changed, "grpo": {**changed["grpo"], "total_steps": 10}}, model)
    assert prepare_checkpoint_dir(
        {**changed, "grpo": {**changed["grpo"], "total_steps": 10}, "resume_across_changes": True}, model
    ) == (3, ckpt / "checkpoint-3")
    history = read_record(ckpt)["history"]
    assert [(h["up_to_step"], h["identity"]["settings"]["grpo"]["learning_rate"]) for h in history] == [(3, 1e-3)]


@pytest.mark.slow
def test_new_data_or_start_model_under_the_same_paths_is_refused(short_run, tmp_path):
    """The record identifies the data and the start model by content: new files under the same paths are not "nothing
    left to train"."""
    cmd, paths = short_run
    spec = json.loads(shlex.split(cmd)[4])
    shutil.copytree(paths["checkpoint_dir"], tmp_path / "ckpt")
    data, model = tmp_path / "train.parquet", tmp_path / "model"
    shutil.copy(spec["train"], data)
    shutil.copytree(json.loads(Path(spec["sft"]).read_text())["path"], model)
    spec.update(checkpoint_dir=str(tmp_path / "ckpt"), train=str(data))  # the same content elsewhere: the same run
    assert prepare_checkpoint_dir(spec, str(model)) == (3, tmp_path / "ckpt" / "checkpoint-3")
    with open(data, "ab") as fh:
        fh.write(b"\0")
    with pytest.raises(
        ConfigError, match="trained with other settings: the training data's content; that run is finished"
    ):
        prepare_checkpoint_dir(spec, str(model))
    shutil.copy(json.loads(shlex.split(cmd)[4])["train"], data)
    (model / "generation_config.json").write_text(json.dumps({"do_sample": True}))
    with pytest.raises(
        ConfigError,
        match=r"trained with other settings: the start model \(generation_config.json differ\); that run is finished",
    ):
        prepare_checkpoint_dir(spec, str(model))


@pytest.mark.slow
def test_rerun_after_the_last_step_rewrites_the_outputs_without_training(short_run, tmp_path):
    cmd, paths = short_run
    spec = json.loads(shlex.split(cmd)[4])
    shutil.copytree(paths["checkpoint_dir"], tmp_path / "ckpt")
    spec.update(
        checkpoint_dir=str(tmp_path / "ckpt"), marker=str(tmp_path / "marker.json"), metrics=str(tmp_path / "m.jsonl")
    )
    proc = launch(f"python -m grpoflow.backends.trl.train --spec {shlex.quote(json.dumps(spec))}", tmp_path / "log")
    assert proc.wait(timeout=120) == 0, (tmp_path / "log").read_text()[-3000:]
    assert "nothing left to train" in (tmp_path / "log").read_text()
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    assert read_jsonl(tmp_path / "m.jsonl") == read_jsonl(paths["metrics"])
    assert json.loads((tmp_path / "marker.json").read_text())["final_step"] == 3


@pytest.mark.slow
def test_sigterm_and_sigkill_then_reruns_resume_to_the_same_final_step(
    default_config, tmp_path, arith_parquet, tiny_sft_json
):
    total = 24
    cmd, paths = spec_command(default_config, tmp_path, arith_parquet, tiny_sft_json, total_steps=total, save_freq=4)
    ckpt, marker, metrics = paths["checkpoint_dir"], Path(paths["marker"]), Path(paths["metrics"])

    # 1. SIGTERM (SLURM's time limit, Ctrl-C): the step finishes, a checkpoint is saved, exit 1, no marker.
    proc = launch(cmd, tmp_path / "log1")
    wait_for_checkpoint(proc, ckpt, 4)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=120) == 1
    stopped, _ = latest_complete(ckpt)
    assert 4 <= stopped < total
    last_line = (tmp_path / "log1").read_text().strip().splitlines()[-1]
    assert (
        last_line.startswith("grpoflow: error: ")
        and f"stopped at step {stopped} of grpo.total_steps = {total}" in last_line
    )
    assert not marker.exists() and not metrics.exists()
    assert [r["step"] for r in read_jsonl(ckpt / LIVE_METRICS)] == list(range(1, stopped + 1))

    # 2. SIGKILL mid-run: nothing is saved on the way out; the rerun continues from the last periodic checkpoint.
    proc = launch(cmd, tmp_path / "log2")
    wait_for_checkpoint(proc, ckpt, stopped + 4)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert "resuming from" in (tmp_path / "log2").read_text() and not marker.exists()

    # 3. The final rerun completes: every step logged exactly once, marker at the planned step.
    proc = launch(cmd, tmp_path / "log3")
    assert proc.wait(timeout=300) == 0, (tmp_path / "log3").read_text()[-3000:]
    assert [r["step"] for r in read_jsonl(metrics)] == list(range(1, total + 1))
    done = json.loads(marker.read_text())
    assert done["final_step"] == done["planned_steps"] == total
    assert done["final_checkpoint"] == str(ckpt / f"checkpoint-{total}")


@pytest.mark.slow
def test_lora_checkpoints_hold_the_peft_adapter(default_config, tmp_path, arith_parquet, tiny_sft_json):
    cmd, paths = spec_command(
        default_config, tmp_path, arith_parquet, tiny_sft_json, total_steps=2, save_freq=2, lora={"rank": 4, "alpha": 8}
    )
    proc = launch(cmd, tmp_path / "log")
    assert proc.wait(timeout=300) == 0, (tmp_path / "log").read_text()[-3000:]
    marker = json.loads(Path(paths["marker"]).read_text())
    final = Path(marker["final_checkpoint"])
    assert marker["checkpoint_format"] == "peft_adapter"
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "chat_template.jinja"} <= set(
        os.listdir(final)
    )
    assert json.loads((final / "adapter_config.json").read_text())["r"] == 4
