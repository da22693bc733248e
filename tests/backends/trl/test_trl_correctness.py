"""TRL runs that would train without learning, or learn less than their settings say (issue 30): refused at config
load or set right, each checked on a config loaded through resolve_config and on TRL's own code.

- truncated sampling (top-p/top-k) under TRL's vLLM importance-sampling correction;
- a step's share per process that is not whole groups of num_generations;
- a constant schedule with a warm-up ratio;
- rollouts of a model whose generation config's EOS is not the chat template's end of turn (Qwen2.5-Math);
- the GPU node's check (grpoflow.gpucheck) in a TRL GPU job;
- TRL's importance-sampling and clipping metrics in train_metrics.jsonl.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from grpoflow_testing import load_shipped
from trainkit import SMALL_ARITH, read_jsonl, resolved

from grpoflow.backends.trl import METRICS
from grpoflow.backends.trl.commandline import command, training_spec
from grpoflow.config import deep_merge, resolve_config
from grpoflow.errors import ConfigError

EXP = "tiny-arith-seed1"
INS = {"train": "t.parquet", "sft": "sft.json"}
OUTS = {"marker": "m.json", "metrics": "x.jsonl"}
# The demo's experiment on a 4-GPU node with vLLM colocated (the GPU default), as test_trl_gpu_config sets it up.
GPU = {"trl": {"use_cpu": False}, "resources": {"gpus_per_node": 4}, "grpo": {"lora": {"rank": 16, "alpha": 32}}}
RECIPE_004 = "config/qwen2.5-math-1.5b-lora-binary.yaml"
RECIPE_002 = "config/qwen3-0.6b-lora-ablations.yaml"


def gpu(default_config, **override):
    return resolved(default_config, {"defaults": deep_merge(json.loads(json.dumps(GPU)), override)})


def refusal(raw: dict) -> str:
    with pytest.raises(ConfigError) as err:
        resolve_config(raw)
    text = str(err.value)
    assert "\n" not in text and text.startswith("config error: "), text
    return text


# ---- 1. truncated sampling with the importance-sampling correction ------------------------------------------------


@pytest.mark.parametrize(
    "grpo, named, fix",
    [
        ({"top_p": 0.9}, "grpo.top_p = 0.9", "grpo.top_p: 1.0"),
        ({"top_k": 20}, "grpo.top_k = 20", "grpo.top_k: -1"),
        ({"top_p": 0.95, "top_k": 20}, "grpo.top_p = 0.95 and grpo.top_k = 20", "grpo.top_p: 1.0, grpo.top_k: -1"),
    ],
)
def test_truncated_sampling_under_the_importance_correction_is_refused(default_config, grpo, named, fix):
    """The other places these settings can be put: test_trl_sampling_routes."""
    with pytest.raises(ConfigError) as err:
        gpu(default_config, grpo=grpo)
    text = str(err.value)
    assert "\n" not in text and "trl.vllm.importance_sampling_correction = true with " in text and named in text
    assert "set trl.vllm.importance_sampling_correction: false" in text and fix in text


def test_truncated_sampling_is_accepted_without_the_correction_or_without_vllm(default_config):
    gpu(default_config, grpo={"top_p": 0.9, "top_k": 20}, trl={"vllm": {"importance_sampling_correction": False}})
    gpu(default_config, grpo={"top_p": 0.9}, trl={"vllm": {"mode": "none"}})  # HF generate: TRL corrects nothing
    resolved(default_config, {"defaults": {"grpo": {"top_p": 0.9}}})  # the CPU demo: no vLLM
    gpu(default_config)  # untruncated sampling keeps TRL's correction


@pytest.mark.parametrize("config, arm", [(RECIPE_004, None), (RECIPE_002, "r16-official-sampling")])
def test_the_shipped_recipes_load_only_with_the_correction_off(config, arm):
    """Recipe 004 (top_p 0.9) and 002's official-sampling arm (top_p 0.95, top_k 20) sample truncated: they load with
    importance_sampling_correction false, and are refused with TRL's default (true)."""
    raw = load_shipped(config)
    cfg = resolve_config(raw)
    names = [n for n in cfg.experiments if arm is None or n.startswith(arm + "-seed")]
    assert names and all(cfg.experiment(n)["trl"]["vllm"]["importance_sampling_correction"] is False for n in names)
    on = {"trl": {"vllm": {"importance_sampling_correction": True}}}
    if arm is None:
        raw = deep_merge(raw, {"defaults": on})
    else:
        raw = deep_merge(raw, {"experiments": {arm: on}})
    assert "trl.vllm.importance_sampling_correction = true with grpo.top_p" in refusal(raw)


def test_the_kept_mass_is_what_trls_correction_multiplies_each_token_by():
    """Why it is refused, on CPU: vLLM's processed_logprobs (TRL 1.16 colocate) are log-softmax after temperature and
    the top-k/top-p mask; the trainer's are over the whole vocabulary. TRL's weight exp(trainer - vLLM) for an
    unchanged policy is then the kept mass, not 1. Mask as transformers' TopPLogitsWarper/TopKLogitsWarper build it."""
    import torch
    from transformers import TopKLogitsWarper, TopPLogitsWarper

    torch.manual_seed(0)
    logits = torch.randn(4, 1000) / 0.7  # temperature 0.7
    full = logits.log_softmax(-1)
    for warper, low, high in ((TopPLogitsWarper(0.9), 0.9 - 1e-6, 1), (TopKLogitsWarper(20), 0, 0.5)):
        kept = warper(None, logits.clone())
        processed = kept.log_softmax(-1)
        token = kept.argmax(-1, keepdim=True)  # any token the sampler can emit
        ratio = (full.gather(-1, token) - processed.gather(-1, token)).exp().squeeze(-1)
        mass = full.exp().masked_fill(kept == float("-inf"), 0).sum(-1)
        torch.testing.assert_close(ratio, mass)
        assert ((ratio >= low) & (ratio < high)).all(), ratio


def test_trls_importance_sampling_and_clipping_metrics_reach_train_metrics(tmp_path):
    """Every sampling/* and clip_ratio/* metric TRL 1.16's GRPOTrainer logs (its source) is in METRICS, and the
    runner's row carries them under the names grpoflow.health reads (is_ratio_mean)."""
    from trl import GRPOTrainer

    from grpoflow.backends.trl.runner import metrics_row

    source = inspect.getsource(GRPOTrainer)
    logged = set(re.findall(r'_metrics\[mode\]\["((?:sampling|clip_ratio)/[^"]+)"\]', source))
    assert {"sampling/importance_sampling_ratio/mean", "clip_ratio/region_mean"} <= logged
    assert logged <= set(METRICS), f"TRL logs {sorted(logged - set(METRICS))}, missing from trl METRICS"
    row = metrics_row(3, {name: 0.5 for name in logged})
    assert row["is_ratio_mean"] == 0.5 and {"is_ratio_min", "is_ratio_max", "clip_ratio_low", "clip_ratio"} <= set(row)


# ---- 2. groups split across processes -----------------------------------------------------------------------------


@pytest.mark.parametrize("gpus", [8, 3])
def test_a_share_of_a_step_that_is_not_whole_groups_is_refused(gpus):
    """Recipe 002's grid (4 prompts × 6) on 8 GPUs gives each process 3 completions (half a group: the length reward
    would be computed over halves), on 3 GPUs 8 (one group and a third)."""
    raw = deep_merge(load_shipped(RECIPE_002), {"defaults": {"resources": {"gpus_per_node": gpus}}})
    text = refusal(raw)
    assert f"trl.processes = {gpus} does not divide grpo.prompts_per_step = 4" in text
    assert "grpo.num_generations = 6" in text


@pytest.mark.parametrize("processes, whole", [(1, True), (2, True), (4, True), (3, False), (8, False)])
def test_trls_sampler_deals_whole_groups_exactly_when_processes_divide_the_prompts(processes, whole):
    """TRL's RepeatSampler with the batch grpoflow gives it (prompts_per_step × G per step), cut into the consecutive
    per-process shares accelerate hands out: whole groups on every process iff trl.processes divides prompts_per_step."""
    from trl.trainer.utils import RepeatSampler

    prompts, G = 4, 6
    completions = prompts * G
    indices = list(RepeatSampler(list(range(40)), mini_repeat_count=G, batch_size=prompts, seed=1))[:completions]
    share = completions // processes
    owners: dict[int, set[int]] = {}
    for rank in range(processes):
        for prompt in indices[rank * share : (rank + 1) * share]:
            owners.setdefault(prompt, set()).add(rank)
    assert len(owners) == prompts and all(indices.count(p) == G for p in owners)
    split = any(len(ranks) > 1 for ranks in owners.values())
    assert (not split) == whole == (prompts % processes == 0)


# ---- 3. a constant schedule with a warm-up ----------------------------------------------------------------------


@pytest.mark.parametrize("scheduler", ["constant", "cosine"])
def test_the_warmup_ratio_warms_up_every_schedule(default_config, scheduler):
    """The learning rate of the first steps as HF Trainer.create_scheduler builds it from the GRPOConfig the runner
    makes (transformers.get_scheduler with args.get_warmup_steps)."""
    import torch
    from transformers import get_scheduler
    from trl import GRPOConfig

    from grpoflow.backends.trl.runner import grpo_config_kwargs

    cfg = resolved(default_config, {"defaults": {"grpo": {"lr_scheduler": scheduler, "lr_warmup_ratio": 0.1}}})
    spec = training_spec(cfg, EXP, INS, OUTS)
    args = GRPOConfig(**{**grpo_config_kwargs(spec), "output_dir": "unused", "report_to": []})
    total = spec["grpo"]["total_steps"]
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=args.learning_rate)
    sched = get_scheduler(args.lr_scheduler_type, opt, args.get_warmup_steps(total), total)
    lrs = []
    for _ in range(40):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    peak, warmup = spec["grpo"]["learning_rate"], 20  # 10 % of the demo's 200 steps
    assert total == 200 and lrs[0] == 0 and lrs[warmup // 2] == pytest.approx(peak / 2)
    assert lrs[warmup] == pytest.approx(peak)
    if scheduler == "constant":
        assert lrs[warmup:] == pytest.approx([peak] * 20)


def test_a_constant_schedule_without_warmup_stays_constant_and_a_full_ratio_is_all_steps(default_config):
    from grpoflow.backends.trl.runner import grpo_config_kwargs

    k = grpo_config_kwargs(training_spec(resolved(default_config), EXP, INS, OUTS))
    assert (k["lr_scheduler_type"], k["warmup_steps"]) == ("constant", 0)
    full = resolved(default_config, {"defaults": {"grpo": {"lr_warmup_ratio": 1.0}}})
    k = grpo_config_kwargs(training_spec(full, EXP, INS, OUTS))
    assert (k["lr_scheduler_type"], k["warmup_steps"]) == ("constant_with_warmup", 200)


# ---- 4. completions that end on <|im_end|> with a model whose EOS is <|endoftext|> --------------------------------


@pytest.fixture(scope="module")
def math_like_model(tmp_path_factory, tiny_model) -> str:
    """Stands in for Qwen2.5-Math-1.5B's tokenizer and generation config: the tiny model with <|endoftext|> as the
    tokenizer's EOS and pad and as generation_config's (and config.json's) only eos_token_id, while its chat
    template ends a turn with <|im_end|>, as Qwen2.5-Math's does."""
    out = tmp_path_factory.mktemp("math-like") / "model"
    shutil.copytree(tiny_model, out)
    tok = json.loads((out / "tokenizer_config.json").read_text())
    tok["eos_token"] = "<|endoftext|>"
    (out / "tokenizer_config.json").write_text(json.dumps(tok))
    from transformers import AutoTokenizer

    eos = AutoTokenizer.from_pretrained(out).convert_tokens_to_ids("<|endoftext|>")
    for name in ("generation_config.json", "config.json"):
        data = json.loads((out / name).read_text())
        data["eos_token_id"] = eos
        (out / name).write_text(json.dumps(data))
    return str(out)


def test_completions_ending_on_im_end_are_not_counted_as_truncated(
    default_config, tmp_path, arith_parquet, math_like_model
):
    """One real GRPO step (TRL's GRPOTrainer on CPU) of the stand-in Qwen2.5-Math model in which every completion
    that reaches the length limit ends on <|im_end|> (HF's forced_eos_token_id, through trl.extra_args); those that
    stop earlier stop on a stop token. None is truncated, so TRL's completions/clipped_ratio must be 0."""
    from transformers import AutoTokenizer

    from grpoflow.backends.trl.runner import run_training
    from grpoflow.discovery import discover_to_file

    im_end = AutoTokenizer.from_pretrained(math_like_model).convert_tokens_to_ids("<|im_end|>")
    sft = tmp_path / "sft.json"
    discover_to_file({"model": math_like_model}, str(sft))
    override = {
        **SMALL_ARITH,
        "defaults": {
            "grpo": {"total_steps": 1, "prompts_per_step": 2, "num_generations": 4, "max_response_length": 8},
            "trl": {"extra_args": {"generation_kwargs": {"forced_eos_token_id": im_end}}},
        },
        "experiments": {EXP: {"checkpoint_dir": str(tmp_path / "ckpt")}},
    }
    cfg = resolved(default_config, override)
    outs = {"marker": str(tmp_path / "m.json"), "metrics": str(tmp_path / "metrics.jsonl")}
    spec = training_spec(cfg, EXP, {"train": arith_parquet["train"], "sft": str(sft)}, outs)
    run_training(json.loads(json.dumps(spec)))
    (row,) = read_jsonl(outs["metrics"])
    assert row["truncated_fraction"] == 0, row
    assert row["response_length_max"] <= 8


# ---- 5. the GPU node's check in a TRL GPU job -------------------------------------------------------------------


def test_a_trl_gpu_job_runs_the_gpu_node_check_and_records_its_failure(default_config, tmp_path):
    """The train_grpo command of a one-process TRL GPU experiment, run as the job runs it, on a node whose
    nvidia-smi (a script on PATH: stands in for the GPU node's) lists no GPU: the job's last line is the check's
    failure, recorded next to the marker (grpoflow.gpucheck.record_path) for the retries, before anything loads."""
    from grpoflow import gpucheck

    cfg = gpu(default_config, trl={"processes": 1})
    outs = {"marker": str(tmp_path / "training_complete.json"), "metrics": str(tmp_path / "x.jsonl")}
    cmd = command(cfg, EXP, {"train": str(tmp_path / "none.parquet"), "sft": str(tmp_path / "none.json")}, outs)
    argv = shlex.split(cmd)
    assert argv[:3] == ["python", "-m", "grpoflow.backends.trl.train"]
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
    (fake / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": "0"}
    proc = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=120, env=env)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert last.startswith("grpoflow: error:") and "train_grpo (backend trl)" in last and "nvidia-smi" in last
    record = gpucheck.record_path(outs["marker"])
    assert record.is_file() and "train_grpo (backend trl)" in record.read_text()
    assert "none.json" not in proc.stderr and not Path(outs["marker"]).exists()
