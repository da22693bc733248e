"""The GPU-memory fit check and the bf16 master-weight check (grpoflow.backends.verl.memory), calibrated against
configurations verl publishes as running on 80 GB GPUs, and the shipped configs.

Print the numbers: ``PYTHONPATH=src .venv/bin/pytest -q -s tests/backends/verl/test_memory.py -k calibration``."""

from __future__ import annotations

import pytest
from grpoflow_testing import require
from verlkit import VERL_CONFIGS, load

from grpoflow.backends.verl import memory
from grpoflow.config import deep_merge, resolve_config
from grpoflow.errors import ConfigError

BASE = "config/qwen3-8b-gsm8k.yaml"
QWEN2_5_32B = {
    "hidden_size": 5120,
    "num_layers": 64,
    "num_attention_heads": 40,
    "num_kv_heads": 8,
    "head_dim": 128,
    "intermediate_size": 27648,
    "vocab_size": 152064,
    "tie_word_embeddings": False,
}  # Qwen/Qwen2.5-32B config.json
QWEN2_7B = {
    "hidden_size": 3584,
    "num_layers": 28,
    "num_attention_heads": 28,
    "num_kv_heads": 4,
    "head_dim": 128,
    "intermediate_size": 18944,
    "vocab_size": 152064,
    "tie_word_embeddings": False,
}  # Qwen/Qwen2-7B-Instruct config.json


def experiment(override: dict, base: str = BASE):
    cfg = resolve_config(deep_merge(load(base), {"defaults": override}))
    ((name, exp),) = cfg.experiments.items()
    return name, exp


def verl_example(
    *,
    arch,
    nodes,
    prompts,
    mini,
    micro,
    logprob_micro,
    prompt_len,
    response_len,
    tp,
    util,
    n,
    param_offload=False,
    optimizer_offload=False,
    extra=(),
):
    """A verl example script's settings as a grpoflow experiment (GRPO with the KL loss 0.001, lr 1e-6, fp32
    master weights, temperature 1, reference offloaded: what those scripts set or leave at verl's default)."""
    return {
        "architecture": arch,
        "grpo": {
            "prompts_per_step": prompts,
            "num_generations": n,
            "learning_rate": 1e-6,
            "lr_scheduler": "constant",
            "lr_warmup_ratio": 0.0,
            "kl_coef": 0.001,
            "temperature": 1.0,
            "top_k": -1,
            "max_prompt_length": prompt_len,
            "max_response_length": response_len,
        },
        "verl": {
            "model_dtype": "fp32",
            "ppo_mini_batch_size": mini,
            "ppo_micro_batch_size_per_gpu": micro,
            "log_prob_micro_batch_size_per_gpu": logprob_micro,
            "use_dynamic_bsz": bool(extra),
            "entropy_coeff": 0.0,
            "param_offload": param_offload,
            "optimizer_offload": optimizer_offload,
            "gradient_checkpointing": True,
            "rollout": {"tensor_model_parallel_size": tp, "gpu_memory_utilization": util},
            "extra_overrides": list(extra),
        },
        "resources": {"nodes": nodes, "gpus_per_node": 8, "gpu_mem_gb": 80},
    }


# Configurations verl publishes as running on 8-GPU nodes of 80 GB cards, each with the script it comes from.
CALIBRATION = {
    # verl-project/verl 1dda039b9c (40 commits after v0.9.0), examples/grpo_trainer/run_qwen3_8b_fsdp.sh, GPU
    # defaults: 1 x 8 GPUs, no actor offload, dynamic batch size 24576 tokens/GPU, prompt 1024 + response 2048.
    "qwen3-8b fsdp (verl 0.9 example, 1x8)": verl_example(
        arch="qwen3-8b",
        nodes=1,
        prompts=1024,
        mini=256,
        micro=4,
        logprob_micro=4,
        prompt_len=1024,
        response_len=2048,
        tp=2,
        util=0.6,
        n=5,
        extra=[
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24576",
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=24576",
        ],
    ),
    # volcengine/verl b178a3cd56 (2026-01), examples/grpo_trainer/run_qwen3-8b.sh ("Tested successfully"): 1 x 8 GPUs,
    # micro-batches of 32, prompt 512 + response 1024, no actor offload.
    "qwen3-8b micro 32 (verl example, 1x8)": verl_example(
        arch="qwen3-8b",
        nodes=1,
        prompts=1024,
        mini=256,
        micro=32,
        logprob_micro=32,
        prompt_len=512,
        response_len=1024,
        tp=2,
        util=0.6,
        n=5,
    ),
    # volcengine/verl b178a3cd56, examples/grpo_trainer/run_qwen2-7b.sh: Qwen2-7B on 1 x 8 GPUs, micro-batches of 40,
    # prompt 512 + response 1024, no actor offload (the tightest: 40 x 1536 tokens of logits at log-prob time).
    "qwen2-7b micro 40 (verl example, 1x8)": verl_example(
        arch=QWEN2_7B,
        nodes=1,
        prompts=1024,
        mini=256,
        micro=40,
        logprob_micro=40,
        prompt_len=512,
        response_len=1024,
        tp=2,
        util=0.6,
        n=5,
    ),
    # verl-project/verl 1dda039b9c, examples/grpo_trainer/run_qwen2_5_32b_fsdp.sh: Qwen2.5-32B on 2 x 8 GPUs, no actor
    # offload, micro-batches of 2, prompt 1024 + response 1024 (padded: use_remove_padding=False), vLLM TP 8 at 0.4.
    "qwen2.5-32b fsdp (verl 0.9 example, 2x8)": verl_example(
        arch=QWEN2_5_32B,
        nodes=2,
        prompts=1024,
        mini=128,
        micro=2,
        logprob_micro=2,
        prompt_len=1024,
        response_len=1024,
        tp=8,
        util=0.4,
        n=5,
    ),
}


@pytest.mark.parametrize("label", list(CALIBRATION))
def test_calibration_verls_published_configs_fit(label):
    name, exp = experiment(CALIBRATION[label])  # resolving runs the check: a refusal raises here
    b = memory.estimate(name, exp)
    print(f"\n{label}: {b.line()}")
    assert b.fits and b.margin > 2.0, b.line()


def test_the_flagships_old_settings_are_refused_naming_the_keys_to_change():
    old = {
        "verl": {"model_dtype": "bf16", "param_offload": False, "optimizer_offload": False, "offload_policy": False},
        "checks": {"allow_bf16_master_weights": True},
        "resources": {"cpus_per_task": 240, "mem_mb": 480000},
    }
    with pytest.raises(ConfigError) as err:
        experiment(old, base="config/qwen3-32b-gsm8k.yaml")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("config error: experiments.qwen3-32b-gsm8k.resources.gpu_mem_gb = 80")
    assert "at rollout (vLLM awake, from step 2) is 89.7 GiB of 79.6" in msg
    assert (
        "verl.param_offload/optimizer_offload: true" in msg and "verl.rollout.gpu_memory_utilization (now 0.8)" in msg
    )
    # With the opt-out the same settings load, and the estimate is still there to read.
    name, exp = experiment(deep_merge(old, {"checks": {"gpu_memory": False}}), base="config/qwen3-32b-gsm8k.yaml")
    b = memory.estimate(name, exp)
    assert not b.fits and b.peak.terms["AdamW state"] == pytest.approx(15.26, abs=0.01)


def test_bf16_master_weights_at_a_small_learning_rate_are_refused_unless_opted_in():
    with pytest.raises(
        ConfigError,
        match=r"verl.model_dtype = bf16 .*grpo.learning_rate = 1e-06: .*6.1e-05.*checks.allow_bf16_master_weights: true",
    ):
        experiment({"verl": {"model_dtype": "bf16"}, "grpo": {"learning_rate": 1e-6}})
    experiment(
        {
            "verl": {"model_dtype": "bf16"},
            "grpo": {"learning_rate": 1e-6},
            "checks": {"allow_bf16_master_weights": True},
        }
    )
    experiment({"verl": {"model_dtype": "bf16"}, "grpo": {"learning_rate": 1e-4}})  # above the spacing: accepted


def test_bf16_spacing_matches_torch():
    torch = require("torch")
    w = torch.tensor(memory.TYPICAL_WEIGHT, dtype=torch.bfloat16)
    half = memory.bf16_half_spacing(memory.TYPICAL_WEIGHT)
    assert (w + torch.tensor(half * 0.9, dtype=torch.bfloat16)).item() == w.item()  # rounds back: lost
    assert (w + torch.tensor(half * 2.1, dtype=torch.bfloat16)).item() != w.item()
    assert memory.bf16_update_lost(1e-6) and memory.bf16_update_lost(3e-6) and not memory.bf16_update_lost(1e-4)


def test_qwen3_presets_have_the_published_parameter_counts():
    # Model cards: Qwen3-0.6B 0.6 B, 8B 8.2 B, 14B 14.8 B, 32B 32.8 B parameters.
    counts = {k: a.params / 1e9 for k, a in memory.PRESETS.items()}
    assert counts["qwen3-0.6b"] == pytest.approx(0.6, abs=0.05)
    assert counts["qwen3-8b"] == pytest.approx(8.2, abs=0.05)
    assert counts["qwen3-14b"] == pytest.approx(14.8, abs=0.05)
    assert counts["qwen3-32b"] == pytest.approx(32.8, abs=0.05)


def test_offload_moves_only_the_rollout_phase():
    _, on = experiment({})
    _, off = experiment({"verl": {"param_offload": True, "optimizer_offload": True}})
    a, b = memory.estimate("x", on), memory.estimate("x", off)
    phase = lambda br, prefix: next(p for p in br.phases if p.name.startswith(prefix))  # noqa: E731
    assert phase(b, "rollout").total < phase(a, "rollout").total - 20  # params + AdamW state left the GPU
    assert phase(b, "update").total == pytest.approx(phase(a, "update").total)  # verl loads them back to train


@pytest.mark.parametrize("path", VERL_CONFIGS)
def test_shipped_configs_fit_with_their_breakdown(path):
    cfg = resolve_config(load(path))
    for name, exp in cfg.experiments.items():
        b = memory.estimate(name, exp)
        print(f"\n{path}: {b.line()}")
        assert b.fits and b.margin > 5 and b.host_fits
        assert exp["resources"]["cpus_per_task"] <= 192
        text = memory.summary(name, exp)
        assert "margin +" in text and f"loses up to {exp['grpo']['save_freq']} steps" in text


def test_unknown_architecture_is_said_not_checked():
    _, exp = experiment({"sft": {"model": "/models/my-model", "name": "mine"}, "architecture": None})
    assert memory.estimate("x", exp) is None
    assert "GPU memory not checked: set architecture" in memory.summary("x", exp)


@pytest.mark.parametrize("path", VERL_CONFIGS)
def test_the_training_log_repeats_the_estimate_from_verls_command_line(path, tmp_path):
    """The wrapper logs from_overrides(verl's argv, the model's config.json): the same numbers as at config load."""
    import json

    from grpoflow.backends.verl import commandline as vc
    from grpoflow.backends.verl.train import parse_overrides
    from grpoflow.backends.verl.validate import training_inputs

    cfg = resolve_config(load(path))
    for name, exp in cfg.experiments.items():
        a = memory.PRESETS[exp["architecture"]]
        (tmp_path / "config.json").write_text(
            json.dumps(
                {
                    "hidden_size": a.hidden_size,
                    "num_hidden_layers": a.num_layers,
                    "num_attention_heads": a.num_attention_heads,
                    "num_key_value_heads": a.num_kv_heads,
                    "head_dim": a.head_dim,
                    "intermediate_size": a.intermediate_size,
                    "vocab_size": a.vocab_size,
                    "tie_word_embeddings": a.tie_word_embeddings,
                }
            )
        )
        ov = parse_overrides(vc.trainer_argv(cfg, name, training_inputs(cfg, name), str(tmp_path), "/wd"))
        at_load = memory.estimate(name, exp)
        line = memory.from_overrides(ov, gpu_mem_gb=80, mem_mb=exp["resources"]["mem_mb"])
        assert f"= {at_load.peak.total:.1f} GiB of 79.6, margin {at_load.margin:+.1f} GiB, fits" in line, line
        assert str(tmp_path / "config.json") in line
    assert "not estimated" in memory.from_overrides({"actor_rollout_ref.model.path": str(tmp_path / "missing")})


def test_snakemake_dry_run_refuses_the_old_flagship_settings_in_one_line(tmp_path):
    import json

    from grpoflow_testing import make_workdir, snakemake

    wd = make_workdir(tmp_path)
    old = {
        "defaults": {
            "verl": {"model_dtype": "bf16", "offload_policy": False},
            "resources": {"cpus_per_task": 240, "mem_mb": 480000},
        }
    }
    for extra, cause in (
        ({}, "verl.model_dtype = bf16"),
        ({"checks": {"allow_bf16_master_weights": True}}, "resources.gpu_mem_gb = 80: the estimated peak"),
    ):
        path = tmp_path / "old.yaml"
        path.write_text(
            json.dumps(deep_merge(load("config/qwen3-32b-gsm8k.yaml"), deep_merge(old, {"defaults": extra})))
        )
        proc = snakemake(["-n", "--configfile", str(path)], wd, check=False)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode != 0 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert lines[0].startswith(f"grpoflow: config error: experiments.qwen3-32b-gsm8k.{cause}"), lines[0]
