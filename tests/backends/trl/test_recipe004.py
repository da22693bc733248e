"""The shipped recipe-004 config (Qwen2.5-Math-1.5B + LoRA, TRL, binary verifier reward, KL to a reference):
the resolved experiment has the recipe's values, and so do the GRPOConfig and LoraConfig that grpoflow's TRL
backend builds from it."""

from __future__ import annotations

import math

import pytest
from grpoflow_testing import REPO, TINY_SPEC, load_yaml

from grpoflow.config import resolve_config

CONFIG = REPO / "config" / "qwen2.5-math-1.5b-lora-binary.yaml"
NAME = "qwen2.5-math-1.5b-lora-binary"
GSM8K_TRAIN = 7473  # openai/gsm8k main/train: the recipe's data stand-in (config header)


@pytest.fixture(scope="module")
def cfg():
    return resolve_config(load_yaml(CONFIG))


@pytest.fixture(scope="module")
def spec(cfg):
    """The spec train_grpo hands to the TRL runner (the one the Snakefile composes)."""
    from grpoflow.backends.trl.commandline import training_spec

    return training_spec(
        cfg,
        NAME,
        {"train": "train.parquet", "val": None, "sft": "sft.json"},
        {"marker": "m.json", "metrics": "x.jsonl"},
    )


def test_the_experiment_has_the_recipes_values(cfg):
    assert list(cfg.experiments) == [NAME]
    exp = cfg.experiment(NAME)
    grpo = exp["grpo"]
    assert exp["backend"] == "trl" and exp["trl"]["use_cpu"] is False
    assert exp["sft"]["model"] == "Qwen/Qwen2.5-Math-1.5B"
    assert {k: grpo["lora"][k] for k in ("rank", "alpha", "dropout")} == {"rank": 16, "alpha": 32, "dropout": 0.05}
    assert grpo["kl_coef"] == 0.05
    assert grpo["num_generations"] == 2
    assert grpo["learning_rate"] == 5e-6
    assert (grpo["temperature"], grpo["top_p"], grpo["top_k"]) == (0.7, 0.9, -1)
    assert grpo["max_response_length"] == 2048
    # per-device 4 x gradient accumulation 4 = 16 completions per optimizer step = 8 prompts x 2 generations
    assert grpo["prompts_per_step"] * grpo["num_generations"] == 16
    assert exp["trl"]["completions_per_device_batch"] == 4
    # 3 epochs over GSM8K train at 8 prompts per step
    assert grpo["total_steps"] == math.ceil(3 * GSM8K_TRAIN / grpo["prompts_per_step"]) == 2803
    assert exp["rewards"]["funcs"] == ["boxed_binary"] and exp["rewards"]["normalize"] == "none"
    assert exp["rewards"]["params"] == {"boxed_binary": {"correct": 1.0, "wrong": -1.0, "no_answer": -0.5}}
    # The recipe's one 24 GB GPU (its minimum requirement): one training process, vLLM colocated.
    assert exp["resources"]["gpus_per_node"] == 1 and exp["resources"]["nodes"] == 1
    assert exp["resources"]["gpu_mem_gb"] == 24
    assert exp["trl"]["vllm"]["mode"] == "colocate"


def test_lora_trains_the_recipes_share_of_parameters(cfg):
    """ "Only ~0.28 % of parameters are trained": LoRA r 16 on q/k/v/o of Qwen2.5-Math-1.5B (the config's
    architecture, from the model's config.json); all linear layers would be 4.2x as many."""
    from grpoflow.backends.verl.memory import architecture

    exp = cfg.experiment(NAME)
    arch, _ = architecture(exp)
    h, q, kv, r = arch.hidden_size, arch.num_attention_heads * arch.head_dim, arch.num_kv_heads * arch.head_dim, 16
    qkvo = arch.num_layers * r * ((h + q) + 2 * (h + kv) + (q + h))
    assert exp["grpo"]["lora"]["target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert round(100 * qkvo / arch.params, 2) == 0.28
    assert round(arch.lora_params(r) / qkvo, 1) == 4.2


def test_the_prompt_asks_for_a_boxed_answer_and_evaluation_is_greedy_on_gsm8k_test(cfg):
    raw = load_yaml(CONFIG)
    prompt = raw["datasets"]["gsm8k"]["prompt"]
    assert "\\boxed{}" in prompt["system"] + prompt["template"]
    ev = raw["evaluation"]
    assert ev["preset"] == "greedy" and ev["answer_format"]["style"] == "boxed"
    assert ev["benchmarks"] == {"gsm8k_test": {"dataset": "gsm8k", "split": "test"}}
    assert ev["max_new_tokens"] == 2048
    assert set(cfg.models) == {"qwen2.5-math-1.5b", NAME}, "the start model and the trained model are evaluated"


def test_the_binary_reward_scores_correct_wrong_and_no_answer():
    from grpoflow.rewards import RewardSet, Sample

    rewards = RewardSet(resolve_config(load_yaml(CONFIG)).experiment(NAME)["rewards"])
    samples = [
        Sample("6 times 7 is 42, so the answer is $\\boxed{42}$.", "42"),
        Sample("6 times 7 is 43, so the answer is $\\boxed{43}$.", "42"),
        Sample("<think>6 times 7 is", "42"),  # cut off in the reasoning: no final answer
        Sample("6 times 7 is 42. The answer is 42.", "42"),  # right, but not boxed: the recipe reads \\boxed{} only
    ]
    assert rewards.score(samples).total == [1.0, -1.0, -0.5, -0.5]


def test_trl_gets_beta_sampling_and_batch_from_the_config(spec):
    from trl import GRPOConfig

    from grpoflow.backends.trl.runner import grpo_config_kwargs

    kwargs = grpo_config_kwargs(spec)
    assert kwargs["bf16"] is True and kwargs["use_cpu"] is False and kwargs["gradient_checkpointing"] is True
    # TRL refuses bf16 where there is no GPU (this test runs anywhere): only the device switches are changed here.
    import torch

    if not torch.cuda.is_available():
        kwargs = {**kwargs, "bf16": False, "use_cpu": True}
    args = GRPOConfig(**kwargs)
    assert args.beta == 0.05
    assert args.num_generations == 2
    assert (args.temperature, args.top_p) == (0.7, 0.9)
    assert args.max_completion_length == 2048
    assert args.learning_rate == 5e-6
    # One process: per-device 4 x accumulation 4 = 16 completions per optimizer step, as the recipe.
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (4, 4)
    assert args.generation_batch_size * spec["trl"]["processes"] == 16, "one round of 8 prompts x 2 per step"
    assert kwargs["vllm_max_model_length"] == 512 + 2048
    # top_p 0.9 under TRL's importance-sampling correction would scale each token's loss by ~0.9 (refused at load).
    assert kwargs["vllm_importance_sampling_correction"] is False
    assert args.max_steps == 2803 and args.loss_type == "grpo"
    assert args.disable_dropout is False, "TRL would zero the LoRA dropout otherwise"


def test_lora_config(spec):
    from peft import LoraConfig

    from grpoflow.backends.trl.runner import peft_config

    lora = peft_config(spec["grpo"]["lora"])
    assert isinstance(lora, LoraConfig)
    assert (lora.r, lora.lora_alpha, lora.lora_dropout) == (16, 32, 0.05)
    assert lora.target_modules == {"q_proj", "k_proj", "v_proj", "o_proj"} and lora.task_type == "CAUSAL_LM"


def test_the_reference_model_is_the_start_model_with_the_adapter_disabled(spec, tmp_path, default_config):
    """TRL 1.16 with a LoRA config and beta > 0 builds no second model (grpo_trainer.py:983-991): the reference
    log-probs are the policy's with its adapter disabled (2710-2737), which for a fresh adapter (B = 0) is the
    start model. Checked on the tiny model with the recipe's GRPOConfig and LoraConfig (device switches for CPU)."""
    import torch
    from accelerate.utils import is_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl.trainer.utils import use_adapter

    from grpoflow.backends.trl.rewards import build_reward_funcs
    from grpoflow.backends.trl.runner import grpo_config_kwargs, load_prompts, peft_config
    from grpoflow.config import deep_merge
    from grpoflow.data.convert import convert_split
    from grpoflow.data.download import download_dataset
    from grpoflow.demo.tiny import build_tiny_model

    small = {"datasets": {"arith": {"synthetic": {"train_size": 40, "test_size": 8}, "validation": {"size": 4}}}}
    arith = resolve_config(deep_merge(default_config, small)).datasets["arith"]
    manifest = tmp_path / "raw" / "manifest.json"
    download_dataset("arith", arith, str(manifest))
    train = str(tmp_path / "train.parquet")
    convert_split("arith", arith, str(manifest), "train", train, str(tmp_path / "train.summary.json"))
    model_dir = str(tmp_path / "model")
    build_tiny_model(TINY_SPEC, train, model_dir)

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    kwargs = grpo_config_kwargs({**spec, "checkpoint_dir": str(tmp_path / "ckpt")})
    kwargs.update(
        bf16=False, use_cpu=True, gradient_checkpointing=False, model_init_kwargs={"dtype": "float32"}, use_vllm=False
    )
    rewards = build_reward_funcs(spec["rewards"], 2, tokenizer=tokenizer, max_response_length=2048)
    trainer = GRPOTrainer(
        model=model_dir,
        reward_funcs=rewards.reward_funcs,
        args=GRPOConfig(**{**kwargs, **rewards.config_kwargs}),
        train_dataset=load_prompts(train, tokenizer, 512, "test"),
        processing_class=tokenizer,
        peft_config=peft_config(spec["grpo"]["lora"]),
    )
    assert trainer.beta == 0.05 and trainer.ref_model is None and is_peft_model(trainer.model)
    model = trainer.model
    assert "ref" not in model.peft_config, "a fresh adapter: the reference is the adapter disabled, not a copy"
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert lora_b and all(bool((p == 0).all()) for p in lora_b), "LoRA starts at B = 0: adapter off == start model"
    dropouts = [m.p for n, m in model.named_modules() if n.endswith("lora_dropout.default")]
    assert dropouts and set(dropouts) == {0.05}, "TRL keeps the recipe's LoRA dropout (disable_dropout is False)"

    ids = tokenizer("12 + 30 =", return_tensors="pt")["input_ids"]
    start = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        for p in lora_b:  # move the policy away from the start model, as training would
            p.add_(0.05)
        model.eval()
        with use_adapter(model, adapter_name=None):
            reference = model(input_ids=ids).logits
        policy = model(input_ids=ids).logits
        torch.testing.assert_close(reference, start(input_ids=ids).logits)
        assert not torch.allclose(policy, reference)
