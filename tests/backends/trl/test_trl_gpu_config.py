"""TRL on GPUs, checked where it is cheap: the config-load checks grpoflow owns (processes, vLLM layout, batch
split, bf16 masters, GPU memory), the launcher in the command, and the GRPOConfig the runner builds from them."""

from __future__ import annotations

import json
import shlex

import pytest
from trainkit import resolved

from grpoflow.backends.trl.commandline import command, micro_batch, processes, training_spec, vllm_mode
from grpoflow.backends.trl.runner import grpo_config_kwargs
from grpoflow.errors import ConfigError

EXP = "tiny-arith-seed1"
INS = {"train": "t.parquet", "sft": "sft.json"}
OUTS = {"marker": "m.json", "metrics": "x.jsonl"}
# The demo's experiment (16 prompts × 8 = 128 completions per step) moved onto a 4-GPU node as a Qwen3-0.6B LoRA run.
GPU = {
    "trl": {"use_cpu": False},
    "resources": {"gpus_per_node": 4, "mem_mb": 200000},
    "architecture": "qwen3-0.6b",
    "grpo": {"lora": {"rank": 16, "alpha": 32}},
}


def gpu(default_config, **override):
    from grpoflow.config import deep_merge

    return resolved(default_config, {"defaults": deep_merge(json.loads(json.dumps(GPU)), override)})


def test_gpu_defaults_colocate_vllm_on_one_process_per_gpu(default_config):
    cfg = gpu(default_config)
    exp = cfg.experiment(EXP)
    assert (vllm_mode(exp), processes(exp), micro_batch(exp)) == ("colocate", 4, 32)
    cpu = resolved(default_config).experiment(EXP)
    assert (vllm_mode(cpu), processes(cpu)) == ("none", 1)


@pytest.mark.parametrize(
    "override, message",
    [
        ({"trl": {"vllm": {"mode": "bogus"}}}, "trl.vllm.mode"),
        (
            {"trl": {"vllm": {"tensor_parallel_size": 3}}},
            "trl.vllm.tensor_parallel_size = 3 does not divide trl.processes = 4",
        ),
        ({"trl": {"processes": 3}}, "trl.processes = 3 does not divide the 128 completions of a step"),
        ({"trl": {"processes": 8}}, "trl.processes = 8 exceeds resources.gpus_per_node = 4"),
        (
            {"trl": {"completions_per_device_batch": 64}},
            "trl.completions_per_device_batch = 64 does not divide the 32 completions each of the 4 process(es)",
        ),
        ({"resources": {"nodes": 2}}, "resources.nodes = 2: the TRL backend trains on one node"),
        ({"resources": {"gpus_per_node": 0}}, "resources.gpus_per_node = 0 with trl.use_cpu false"),
        (
            {"grpo": {"lora": {"rank": 0}}, "trl": {"param_dtype": "bfloat16"}},
            "trl.param_dtype = bfloat16 for a full fine-tune",
        ),
        ({"resources": {"gpu_mem_gb": 4}}, "resources.gpu_mem_gb = 4: the estimated peak per GPU at update"),
    ],
)
def test_a_bad_trl_gpu_setting_is_refused_in_one_line_naming_the_key(default_config, override, message):
    with pytest.raises(ConfigError) as err:
        gpu(default_config, **override)
    text = str(err.value)
    # Schema errors name where the key was written (defaults.…), cross-checks the experiment.
    assert "\n" not in text and text.startswith("config error: ") and message in text, text


def test_cpu_runs_keep_vllm_off_unless_asked_and_may_use_several_gloo_processes(default_config):
    with pytest.raises(ConfigError, match=r"trl.vllm.mode = server with trl.use_cpu true"):
        resolved(default_config, {"defaults": {"trl": {"vllm": {"mode": "server"}}}})
    exp = resolved(default_config, {"defaults": {"trl": {"processes": 2}}}).experiment(EXP)
    assert (processes(exp), micro_batch(exp)) == (2, 64)


def test_opt_ins_accept_bf16_masters_and_skip_the_memory_refusal(default_config):
    gpu(
        default_config,
        grpo={"lora": {"rank": 0}},
        trl={"param_dtype": "bfloat16"},
        checks={"allow_bf16_master_weights": True},
    )
    gpu(default_config, resources={"gpu_mem_gb": 4}, checks={"gpu_memory": False})


def test_the_command_checks_the_environment_then_launches_torchrun(default_config):
    cmd = command(gpu(default_config), EXP, INS, OUTS)
    # A brace group, so that the rule's `> {log} 2>&1` takes both commands.
    assert cmd.startswith("{ ") and cmd.endswith("; }")
    argv = shlex.split(cmd[2:-3])
    check = argv.index("&&")
    assert argv[:check] == ["python", "-m", "grpoflow.envcheck", "train-trl-gpu", "colocate", "lora"]
    assert argv[check + 1 : check + 11] == [
        "python",
        "-m",
        "grpoflow.backends.trl.launch",
        "--nproc-per-node",
        "4",
        "--shutdown-timeout",
        "900",
        "--",
        "-m",
        "grpoflow.backends.trl.train",
    ]
    spec = json.loads(argv[-1])
    assert spec["trl"]["processes"] == 4 and spec["trl"]["vllm"]["mode"] == "colocate"
    one = shlex.split(command(gpu(default_config, trl={"processes": 1}), EXP, INS, OUTS))
    assert one[:4] == ["python", "-m", "grpoflow.backends.trl.train", "--spec"]  # it checks itself at its start
    cpu = command(resolved(default_config, {"defaults": {"trl": {"processes": 2}}}), EXP, INS, OUTS)
    assert cpu.startswith("python -m grpoflow.backends.trl.launch --nproc-per-node 2 --shutdown-timeout 900 -- -m")


def test_grpo_config_gets_the_vllm_settings_and_the_global_batch_of_any_process_count(default_config):
    def kwargs(**trl):
        cfg = gpu(default_config, trl=trl)
        return grpo_config_kwargs(training_spec(cfg, EXP, INS, OUTS))

    k = kwargs()
    assert (k["use_vllm"], k["vllm_mode"], k["vllm_gpu_memory_utilization"], k["vllm_tensor_parallel_size"]) == (
        True,
        "colocate",
        0.3,
        1,
    )
    grpo = gpu(default_config).experiment(EXP)["grpo"]
    assert (
        k["vllm_max_model_length"] == grpo["max_prompt_length"] + grpo["max_response_length"]
        and k["vllm_importance_sampling_correction"] is True
    )
    assert k["bf16"] and k["gradient_checkpointing"] and k["model_init_kwargs"]["dtype"] == "auto"  # LoRA: bf16 base
    # TRL's generation batch = per-device batch × processes × accumulation steps: 128 completions for every count.
    for n in (1, 2, 4):
        k = kwargs(processes=n, completions_per_device_batch=16)
        assert k["per_device_train_batch_size"] * n * k["gradient_accumulation_steps"] == 128
    full = grpo_config_kwargs(training_spec(gpu(default_config, grpo={"lora": {"rank": 0}}), EXP, INS, OUTS))
    assert full["model_init_kwargs"]["dtype"] == "float32", "a full fine-tune keeps fp32 masters under bf16 autocast"
    off = grpo_config_kwargs(training_spec(gpu(default_config, trl={"vllm": {"mode": "none"}}), EXP, INS, OUTS))
    assert off["use_vllm"] is False and "vllm_mode" not in off


def test_the_gpu_memory_estimate_counts_what_trl_holds(default_config):
    from grpoflow.backends.trl.commandline import memory_estimate

    def peak(**override):
        b = memory_estimate(EXP, gpu(default_config, checks={"gpu_memory": False}, **override).experiment(EXP))
        return b.peak.terms

    lora = peak()
    assert lora["reference"] == 0, "LoRA: the reference is the policy with its adapter disabled"
    assert lora["vLLM (util × memory + graphs)"] == pytest.approx(0.3 * 80 * 81559 / 1024 / 80 + 1.0)
    assert lora["weights"] == pytest.approx((0.596e9 * 2 + 10.1e6 * 4) / 2**30, rel=0.02)
    full = peak(grpo={"lora": {"rank": 0}, "kl_coef": 0.01})
    P = 0.596e9
    assert full["weights"] == pytest.approx(P * 4 / 2**30, rel=0.02) and full["reference"] == full["weights"]
    assert full["AdamW state"] == pytest.approx(2 * full["weights"])
    assert peak(trl={"vllm": {"mode": "none"}})["vLLM (util × memory + graphs)"] == 0


def test_rollouts_stop_on_the_tokens_evaluation_stops_on(default_config, tiny_model):
    """Rollouts stop at the chat template's <|im_end|> and at <|endoftext|> whatever the model's generation config
    lists (Qwen2.5-Math's lists only the latter): HF generate gets them as eos_token_id, vLLM as stop_token_ids."""
    from transformers import AutoTokenizer

    from grpoflow.backends.trl.runner import stop_kwargs

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    vocab = tokenizer.get_vocab()
    chatml = {vocab["<|im_end|>"], vocab["<|endoftext|>"]}
    on_gpu = stop_kwargs(training_spec(gpu(default_config), EXP, INS, OUTS), tokenizer, tiny_model)
    on_cpu = stop_kwargs(training_spec(resolved(default_config), EXP, INS, OUTS), tokenizer, tiny_model)
    assert set(on_gpu["stop_token_ids"]) >= chatml and set(on_cpu["eos_token_id"]) >= chatml
