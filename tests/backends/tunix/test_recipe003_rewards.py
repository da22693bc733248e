"""Recipe 003's format rewards against the recipe's own regex (Tunix's GRPO demo, which the recipe's
``match_format_exactly`` / ``check_answer`` use): ``re.MULTILINE | re.DOTALL``, applied with ``search``."""

from __future__ import annotations

import random
import re

from grpoflow.rewards import RewardSet, Sample
from grpoflow.rewards.funcs import tag_format_match

RECIPE_MATCH_FORMAT = re.compile(
    r"^[\s]{0,}<reasoning>.+?</reasoning>.*?<answer>(.+?)</answer>[\s]{0,}$",
    flags=re.MULTILINE | re.DOTALL,
)


def recipe(text: str) -> str | None:
    m = RECIPE_MATCH_FORMAT.search(text)
    return None if m is None else m.group(1)


def score(name: str, completion: str, truth: str = "72") -> float:
    rs = RewardSet({"funcs": [name]}, max_response_length=1000)
    return rs.sample_components(Sample(completion, truth))[name]


def test_a_preamble_line_scores_as_in_the_recipe():
    completion = "Let me solve this step by step.\n<reasoning>48/2 = 24, 48 + 24 = 72</reasoning>\n<answer>72</answer>"
    assert recipe(completion) == "72"
    assert tag_format_match(completion) == "72"
    assert score("match_format_exactly", completion) == 3.0
    assert score("check_answer", completion) == 3.0
    # A line after the answer block also matches; text on the answer's own line does not.
    assert score("match_format_exactly", "<reasoning>r</reasoning><answer>72</answer>\nHope this helps.") == 3.0
    assert score("match_format_exactly", "<reasoning>r</reasoning><answer>72</answer> extra") == 0.0
    assert score("match_format_exactly", "So: <reasoning>r</reasoning><answer>72</answer>") == 0.0


def test_tag_format_match_equals_the_recipe_regex_on_random_texts():
    pieces = ["<reasoning>", "</reasoning>", "<answer>", "</answer>", "\n", " ", "\t", "x", "72", "\n  "]
    rng = random.Random(3)
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert tag_format_match(text) == recipe(text), repr(text)
