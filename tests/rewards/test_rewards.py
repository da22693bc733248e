"""Each reward of the registry, the combination (weights, per-prompt z-norm) and the config check."""

from __future__ import annotations

import math

import pytest

from grpoflow.errors import ConfigError
from grpoflow.rewards import RewardSet, Sample, check_reward_config, registry, stats, znorm
from grpoflow.rewards.numbers import parse_number, words_to_number

B = "\\boxed"
RIGHT = f"<think>48 / 2 = 24</think>\nThe answer is {B}{{72}}."
WRONG = f"<think>48 / 2 = 24</think>\nThe answer is {B}{{71}}."
NONE = "<think>48 / 2 = 24 and then"


def score(name: str, completion: str, truth: str = "72", n_tokens: int | None = None, **params) -> float:
    rs = RewardSet({"funcs": [name], "params": {name: params} if params else {}}, max_response_length=1000)
    return rs.sample_components(Sample(completion, truth, n_tokens))[name]


# ---- registry ------------------------------------------------------------------------------------------------


def test_registry_lists_every_recipe_reward_with_docs():
    reg = registry()
    assert set(reg) == {
        "accuracy",
        "binary",
        "boxed_binary",
        "format",
        "tag_count",
        "format2",
        "cosine",
        "length",
        "repetition_penalty",
        "soft_overlong",
        "match_format_exactly",
        "match_format_approximately",
        "check_answer",
        "check_numbers",
    }
    for spec in reg.values():
        assert spec.doc, f"{spec.name} has no docstring"
    assert [n for n, s in reg.items() if s.group] == ["length"]
    assert reg["cosine"].defaults() == {
        "min_value_wrong": -1.0,
        "max_value_wrong": -0.1,
        "min_value_correct": 0.1,
        "max_value_correct": 1.0,
        "max_len": 30000,
        "clip_len": True,
        "length_unit": "tokens",
    }
    assert reg["repetition_penalty"].defaults() == {"ngram_size": 40, "max_penalty": -0.05}
    assert reg["binary"].defaults() == {"correct": 1.0, "wrong": -1.0, "no_answer": -0.5}


# ---- correctness rewards -------------------------------------------------------------------------------------


def test_accuracy():
    assert score("accuracy", RIGHT) == 1.0
    assert score("accuracy", WRONG) == 0.0
    assert score("accuracy", NONE) == 0.0


def test_binary_three_outcomes_and_custom_values():
    assert (score("binary", RIGHT), score("binary", WRONG), score("binary", NONE)) == (1.0, -1.0, -0.5)
    assert score("binary", NONE, correct=2.0, wrong=-2.0, no_answer=-3.0) == -3.0


def test_boxed_binary_reads_boxed_answers_only():
    """Recipe 004's reward: an answer outside \\boxed{} counts as no answer (binary grades it)."""
    boxed_right, boxed_wrong = "so it is $\\boxed{42}$.", "so it is $\\boxed{43}$."
    plain_right, cut = "6 times 7. The answer is 42.", "so it is $\\boxed{4"
    assert [score("boxed_binary", c, "42") for c in (boxed_right, boxed_wrong, plain_right, cut)] == [
        1.0,
        -1.0,
        -0.5,
        -0.5,
    ]
    assert score("binary", plain_right, "42") == 1.0


# ---- format rewards ------------------------------------------------------------------------------------------


def test_format_strict_layout():
    assert score("format", "<think>\nreason\n</think>\n<answer>\n72\n</answer>") == 1.0
    assert score("format", "<think>r</think><answer>72</answer><|im_end|>") == 1.0
    assert score("format", "<think>r</think><answer>72</answer> trailing text") == 0.0
    assert score("format", "<answer>72</answer>") == 0.0
    assert score("format", "<think>r</think>\n72") == 0.0
    assert score("format", "<reasoning>r</reasoning><answer>72</answer>", reasoning_tag="reasoning") == 1.0


def test_tag_count_quarter_per_tag_seen_once():
    assert score("tag_count", "<think>r</think><answer>72</answer>") == 1.0
    assert score("tag_count", "<think>r</think>72") == 0.5
    assert score("tag_count", "<think>r</think><answer>7</answer><answer>2</answer>") == 0.5
    assert score("tag_count", "plain") == 0.0


def test_format2_box_before_think_close():
    assert score("format2", f"<think>so {B}{{72}}</think>Done.") == 1.0
    assert score("format2", f"<think>so 72</think>{B}{{72}}") == 0.0  # boxed after </think> only
    assert score("format2", f"<think>so {B}{{72}}") == 0.0  # no </think>
    assert score("format2", f"<think>{B}{{}}</think>") == 0.0  # empty box
    assert score("format2", f"<think>{B}{{72</think>") == 0.0  # unclosed box


def test_tpu_format_rewards():
    good = "<reasoning>48/2 = 24</reasoning>\n<answer>72</answer>"
    assert score("match_format_exactly", good) == 3.0
    assert score("match_format_exactly", good + " extra") == 0.0
    assert score("match_format_exactly", "<think>hm</think>" + good) == 3.0  # read after </think>
    assert score("match_format_approximately", good) == 2.0
    assert score("match_format_approximately", "<answer>72</answer>") == 0.0
    assert score("match_format_approximately", "72") == -2.0
    assert score("match_format_exactly", "<think>r</think><answer>72</answer>", reasoning_tag="think") == 3.0


@pytest.mark.parametrize(
    "answer,truth,expected",
    [
        ("72", "72", 3.0),
        (" 72 ", "72", 1.5),
        ("75", "72", 0.5),  # within 10 %
        ("$1,680", "1680", 0.5),  # numerically equal, textually not: the ratio tier
        ("84", "72", 0.25),  # within 20 %
        ("100", "72", -1.0),
        ("seventy", "72", -0.5),
        ("0", "0", 3.0),
        ("1", "0", -1.0),
    ],
)
def test_check_answer_tiers(answer, truth, expected):
    assert score("check_answer", f"<reasoning>r</reasoning><answer>{answer}</answer>", truth) == expected


def test_check_answer_needs_the_format():
    assert score("check_answer", "<answer>72</answer>") == 0.0


def test_check_numbers_first_number_in_answer():
    assert score("check_numbers", "<reasoning>r</reasoning><answer>72 clips, not 5</answer>") == 1.5
    assert score("check_numbers", "<reasoning>r</reasoning><answer>1,680 dollars</answer>", "1680") == 1.5
    assert score("check_numbers", "<reasoning>r</reasoning><answer>5, then 72</answer>") == 0.0
    assert score("check_numbers", "<reasoning>r</reasoning><answer>none</answer>") == 0.0
    assert score("check_numbers", "no tags 72") == 0.0


# ---- length shaping ------------------------------------------------------------------------------------------


def test_cosine_endpoints_and_monotonicity_in_tokens():
    p = {"max_len": 100}
    assert score("cosine", RIGHT, n_tokens=0, **p) == pytest.approx(1.0)
    assert score("cosine", RIGHT, n_tokens=100, **p) == pytest.approx(0.1)
    assert score("cosine", RIGHT, n_tokens=50, **p) == pytest.approx(0.55)
    assert score("cosine", WRONG, n_tokens=0, **p) == pytest.approx(-1.0)
    assert score("cosine", WRONG, n_tokens=100, **p) == pytest.approx(-0.1)
    assert score("cosine", NONE, n_tokens=100, **p) == pytest.approx(-0.1)  # no answer counts as wrong
    right = [score("cosine", RIGHT, n_tokens=n, **p) for n in range(0, 101, 10)]
    wrong = [score("cosine", WRONG, n_tokens=n, **p) for n in range(0, 101, 10)]
    assert right == sorted(right, reverse=True) and wrong == sorted(wrong)


def test_cosine_clip_len():
    assert score("cosine", RIGHT, n_tokens=500, max_len=100) == pytest.approx(0.1)
    # unclipped, progress 2 brings the cosine back to its start: the known upstream pitfall, kept configurable
    assert score("cosine", RIGHT, n_tokens=200, max_len=100, clip_len=False) == pytest.approx(1.0)


def test_cosine_length_unit_tokens_when_given_else_characters():
    before = stats().get("length_in_chars", 0)
    text = RIGHT  # len(RIGHT) characters
    by_tokens = score("cosine", text, n_tokens=10, max_len=len(text))
    assert stats().get("length_in_chars", 0) == before
    by_chars = score("cosine", text, n_tokens=None, max_len=len(text))
    assert by_chars == pytest.approx(0.1)  # progress = len(text)/max_len = 1
    assert by_tokens > 0.9
    assert stats()["length_in_chars"] == before + 1  # the fallback is counted, never silent


def test_cosine_counts_characters_unclipped_as_open_r1_does():
    """open-r1's cosine_scaled_reward (src/open_r1/rewards.py): gen_len = len(content), progress = gen_len /
    max_len, no clipping; recipe 002 ran it with open-r1's script defaults (cosine_min_value_wrong 0.0)."""
    p = {"length_unit": "characters", "clip_len": False, "min_value_wrong": 0.0, "max_value_wrong": -0.5}
    p |= {"min_value_correct": 0.5, "max_value_correct": 1.0}
    text = RIGHT + " " * (len(RIGHT) % 2)  # an even length, so max_len = len / 2 is an integer
    # The token count the trainer passes is ignored: L is the text's characters.
    assert score("cosine", text, n_tokens=1, max_len=len(text), **p) == pytest.approx(0.5)  # p = 1: min_value_correct
    assert score("cosine", text, n_tokens=1, max_len=2 * len(text), **p) == pytest.approx(0.75)  # p = 1/2
    assert score("cosine", WRONG, n_tokens=1, max_len=len(WRONG), **p) == pytest.approx(-0.5)  # max_value_wrong
    # Past max_len the cosine turns back (open-r1 never clips): p = 2 gives the p = 0 value again.
    assert score("cosine", text, n_tokens=1, max_len=len(text) // 2, **p) == pytest.approx(1.0)


def test_kimi_length_group():
    rs = RewardSet({"funcs": ["length"]})
    samples = [Sample(RIGHT, "72", 10), Sample(RIGHT, "72", 30), Sample(WRONG, "72", 20), Sample(WRONG, "72", 10)]
    values = rs.score(samples, [[0, 1, 2, 3]]).components["length"]
    # λ = 0.5 − (L − 10)/20: correct → λ (10 → 0.5, 30 → −0.5); wrong → min(0, λ) (20 → 0, 10 → 0)
    assert values == pytest.approx([0.5, -0.5, 0.0, 0.0])
    equal = rs.score([Sample(RIGHT, "72", 7), Sample(WRONG, "72", 7)], [[0, 1]]).components["length"]
    assert equal == [0.0, 0.0]


def test_kimi_length_is_per_group():
    rs = RewardSet({"funcs": ["length"]})
    samples = [Sample(RIGHT, "72", 10), Sample(RIGHT, "72", 20), Sample(RIGHT, "72", 100), Sample(RIGHT, "72", 200)]
    values = rs.score(samples, [[0, 1], [2, 3]]).components["length"]
    assert values == pytest.approx([0.5, -0.5, 0.5, -0.5])


def test_repetition_penalty():
    assert score("repetition_penalty", "a b c d e f", ngram_size=3) == 0.0
    assert score("repetition_penalty", "a b a b a b a b", ngram_size=2) == pytest.approx(-0.05 * (1 - 2 / 7))
    assert score("repetition_penalty", "short", ngram_size=40) == 0.0
    looped = "the answer is 7 " * 200
    assert score("repetition_penalty", looped) < -0.04


def test_soft_overlong():
    p = {"max_len": 100, "cache": 20}
    assert score("soft_overlong", RIGHT, n_tokens=80, **p) == 0.0
    assert score("soft_overlong", RIGHT, n_tokens=90, **p) == pytest.approx(-0.5)
    assert score("soft_overlong", RIGHT, n_tokens=100, **p) == pytest.approx(-1.0)
    assert score("soft_overlong", RIGHT, n_tokens=101, **p) == -1.0


def test_soft_overlong_max_len_defaults_to_max_response_length():
    rs = RewardSet({"funcs": ["soft_overlong"], "params": {"soft_overlong": {"cache": 10}}}, max_response_length=50)
    assert rs.params["soft_overlong"]["max_len"] == 50
    with pytest.raises(ConfigError, match="soft_overlong.max_len is not set"):
        RewardSet({"funcs": ["soft_overlong"]})


# ---- combination ---------------------------------------------------------------------------------------------


def test_weighted_sum_and_components_before_weights():
    rs = RewardSet({"funcs": ["accuracy", "format2"], "weights": [2.0, 0.5]})
    s = rs.score([Sample(f"<think>{B}{{72}}</think>{B}{{72}}", "72"), Sample(WRONG, "72")])
    assert s.components == {"accuracy": [1.0, 0.0], "format2": [1.0, 0.0]}
    assert s.total == [2.5, 0.0] and s.normalized == s.total
    assert s.correct == [True, False]


def test_per_prompt_znorm_matches_the_formula():
    rs = RewardSet(
        {
            "funcs": ["accuracy", "cosine"],
            "weights": [1.0, 1.0],
            "normalize": "per_prompt",
            "eps": 1e-6,
            "params": {"cosine": {"max_len": 100}},
        }
    )
    samples = [Sample(RIGHT, "72", 10), Sample(WRONG, "72", 50), Sample(RIGHT, "72", 90), Sample(WRONG, "72", 5)]
    s = rs.score(samples, [[0, 1], [2, 3]])
    for g in ([0, 1], [2, 3]):
        vals = [s.total[i] for i in g]
        mean = sum(vals) / 2
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / 1)  # sample std, as torch.std
        assert [s.normalized[i] for i in g] == pytest.approx([(v - mean) / (std + 1e-6) for v in vals])


def test_znorm_edge_cases():
    assert znorm([3.0], 1e-6) == [3.0]  # a singleton group is left alone (verl's convention)
    assert znorm([2.0, 2.0, 2.0], 1e-6) == [0.0, 0.0, 0.0]  # no spread, no signal, no division by zero


def test_group_terms_need_groups():
    rs = RewardSet({"funcs": ["accuracy"], "normalize": "per_prompt"})
    with pytest.raises(ValueError, match="groups"):
        rs.score([Sample(RIGHT, "72")])


# ---- config check --------------------------------------------------------------------------------------------

W = "experiments.x.rewards"


@pytest.mark.parametrize(
    "cfg,message",
    [
        ({"funcs": ["acc"]}, f"config error: {W}.funcs: unknown reward 'acc' (known: accuracy, binary,"),
        ({"funcs": []}, f"{W}.funcs = []: must be at least 1 item(s)"),
        ({"funcs": ["accuracy", "accuracy"]}, "lists 'accuracy' more than once"),
        ({"funcs": ["accuracy"], "weights": [1, 2]}, f"{W}.weights must be a list of 1 numbers"),
        (
            {"funcs": ["accuracy"], "weights": [float("nan")]},
            f"{W}.weights.0 = NaN: must be a value of type finite number",
        ),
        (
            {"funcs": ["cosine"], "params": {"cosine": {"max_value_correct": float("inf")}}},
            f"{W}.params.cosine.max_value_correct = Infinity: must be a value of type finite number",
        ),
        ({"funcs": ["accuracy"], "normalize": "group"}, f"{W}.normalize = 'group': must be one of none, per_prompt"),
        ({"funcs": ["accuracy"], "eps": 0}, f"{W}.eps = 0: must be a number > 0"),
        (
            {"funcs": ["cosine"], "params": {"cosine": {"maxlen": 1}}},
            f"{W}.params.cosine: unknown parameter 'maxlen' (known: clip_len, length_unit, max_len,",
        ),
        (
            {"funcs": ["cosine"], "params": {"cosine": {"max_len": 0}}},
            f"{W}.params.cosine.max_len = 0: must be a number > 0",
        ),
        (
            {"funcs": ["cosine"], "params": {"cosine": {"max_len": 1.5}}},
            f"{W}.params.cosine.max_len = 1.5: must be a value of type integer",
        ),
        (
            {"funcs": ["cosine"], "params": {"cosine": {"clip_len": "yes"}}},
            "clip_len = 'yes': must be a value of type boolean",
        ),
        (
            {"funcs": ["cosine"], "params": {"cosine": {"min_value_correct": 2.0}}},
            "min_value_correct must be <= max_value_correct",
        ),
        (
            {"funcs": ["cosine"], "params": {"length": {}}},
            f"{W}.params.length: parameters given for 'length', which is not in {W}.funcs",
        ),
        ({"funcs": ["cosine"], "params": {"nope": {}}}, f"{W}.params: unknown reward 'nope'"),
        (
            {"funcs": ["repetition_penalty"], "params": {"repetition_penalty": {"max_penalty": 0.1}}},
            "max_penalty = 0.1: must be a number <= 0",
        ),
        (
            {"funcs": ["format"], "params": {"format": {"answer_tag": "<answer>"}}},
            "answer_tag = '<answer>': must be a tag name such as think or answer",
        ),
        (
            {"funcs": ["soft_overlong"], "params": {"soft_overlong": {"max_len": None, "cache": "4k"}}},
            "soft_overlong.cache = '4k': must be a value of type integer",
        ),
        (
            {"funcs": ["soft_overlong"], "params": {"soft_overlong": {"max_len": 100, "cache": 100}}},
            "cache (100) must be smaller than max_len (100)",
        ),
    ],
)
def test_check_reward_config_errors_are_one_line(cfg, message):
    with pytest.raises(ConfigError) as err:
        check_reward_config(cfg, W)
    assert message in str(err.value)
    assert "\n" not in str(err.value) and str(err.value).startswith("config error: ")


def test_check_reward_config_accepts_the_recipe_configs():
    from grpoflow.rewards import resolve_params

    fastmath = {
        "funcs": ["format2", "cosine", "length"],
        "weights": [1.0, 1.0, 1.0],
        "normalize": "per_prompt",
        "eps": 1e-6,
        "params": {"cosine": {"max_len": 30000, "clip_len": True}},
    }
    ablation = {
        "funcs": ["format", "tag_count", "accuracy", "cosine", "length", "repetition_penalty"],
        "params": {
            "cosine": {
                "max_len": 1000,
                "min_value_wrong": -10.0,
                "max_value_wrong": 0.0,
                "min_value_correct": 1.0,
                "max_value_correct": 2.0,
            },
            "repetition_penalty": {"ngram_size": 40, "max_penalty": -0.05},
        },
    }
    tpu = {"funcs": ["match_format_exactly", "match_format_approximately", "check_answer", "check_numbers"]}
    qwen_math = {"funcs": ["binary"], "params": {"binary": {"no_answer": -0.5}}}
    # Accepted, and each reward gets the recipe's values over the registry's defaults.
    assert resolve_params(fastmath, where=W)["cosine"] == {
        **registry()["cosine"].defaults(),
        "max_len": 30000,
        "clip_len": True,
    }
    assert resolve_params(ablation, where=W)["repetition_penalty"] == {"ngram_size": 40, "max_penalty": -0.05}
    assert resolve_params(ablation, where=W)["cosine"]["min_value_wrong"] == -10.0
    assert list(resolve_params(tpu, where=W)) == tpu["funcs"]
    assert resolve_params(qwen_math, where=W)["binary"] == {"correct": 1.0, "wrong": -1.0, "no_answer": -0.5}


def test_config_module_uses_the_registry():
    from grpoflow.config import load_config_files, resolve_config

    raw = load_config_files(["config/config.yaml"])
    raw["defaults"]["rewards"] = {"funcs": ["accuracy", "cosin"]}
    with pytest.raises(ConfigError, match=r"experiments\.\S+\.rewards\.funcs: unknown reward 'cosin'"):
        resolve_config(raw)


# ---- numbers -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,value",
    [
        ("72", 72),
        ("1,680", 1680),
        ("$1,680.00", 1680),
        ("\\$18", 18),
        ("1{,}680", 1680),
        ("1\\,680", 1680),
        ("072", 72),
        ("18.0", 18),
        ("\\frac12", 0.5),
        ("\\dfrac94", 2.25),
        ("-\\frac72", -3.5),
        ("1\\frac12", 1.5),
        ("3/4", 0.75),
        ("72 muffins", 72),
        ("5\\text{ cm}", 5),
        ("10^{\\circ}", 10),
        ("−5", -5),
        (".5", 0.5),
        ("105 meters below sea level", -105),
        ("72.", 72),
        ("**72**", 72),
        ("3 km/h", 3),
    ],
)
def test_parse_number(text, value):
    n = parse_number(text)
    assert n is not None and float(n.value) == value


@pytest.mark.parametrize("text", ["5x", "2i", "x=5", "2^3", "1,2", "\\frac{1}{0}", "1.5 \\times 10^3", "abc", ""])
def test_parse_number_rejects_non_numbers(text):
    assert parse_number(text) is None


def test_words_to_number():
    assert words_to_number("seventy-two") == 72
    assert words_to_number("one hundred and five") == 105
    assert words_to_number("minus three") == -3
    assert words_to_number("two thousand five hundred") == 2500
    assert words_to_number("hello") is None
