"""The shipped Qwen3-0.6B LoRA ablation grid: it validates, each arm differs from the base arm in exactly the
factor the recipe's ablation varies, and every arm runs with three seeds that the report groups."""

from __future__ import annotations

from pathlib import Path

import yaml

from grpoflow.config import resolve_config
from grpoflow.report import experiment_summary, seed_groups

CONFIG = Path(__file__).resolve().parents[2] / "config" / "qwen3-0.6b-lora-ablations.yaml"
BASE = "r32-ng6-bs24"
SEEDS = (1, 2, 3)
# open-r1's cosine as recipe 002 ran it: characters, unclipped, the GRPO script's defaults (min_value_wrong 0.0).
COSINE = (
    '{"clip_len":false,"length_unit":"characters","max_len":1000,"max_value_correct":1.0,"max_value_wrong":-0.5,'
    '"min_value_correct":0.5,"min_value_wrong":0.0}'
)
EXPECTED = {
    "r32-ng7-bs28": {"num_generations": 7},
    "r32-len": {"rewards": "format+tag_count+accuracy+cosine+length"},
    "r16-len": {"lora_rank": 16, "rewards": "format+tag_count+accuracy+cosine+length"},
    "r16": {"lora_rank": 16},
    "r8-len": {"lora_rank": 8, "rewards": "format+tag_count+accuracy+cosine+length"},
    "r16-official-sampling": {
        "lora_rank": 8,  # the recipe's setup list (its name says r16)
        "rewards": "format+tag_count+accuracy+cosine+length",
        "temperature": 0.9,
        "top_p": 0.95,
        "top_k": 20,
    },
    "r16-cosine-modified": {
        "lora_rank": 8,  # the recipe's setup list and summary table (its name says r16)
        "rewards": "format+tag_count+accuracy+cosine+length",
        "reward_params": '{"cosine":{"clip_len":false,"length_unit":"characters","max_len":1000,"max_value_correct":2.0,"max_value_wrong":0.0,"min_value_correct":1.0,"min_value_wrong":-10.0}}',
    },
    "r32-repetition-penalty": {
        "rewards": "format+tag_count+accuracy+cosine+length+repetition_penalty",
        "reward_params": '{"cosine":' + COSINE + ',"repetition_penalty":{"max_penalty":-0.05,"ngram_size":40}}',
    },
    # and its own system prompt (dataset gsm8k_numeric, asserted below)
    "r32-new-prompt": {"rewards": "accuracy+cosine+length"},
}


def test_the_grid_varies_one_factor_group_per_run():
    cfg = resolve_config(yaml.safe_load(CONFIG.read_text()))
    groups = seed_groups(cfg.experiments)
    assert set(groups) == {BASE, *EXPECTED}
    for arm, runs in groups.items():
        assert runs == [f"{arm}-seed{k}" for k in SEEDS]
        assert [cfg.experiment(r)["grpo"]["seed"] for r in runs] == list(SEEDS)
    summaries = {arm: experiment_summary(cfg.experiment(f"{arm}-seed1")) for arm in groups}
    base = summaries[BASE]
    assert (base["lora_rank"], base["prompts_per_step"] * base["num_generations"], base["rewards"]) == (
        32,
        24,
        "format+tag_count+accuracy+cosine",
    )
    assert base["reward_params"] == '{"cosine":' + COSINE + "}" and base["learning_rate"] == 5e-5
    for name, diff in EXPECTED.items():
        changed = {k: v for k, v in summaries[name].items() if v != base[k] and k != "sft_model"}
        assert changed == diff, name
    for name in cfg.experiments:
        exp = cfg.experiment(name)
        assert exp["grpo"]["lora"]["alpha"] == 2 * exp["grpo"]["lora"]["rank"] and exp["grpo"]["max_grad_norm"] == 0.1
    # One shared SFT start (evaluated once), greedy evaluation on the 300-problem validation split first.
    assert sorted(m for m, e in cfg.models.items() if e["kind"] == "sft") == ["qwen3-0.6b"]
    assert cfg.evaluation["preset"] == "greedy" and cfg.report["primary_benchmark"] == "val300"
    assert cfg.datasets["gsm8k"]["validation"]["size"] == 300
    new_prompt = cfg.experiment("r32-new-prompt-seed1")["data"]["dataset"]
    assert cfg.datasets[new_prompt]["prompt"]["system"].endswith("请直接输出数字答案，不带单位。")
    assert cfg.datasets[new_prompt]["validation"] == cfg.datasets["gsm8k"]["validation"]
