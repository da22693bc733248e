"""The verl 0.9.1 adapter through verl's own code: Hydra composition of the overrides, verl's reward loop worker
and reward manager scoring a real DataProto of tokenized responses, the advantage estimator against verl's
``compute_grpo_outcome_advantage`` with real tensors, and registration through VERL_USE_EXTERNAL_MODULES."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from grpoflow_testing import require

require("verl")
pytestmark = pytest.mark.verl

import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

# Registers the "grpoflow" advantage estimator in verl's registry, as verl's VERL_USE_EXTERNAL_MODULES does in a run
# (test_estimator_registered_through_verl_use_external_modules): every test that looks it up needs it, whichever
# worker and order it runs in (one that ran without it failed in CI).
import grpoflow.backends.verl.reward_plugin  # noqa: E402, F401
from grpoflow.backends.verl import rewards as rverl  # noqa: E402
from grpoflow.backends.verl.overrides import reward_environment, reward_overrides  # noqa: E402
from grpoflow.errors import ConfigError, GrpoflowError  # noqa: E402
from grpoflow.rewards import RewardSet, Sample, groups_of  # noqa: E402

B = "\\boxed"
KAGGLE = {
    "funcs": ["format2", "cosine", "length"],
    "weights": [1.0, 1.0, 1.0],
    "normalize": "per_prompt",
    "eps": 1e-6,
    "params": {"cosine": {"max_len": 64}},
}
# Two prompts × 4 responses: right/wrong, boxed inside the reasoning or not, different lengths, one cut off.
RESPONSES = [
    ("<think>48 / 2 = 24, 48 + 24 = 72 so \\boxed{72}</think>\nThe answer is \\boxed{72}.", "72"),
    ("<think>hmm</think>\nThe answer is \\boxed{72}.", "72"),
    ("<think>48 / 2 = 24, and 48 + 24 is 71, so \\boxed{71}</think>\n\\boxed{71}", "72"),
    ("<think>Natalia sold 48 clips in April and half as many", "72"),
    ("<think>12 times 35</think>\n\\boxed{420}", "420"),
    ("<think>12 times 35 is 420, times 4 is 1680 \\boxed{1680}</think>\nSo the total is \\boxed{1,680}.", "1680"),
    ("<think>12 times 35 is 420</think>\nSo the total is 421.", "420"),
    ("<think>12 times 35 is 420</think>\n\\boxed{420} or \\boxed{421}", "420"),
]
UIDS = ["p0"] * 4 + ["p1"] * 4


def _compose(overrides: list[str]):
    import verl.trainer.config as cfgpkg

    with initialize_config_dir(config_dir=os.path.dirname(cfgpkg.__file__), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


BASE = [
    "algorithm.adv_estimator=grpo",
    "data.train_batch_size=8",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
    "trainer.n_gpus_per_node=1",
    "trainer.nnodes=1",
]


# ---- Hydra overrides ------------------------------------------------------------------------------------------


def test_overrides_compose_and_land_where_verl_reads_them():
    from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    overrides = reward_overrides(KAGGLE)
    cfg = _compose(BASE + overrides)  # raises on keys verl does not know
    rf = cfg.reward.custom_reward_function
    assert rf.path == "pkg://grpoflow.backends.verl.rewards" and rf.name == "compute_score"
    kwargs = OmegaConf.to_container(rf.reward_kwargs)
    assert kwargs["funcs"] == KAGGLE["funcs"] and kwargs["weights"] == KAGGLE["weights"]
    assert kwargs["normalize"] == "per_prompt" and kwargs["params"]["cosine"]["max_len"] == 64
    assert kwargs["params"]["cosine"]["clip_len"] is True  # every parameter explicit, defaults included
    assert cfg.algorithm.adv_estimator == "grpoflow"
    assert OmegaConf.to_container(cfg.algorithm.grpoflow) == {
        "length_weight": 1.0,
        "normalize": "per_prompt",
        "eps": 1e-6,
    }
    # the legacy top-level keys compose but 0.9.1 ignores them: never emitted
    assert not any(o.lstrip("+").startswith(("custom_reward_function.", "reward_model.")) for o in overrides)
    assert OmegaConf.select(cfg, "custom_reward_function.path") is None
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    assert resolve_reward_manager_cls(cfg).__name__ == rverl.REWARD_MANAGER
    assert get_custom_reward_fn(cfg) is not None


def test_compute_score_loads_by_file_path_too():
    from verl.trainer.ppo.reward import get_custom_reward_fn

    overrides = reward_overrides(KAGGLE) + [f"reward.custom_reward_function.path={rverl.COMPUTE_SCORE_PATH}"]
    fn = get_custom_reward_fn(_compose(BASE + overrides))
    out = fn(
        data_source="grpoflow/x", solution_str=RESPONSES[0][0], ground_truth="72", extra_info={rverl.TOKENS_KEY: 20}
    )
    assert out["acc"] == 1.0 and out["format2"] == 1.0


def test_overrides_without_group_terms_keep_verl_grpo():
    cfg_rewards = {"funcs": ["accuracy", "format"], "weights": [1.0, 0.2]}
    overrides = reward_overrides(cfg_rewards)
    assert not any(o.startswith(("algorithm.", "+algorithm.")) for o in overrides)
    assert reward_environment(cfg_rewards) == {}
    cfg = _compose(BASE + overrides)
    assert cfg.algorithm.adv_estimator == "grpo"
    assert reward_environment(KAGGLE) == {"VERL_USE_EXTERNAL_MODULES": "grpoflow.backends.verl.reward_plugin"}


def test_override_values_survive_hydra_quoting():
    cfg_rewards = {
        "funcs": ["match_format_exactly", "soft_overlong"],
        "params": {"match_format_exactly": {"reasoning_tag": "reasoning"}, "soft_overlong": {"cache": 8}},
    }
    overrides = reward_overrides(cfg_rewards, max_response_length=32)
    kw = OmegaConf.to_container(_compose(BASE + overrides).reward.custom_reward_function.reward_kwargs)
    assert kw["params"]["match_format_exactly"] == {"reasoning_tag": "reasoning", "answer_tag": "answer"}
    assert kw["params"]["soft_overlong"] == {"max_len": 32, "cache": 8}
    with pytest.raises(ConfigError, match="soft_overlong.max_len"):
        reward_overrides({"funcs": ["soft_overlong"]})


# ---- compute_score through verl's reward loop ---------------------------------------------------------------


def _dataproto(tokenizer, responses, uids):
    from verl import DataProto

    prompt_ids = [tokenizer("user\nWhat is it?\nassistant\n", add_special_tokens=False)["input_ids"] for _ in responses]
    resp_ids = [
        tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for text, _ in responses
    ]
    p_len, r_len, pad = max(map(len, prompt_ids)), max(map(len, resp_ids)) + 3, tokenizer.pad_token_id
    prompts = torch.tensor([[pad] * (p_len - len(p)) + p for p in prompt_ids])
    resps = torch.tensor([r + [pad] * (r_len - len(r)) for r in resp_ids])
    p_mask = torch.tensor([[0] * (p_len - len(p)) + [1] * len(p) for p in prompt_ids])
    r_mask = torch.tensor([[1] * len(r) + [0] * (r_len - len(r)) for r in resp_ids])
    n = len(responses)
    data = DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": resps,
            "attention_mask": torch.cat([p_mask, r_mask], dim=1),
            "input_ids": torch.cat([prompts, resps], dim=1),
        },
        non_tensors={
            "data_source": np.array(["grpoflow/test"] * n, dtype=object),
            "reward_model": np.array([{"style": "rule", "ground_truth": gt} for _, gt in responses], dtype=object),
            "extra_info": np.array([{"split": "train", "index": i // 4} for i in range(n)], dtype=object),
            "uid": np.array(uids, dtype=object),
        },
    )
    return data, r_mask, [len(r) for r in resp_ids]


@pytest.fixture(scope="module")
def scored(tokenizer_dir, tokenizer):
    """verl's RewardLoopWorker (as the Ray reward workers run it) scoring the responses with our function."""
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    cfg = _compose(BASE + reward_overrides(KAGGLE) + [f"actor_rollout_ref.model.path={tokenizer_dir}"])
    worker = RewardLoopWorker(cfg)
    data, r_mask, n_tokens = _dataproto(tokenizer, RESPONSES, UIDS)
    outputs = worker.loop.run_until_complete(worker.compute_score_batch(data))
    # what RewardLoopManager.compute_rm_score does with the outputs
    scores = [o["reward_score"] for o in outputs]
    rm_scores = type(worker.reward_manager).assemble_rm_scores(data, scores)
    extras = [o["reward_extra_info"] for o in outputs]
    keys = list(extras[0])
    non_tensor = {k: np.array([e[k] for e in extras]) for k in keys}
    return {
        "worker": worker,
        "rm_scores": rm_scores,
        "extras": non_tensor,
        "mask": r_mask,
        "n_tokens": n_tokens,
        "decoded": [
            tokenizer.decode(data.batch["responses"][i][: n_tokens[i]], skip_special_tokens=True)
            for i in range(len(RESPONSES))
        ],
    }


def test_reward_loop_uses_our_manager_and_function(scored):
    assert type(scored["worker"].reward_manager).__name__ == rverl.REWARD_MANAGER
    extras = scored["extras"]
    assert set(extras) == {
        "score",
        "format2",
        "cosine",
        "acc",
        "answer_found",
        "verify_error",
    }  # same keys every sample
    assert list(extras["acc"]) == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert list(extras["format2"]) == [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    assert list(extras["answer_found"]) == [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert not extras["verify_error"].any()


def test_compute_score_counts_tokens_not_characters(scored):
    """cosine's length is the response's token count (verl's response mask), passed by our reward manager."""
    rs = RewardSet(KAGGLE)
    for i, text in enumerate(scored["decoded"]):
        expect = rs.sample_components(Sample(text, RESPONSES[i][1], n_tokens=scored["n_tokens"][i]))["cosine"]
        assert scored["extras"]["cosine"][i] == pytest.approx(expect)
        by_chars = rs.sample_components(Sample(text, RESPONSES[i][1]))["cosine"]
        if len(text) != scored["n_tokens"][i]:
            assert by_chars != pytest.approx(expect)


def test_rm_scores_carry_tagged_per_sample_totals(scored):
    rm = scored["rm_scores"]
    mask = scored["mask"]
    last = mask.sum(-1) - 1
    totals = rm.sum(-1).numpy()
    assert (rm[torch.arange(len(rm)), last] == rm.sum(-1)).all()  # the score sits on the last response token
    clean, correct, tagged = rverl.untag_scores(totals)
    assert tagged.all() and list(correct) == [bool(x) for x in scored["extras"]["acc"]]
    expect = np.array(scored["extras"]["format2"]) + np.array(scored["extras"]["cosine"])
    assert np.allclose(clean, expect, rtol=1e-6, atol=1e-6)


# ---- the advantage estimator ---------------------------------------------------------------------------------


def test_estimator_equals_grpo_without_group_terms():
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, get_adv_estimator_fn

    fn = get_adv_estimator_fn("grpoflow")
    torch.manual_seed(0)
    mask = (torch.arange(12)[None, :] < torch.randint(3, 12, (8, 1))).long()
    rewards = torch.zeros(8, 12)
    rewards[torch.arange(8), mask.sum(-1) - 1] = torch.randn(8)
    index = np.array(UIDS, dtype=object)
    for norm in (True, False):
        config = OmegaConf.create(
            {"norm_adv_by_std_in_grpo": norm, "grpoflow": {"length_weight": 0.0, "normalize": "none", "eps": 1e-6}}
        )
        ours, _ = fn(token_level_rewards=rewards, response_mask=mask, index=index, config=config)
        theirs, _ = compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=norm)
        assert torch.equal(ours, theirs)


def test_estimator_applies_length_and_znorm_like_the_trl_path(scored):
    """verl path (compute_score → rm_scores → estimator) == TRL path (RewardSet.score → normalized) → GRPO."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, get_adv_estimator_fn

    cfg = _compose(BASE + reward_overrides(KAGGLE))
    fn = get_adv_estimator_fn("grpoflow")
    index = np.array(UIDS, dtype=object)
    ours, returns = fn(
        token_level_rewards=scored["rm_scores"], response_mask=scored["mask"], index=index, config=cfg.algorithm
    )

    samples = [Sample(t, RESPONSES[i][1], n_tokens=scored["n_tokens"][i]) for i, t in enumerate(scored["decoded"])]
    expected = RewardSet(KAGGLE).score(samples, groups_of(UIDS))
    assert any(v != 0 for v in expected.components["length"])
    shaped = torch.zeros_like(scored["rm_scores"])
    shaped[torch.arange(len(samples)), scored["mask"].sum(-1) - 1] = torch.tensor(
        expected.normalized, dtype=torch.float32
    )
    theirs, _ = compute_grpo_outcome_advantage(shaped, scored["mask"], index)
    assert torch.allclose(ours, theirs, atol=1e-4)
    assert torch.equal(ours, returns)
    assert (ours[scored["mask"] == 0] == 0).all()


def test_estimator_refuses_untagged_scores_and_kl_in_reward():
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    fn = get_adv_estimator_fn("grpoflow")
    mask = torch.ones(4, 3, dtype=torch.long)
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 0.5, -1.0])  # plain scores: not written by grpoflow's compute_score
    index = np.array(["a", "a", "b", "b"], dtype=object)
    cfg = OmegaConf.create({"grpoflow": {"length_weight": 1.0, "normalize": "none", "eps": 1e-6}})
    with pytest.raises(GrpoflowError, match="not written by grpoflow's compute_score"):
        fn(token_level_rewards=rewards, response_mask=mask, index=index, config=cfg)
    cfg.use_kl_in_reward = True
    with pytest.raises(GrpoflowError, match="use_kl_in_reward"):
        fn(token_level_rewards=rewards, response_mask=mask, index=index, config=cfg)
    with pytest.raises(GrpoflowError, match=r"\+algorithm.grpoflow"):
        fn(token_level_rewards=rewards, response_mask=mask, index=index, config=OmegaConf.create({}))


def test_score_tag_round_trip():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(0, 3, 500), [0.0, -0.0, 1.0, -1.0, 1e-30, 3.0e38, -2.5]])
    for correct in (True, False):
        tagged = np.array([rverl.tag_score(float(v), correct) for v in values], dtype=np.float32)
        clean, got, marked = rverl.untag_scores(tagged)
        assert marked.all() and (got == correct).all()
        assert np.allclose(clean, values.astype(np.float32), rtol=4e-7, atol=1e-37)
        assert np.allclose(tagged, values.astype(np.float32), rtol=4e-7, atol=1e-37)  # verl logs the score to 4e-7


def test_compute_score_needs_its_config():
    with pytest.raises(ConfigError, match="reward_kwargs.funcs"):
        rverl.compute_score("grpoflow/x", "\\boxed{1}", "1", {})


def test_estimator_registered_through_verl_use_external_modules():
    code = (
        "import verl; from verl.trainer.ppo.core_algos import get_adv_estimator_fn; "
        "print(get_adv_estimator_fn('grpoflow').__module__)"
    )
    env = {**os.environ, **reward_environment(KAGGLE)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("grpoflow.backends.verl.reward_plugin")
