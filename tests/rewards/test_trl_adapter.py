"""The TRL adapter through TRL 1.16's own GRPOTrainer: its reward-calling code (``_calculate_rewards``: the
kwargs it passes, completion_ids, log_metric) and its weighted sum, which must equal grpoflow's combined reward
(z-normalised per prompt when configured), the same numbers the verl path produces."""

from __future__ import annotations

import pytest
import torch
from grpoflow_testing import require

require("trl")

from rewardkit import KAGGLE, TEXTS, B  # noqa: E402

from grpoflow.backends.trl.rewards import ZNORM_FUNC, build_reward_funcs, completion_text  # noqa: E402
from grpoflow.errors import GrpoflowError  # noqa: E402
from grpoflow.rewards import RewardSet, Sample, contiguous_groups  # noqa: E402

G = 4


@pytest.fixture(scope="module")
def trainer_factory(tokenizer, tmp_path_factory):
    from datasets import Dataset
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(
        Qwen3Config(
            vocab_size=len(tokenizer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=8,
            max_position_embeddings=128,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    )
    data = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": f"q{i}"}], "ground_truth": "72"} for i in range(4)]
    )

    def make(rewards_cfg):
        rw = build_reward_funcs(rewards_cfg, G, tokenizer=tokenizer)
        args = GRPOConfig(
            output_dir=str(tmp_path_factory.mktemp("trl")),
            use_cpu=True,
            num_generations=G,
            per_device_train_batch_size=G,
            max_completion_length=8,
            report_to=[],
            logging_steps=1,
            **rw.config_kwargs,
        )
        return GRPOTrainer(
            model=model, reward_funcs=rw.reward_funcs, args=args, train_dataset=data, processing_class=tokenizer
        ), rw

    return make


def _batch(tokenizer):
    prompts = [[{"role": "user", "content": "q0"}]] * G + [[{"role": "user", "content": "q1"}]] * G
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t, _ in TEXTS]
    completions = [[{"role": "assistant", "content": tokenizer.decode(i, skip_special_tokens=True)}] for i in ids]
    inputs = [{"prompt": p, "ground_truth": gt} for p, (_, gt) in zip(prompts, TEXTS)]
    return inputs, prompts, completions, ids


def test_trl_sum_equals_the_znormalised_combined_reward(trainer_factory, tokenizer):
    trainer, rw = trainer_factory(KAGGLE)
    assert rw.names == ["format2", "cosine", "length", "accuracy", ZNORM_FUNC]
    assert trainer.reward_func_names == rw.names
    inputs, prompts, completions, ids = _batch(tokenizer)
    per_func = trainer._calculate_rewards(inputs, prompts, completions, ids)  # TRL's own call, kwargs and all
    total = (per_func * trainer.reward_weights.unsqueeze(0)).nansum(dim=1)  # TRL's sum_then_normalize sum

    samples = [
        Sample(tokenizer.decode(i, skip_special_tokens=True), gt, n_tokens=len(i)) for i, (_, gt) in zip(ids, TEXTS)
    ]
    expected = RewardSet(KAGGLE).score(samples, contiguous_groups(len(samples), G))
    assert torch.allclose(total, torch.tensor(expected.normalized, dtype=torch.float32), atol=1e-5)
    for k, name in enumerate(KAGGLE["funcs"]):  # the per-component columns TRL logs are the raw components
        assert torch.allclose(per_func[:, k], torch.tensor(expected.components[name], dtype=torch.float32), atol=1e-6)
    assert expected.components["length"] != [0.0] * len(samples)
    # per-batch metrics went through TRL's log_metric
    pending = trainer._pending_metrics
    assert pending["accuracy"] == [sum(expected.correct) / len(samples)]
    assert pending["verify_errors"] == [0.0]
    assert pending["reward_unnormalized"][0] == pytest.approx(sum(expected.total) / len(samples))


def test_trl_without_normalisation_is_the_weighted_sum(trainer_factory, tokenizer):
    cfg = {"funcs": ["accuracy", "format2"], "weights": [1.0, 0.25]}
    trainer, rw = trainer_factory(cfg)
    assert rw.reward_weights == [1.0, 0.25] and ZNORM_FUNC not in rw.names
    inputs, prompts, completions, ids = _batch(tokenizer)
    per_func = trainer._calculate_rewards(inputs, prompts, completions, ids)
    total = (per_func * trainer.reward_weights.unsqueeze(0)).nansum(dim=1)
    samples = [Sample(tokenizer.decode(i, skip_special_tokens=True), gt) for i, (_, gt) in zip(ids, TEXTS)]
    assert torch.allclose(total, torch.tensor(RewardSet(cfg).score(samples).total, dtype=torch.float32))


def test_group_rewards_refuse_split_or_mixed_groups():
    rw = build_reward_funcs({"funcs": ["length"]}, G)
    fn = rw.reward_funcs[0]
    comps = [t for t, _ in TEXTS]
    with pytest.raises(GrpoflowError, match="not a multiple of num_generations"):
        fn(completions=comps[:6], ground_truth=["72"] * 6)  # no prompts: chunks of num_generations
    with pytest.raises(GrpoflowError, match=r"sizes \[3, 5\]"):
        fn(prompts=["a"] * 3 + ["b"] * 5, completions=comps, ground_truth=["72"] * 8)
    # groups are the runs of identical prompts, whatever the prompts are
    ids = [[1] * k for k in range(1, 9)]
    truths = ["72"] * 4 + ["420"] * 4
    got = fn(prompts=["b"] * 4 + ["a"] * 4, completions=list(comps), completion_ids=ids, ground_truth=truths)
    samples = [Sample(c, t, len(i)) for c, t, i in zip(comps, truths, ids)]
    assert got == RewardSet({"funcs": ["length"]}).score(samples, [[0, 1, 2, 3], [4, 5, 6, 7]]).components["length"]
    assert got != [0.0] * 8
    with pytest.raises(GrpoflowError, match="num_generations >= 2"):
        build_reward_funcs({"funcs": ["length"]}, 1)


def test_ground_truth_columns():
    fn = build_reward_funcs({"funcs": ["accuracy"]}, G).reward_funcs[0]
    assert fn(prompts=["p"], completions=[f"{B}{{7}}"], reward_model=[{"style": "rule", "ground_truth": "7"}]) == [1.0]
    assert fn(prompts=["p"], completions=[f"{B}{{7}}"], ground_truth=["7"]) == [1.0]
    with pytest.raises(GrpoflowError, match="ground truth"):
        fn(prompts=["p"], completions=[f"{B}{{8}}"], answer=["7"])
    comps = [f"{B}{{7}}"]  # the same completions list with another ground truth is another batch
    assert fn(prompts=["p"], completions=comps, ground_truth=["7"]) == [1.0]
    assert fn(prompts=["p"], completions=comps, ground_truth=["8"]) == [0.0]


def test_lengths_are_tokens_from_completion_ids():
    fn = build_reward_funcs({"funcs": ["cosine"], "params": {"cosine": {"max_len": 10}}}, G).reward_funcs[0]
    assert fn(prompts=["p"], completions=[f"{B}{{7}}"], completion_ids=[[1] * 10], ground_truth=["7"]) == [
        pytest.approx(0.1)
    ]
    assert fn(prompts=["p"], completions=[f"{B}{{7}}"], completion_ids=[[1]], ground_truth=["7"])[0] > 0.9


def test_completion_text_from_messages():
    assert completion_text("plain") == "plain"
    assert completion_text([{"role": "assistant", "content": "\\boxed{1}"}]) == "\\boxed{1}"
    parsed = [{"role": "assistant", "reasoning_content": "r", "content": "\\boxed{1}"}]
    assert completion_text(parsed) == "<think>r</think>\\boxed{1}"
