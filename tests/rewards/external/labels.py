"""Where grpoflow's answer convention (docs/answer-convention.md) labels an upstream case differently from the
upstream assertion — case id → (label, why) — and the cases a reasonable convention could label either way
(case id → why). ``port.py`` applies both; a case id is ``<repo name>:<file>:<line of the case>``."""

MV = "Math-Verify:tests/"
LE = "lighteval:tests/unit/metrics/test_extractive_match.py:"
HM = "math:modeling/math_equivalence_test.py:"

OVERRIDES: dict[str, tuple[bool, str]] = {
    MV + "test_all.py:565": (
        False,
        "a rounded decimal of a non-terminating value is not the exact value (convention §3 'Exact values'); "
        "upstream accepts it at precision 6",
    ),
    MV + "test_all.py:586": (False, "0.33 is a rounded decimal of 1/3 (convention §3 'Exact values')"),
    MV + "test_all.py:605": (False, "2.6667 is a rounded decimal of 8/3 (convention §3 'Exact values')"),
    MV + "test_all.py:810": (
        False,
        "the completion boxes 255 before it states 10,455: a box outranks every later un-boxed statement "
        "(convention §2a)",
    ),
    MV + "test_yujianll.py:28": (
        False,
        "1 + 1/e and 1 - 1/e are different values; the upstream assertion records a math-verify quirk",
    ),
    "SkyRL:skyrl-gym/tests/test_aime.py:13": (
        True,
        "0.5 is a terminating decimal: it equals 1/2 (convention §3 'Exact values'); upstream compares strictly",
    ),
    "SkyRL:skyrl-gym/tests/test_aime.py:14": (
        True,
        "an answer in number words is accepted (convention §3, 'seventy-two')",
    ),
    "SkyRL:skyrl-gym/tests/test_aime.py:17": (
        True,
        "the box is complete; the stray text after it is not part of the answer (convention §2a); upstream tests "
        "its end-token format",
    ),
    "SkyRL:skyrl-gym/tests/test_aime.py:19": (True, "as above: a complete box, stray text after it"),
    "rllm:tests/rewards/test_math_reward.py:45": (
        True,
        "without think tags the whole completion is the response and 'The answer is 4' gives 4 (convention §1.3, "
        "§2d); upstream's reward requires a reasoning delimiter (a format rule, not grading)",
    ),
    "rllm:tests/rewards/test_math_reward.py:56": (
        True,
        "'The answer is 4' after the reasoning is an answer phrase (convention §2d); upstream's reward requires a "
        "box (a format rule, not grading)",
    ),
    "SkyRL:skyrl-gym/tests/test_gsm8k.py:12": (
        True,
        "'The answer is 42' is an answer phrase (convention §2d); upstream's GSM8K reward requires '####'",
    ),
}

_GOLD_IS_TEXT = "the ground truth is a model's or a solution's prose without a box, not an answer key"
_DECIMAL_COMMA_GOLD = (
    "a ground truth written with a decimal comma ('1,22') may be the list {1, 22}: our convention reads a comma "
    "in a ground truth as a list separator"
)
_OPENING_LETTER = "the only choice letter stated as a result opens the response; the concluding sentence argues"
AMBIGUOUS: dict[str, str] = {
    MV + "test_all.py:71": _DECIMAL_COMMA_GOLD,
    MV + "test_all.py:87": _DECIMAL_COMMA_GOLD,
    MV + "test_all.py:132": "an inline $...$ broken over lines: a parser rule, a human reads 9",
    MV + "test_all.py:133": "an inline \\(...\\) broken over lines: a parser rule, a human reads 9",
    MV + "test_all.py:195": _GOLD_IS_TEXT,
    MV + "test_all.py:200": _GOLD_IS_TEXT,
    MV + "test_all.py:205": "the ground truth is prose; its box says '12 and 13' (between 12 and 13)",
    MV + "test_all.py:417": "x ≈ 11 for an exact 11: 'approximately' could be a hedge or the value",
    MV + "test_all.py:452": "the ground truth '1 = \\zzz = x = 0' is not a well-formed answer key",
    MV + "test_all.py:723": _GOLD_IS_TEXT,
    MV + "test_all.py:754": "'{1,3}' renders as the list 1,3; whether it states the pair (1,3) is a matter of reading",
    MV + "test_all.py:922": "the ground truth is a rounded decimal of the exact answer √17",
    MV + "test_boxed.py:8": "the ground truth's boxes are written with doubled backslashes (not LaTeX boxes)",
    MV + "test_numina_cases.py:121": "the ground truth is malformed (doubled backslashes, an unclosed box)",
    MV + "test_open_thoughts.py:79": "two boxes for two parts of a question with prose between them: the convention "
    "merges only adjacent boxes (§2a), a multi-part question might want both",
    MV + "test_open_thoughts.py:134": "two boxes for two parts of a question with prose between them (as above)",
    MV + "test_open_thoughts.py:149": "the ground truth boxes two parts with prose between them ('papers and'): "
    "the convention's rule a reads the last box; a two-part question wants both",
    MV + "test_string_extraction.py:18": _OPENING_LETTER,
    MV + "test_string_extraction.py:23": "'Because B is valid' argues for B without stating an answer",
    LE + "94": _GOLD_IS_TEXT,
    LE + "95": _GOLD_IS_TEXT,
    LE + "96": "the ground truth spreads a choice and its text over two lines",
    HM + "12": "is_equiv compares strings: whether '10, 4, -2' is a set of solutions (order free, convention §3) or "
    "a sequence depends on the question",
    HM + "47": "as above: a set of solutions or a sequence depends on the question",
}

# Cases whose upstream test asserts no verdict (only that the reward is 0 or 1): the convention's label.
_BACKSLASH_BOX = (
    "ported as \\boxed{185\\}: the answer's trailing backslash escapes the box's closing brace, so the box is "
    "unclosed (no answer, convention §2a) — an artifact of wrapping an answer-vs-answer case in a box"
)
AMBIGUOUS.update(
    {
        "NeMo-Skills:tests/test_math_equal.py:34(a, b)": _BACKSLASH_BOX,
        "NeMo-Skills:tests/test_math_equal.py:35(a, b)": _BACKSLASH_BOX,
    }
)

AR = "AReaL:tests/test_math_verify_reward.py:"
LABELS: dict[str, bool] = {
    AR + "233": False,  # 0.333333333 for 1/3: a rounded decimal (convention §3 'Exact values')
    AR + "268": True,
    AR + "340": False,  # 1.414 for sqrt(2): a rounded decimal
    AR + "422": True,
    AR + "446": True,  # 4 for 12/3: an unsimplified ground truth
    AR + "465": True,  # 3+2 for 5: an unsimplified answer (convention §3 'Equal but unsimplified forms')
    AR + "487": True,  # x = 4 for 4
    AR + "502": True,
    AR + "514": True,
    AR + "603": True,
    AR + "626": True,
    AR + "693": True,
    AR + "704": True,
}
_PYTHON_GOLD = "the ground truth is written in Python syntax (pi, sqrt(), *), not as an answer key in LaTeX"
AMBIGUOUS.update(
    {
        AR + "268": _PYTHON_GOLD,
        AR + "502": "the answer is an identity whose right-hand side is the ground truth: result or restatement",
        AR + "514": _PYTHON_GOLD + "; and it holds one root where the answer gives both (±)",
        AR + "603": _PYTHON_GOLD,
        AR + "626": _PYTHON_GOLD,
        AR + "693": _PYTHON_GOLD,
    }
)
