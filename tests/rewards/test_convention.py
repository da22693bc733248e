"""docs/answer-convention.md, rule by rule, both outcomes each — plus the decisions taken where it is silent (D…).

Each row: (id, completion, ground truth, expected correct, expected extracted answer or None when no answer is
found, expected source rule). ``ANY`` skips the extracted/source check where only the verdict matters.
"""

from __future__ import annotations

import pytest

from grpoflow.rewards import verify

ANY = object()
B = "\\boxed"

CASES = [
    # ---- §1.1 only the text after the last </think> counts --------------------------------------------------
    ("1.1 box in reasoning ignored", f"<think>so {B}{{5}}</think>The answer is {B}{{7}}.", "7", True, "7", "boxed"),
    (
        "1.1 box in reasoning ignored (wrong)",
        f"<think>so {B}{{5}}</think>The answer is {B}{{7}}.",
        "5",
        False,
        "7",
        "boxed",
    ),
    (
        "1.1 phrase in reasoning ignored",
        "<think>the answer is 5</think>\nSo the total is 6.",
        "6",
        True,
        "6",
        "conclusion",
    ),
    (
        "1.1 answer tag in reasoning ignored",
        "<think><answer>5</answer></think> The answer is 9.",
        "5",
        False,
        "9",
        "phrase",
    ),
    ("1.1 last </think> wins", f"<think>a</think> draft {B}{{3}} </think> final {B}{{4}}", "4", True, "4", "boxed"),
    (
        "1.1 last </think> wins (wrong)",
        f"<think>a</think> draft {B}{{3}} </think> final {B}{{4}}",
        "3",
        False,
        "4",
        "boxed",
    ),
    # ---- §1.2 <think> without </think>: cut off during reasoning, no answer -----------------------------------
    ("1.2 unclosed think", f"<think>48/2 = 24, so the answer is {B}{{72}}", "72", False, None, None),
    ("1.2 unclosed think, long", "<think>" + "let me think. " * 200 + "72", "72", False, None, None),
    ("1.2 closed think", f"<think>48/2 = 24</think>\nThe answer is {B}{{72}}", "72", True, "72", "boxed"),
    # ---- §1.3 no think tags: the whole completion; empty think block skipped ---------------------------------
    ("1.3 no tags", f"48/2 = 24 and 48 + 24 = 72, so {B}{{72}}.", "72", True, "72", "boxed"),
    ("1.3 no tags (wrong)", f"48/2 = 24 and 48 + 24 = 72, so {B}{{71}}.", "72", False, "71", "boxed"),
    ("1.3 empty think block", f"<think>\n\n</think>\n\n{B}{{72}}", "72", True, "72", "boxed"),
    ("1.3 empty think block (wrong)", f"<think>\n\n</think>\n\n{B}{{73}}", "72", False, "73", "boxed"),
    ("1.3 </think> only (template opened it)", f"reasoning...</think>\n\n{B}{{72}}", "72", True, "72", "boxed"),
    # ---- §1.4 chat-template end tokens ignored ---------------------------------------------------------------
    ("1.4 im_end after box", f"{B}{{72}}<|im_end|>", "72", True, "72", "boxed"),
    ("1.4 endoftext after hashes", "So she has 72.\n#### 72<|endoftext|>", "72", True, "72", "hashes"),
    ("1.4 im_end after sentence", "So the total is 72.<|im_end|>", "72", True, "72", "conclusion"),
    ("1.4 im_end, wrong value", "So the total is 71.<|im_end|>", "72", False, "71", "conclusion"),
    # ---- §2a the last \boxed{...} ----------------------------------------------------------------------------
    ("2a last box", f"First {B}{{3}}.\nThen {B}{{4}}.", "4", True, "4", "boxed"),
    # Unicode math inside a box (issue 12)
    ("2a unicode root", f"{B}{{√2}}", "\\sqrt{2}", True, "√2", "boxed"),
    ("2a unicode root (wrong)", f"{B}{{√3}}", "\\sqrt{2}", False, "√3", "boxed"),
    ("2a unicode root with factor", f"{B}{{2√3}}", "\\sqrt{12}", True, "2√3", "boxed"),
    ("2a unicode root of a group", f"{B}{{√(x+1)}}", "\\sqrt{x+1}", True, "√(x+1)", "boxed"),
    ("2a unicode infinity", f"{B}{{∞}}", "\\infty", True, "∞", "boxed"),
    ("2a unicode minus infinity", f"{B}{{−∞}}", "-\\infty", True, "−∞", "boxed"),
    ("2a unicode minus infinity (wrong)", f"{B}{{∞}}", "-\\infty", False, "∞", "boxed"),
    ("2a unicode interval", f"{B}{{(−∞, 2)}}", "(-\\infty, 2)", True, "(−∞, 2)", "boxed"),
    ("2a unicode interval (wrong end)", f"{B}{{(−∞, 2]}}", "(-\\infty, 2)", False, "(−∞, 2]", "boxed"),
    ("2a unicode pi", f"{B}{{3π}}", "3\\pi", True, "3π", "boxed"),
    ("2a unicode times", f"{B}{{2×10^3}}", "2000", True, "2×10^3", "boxed"),
    ("2a last box (first is not it)", f"First {B}{{3}}.\nThen {B}{{4}}.", "3", False, "4", "boxed"),
    ("2a fbox", "\\fbox{72}", "72", True, "72", "boxed"),
    ("2a boxed with a space", "\\boxed {72}", "72", True, "72", "boxed"),
    ("2a unclosed box is no answer", f"so the answer is {B}{{72", "72", False, None, None),
    ("2a stray closing braces", f"{B}{{72}}}}}} done", "72", True, "72", "boxed"),
    ("2a nested boxes", f"{B}{{{B}{{72}}}}", "72", True, "72", "boxed"),
    ("2a nested boxes (wrong)", f"{B}{{{B}{{71}}}}", "72", False, "71", "boxed"),
    ("2a empty box ignored", f"Put the answer in {B}{{}}. The answer is 72.", "72", True, "72", "phrase"),
    ("2a empty box ignored, earlier box used", f"{B}{{72}} (format: {B}{{ }})", "72", True, "72", "boxed"),
    (
        "2a adjacent boxes are one answer",
        f"The solutions are ${B}{{-3}}$ and ${B}{{2}}$.",
        "-3, 2",
        True,
        "-3, 2",
        "boxed",
    ),
    (
        "2a adjacent boxes, order free",
        f"The solutions are ${B}{{2}}$ and ${B}{{-3}}$.",
        "-3, 2",
        True,
        "2, -3",
        "boxed",
    ),
    ("2a adjacent boxes: a hedge", f"{B}{{70}} {B}{{71}} {B}{{72}}", "72", False, "70, 71, 72", "boxed"),
    ("2a adjacent boxes, comma", f"{B}{{1}}, {B}{{2}}", "1, 2", True, "1, 2", "boxed"),
    ("2a adjacent boxes, or", f"{B}{{72}} or {B}{{73}}", "72", False, "72, 73", "boxed"),
    ("2a boxes on separate lines not merged", f"{B}{{-3}}\n{B}{{2}}", "2", True, "2", "boxed"),
    ("2a boxes on separate lines not merged (list)", f"{B}{{-3}}\n{B}{{2}}", "-3, 2", False, "2", "boxed"),
    ("2a boxes in separate sentences", f"It is {B}{{3}}. Checking: {B}{{4}}", "4", True, "4", "boxed"),
    (
        "2a box outranks later statements",
        f"...answer is ${B}{{A}}$. Wait... so the answer is (B)",
        "A",
        True,
        "A",
        "boxed",
    ),
    (
        "2a box outranks later statements (wrong)",
        f"...answer is ${B}{{A}}$. Wait... so the answer is (B)",
        "B",
        False,
        "A",
        "boxed",
    ),
    ("2a box outranks later hashes", f"{B}{{72}}\n#### 73", "72", True, "72", "boxed"),
    # ---- §2b the last <answer>...</answer>, read with rules c-e ---------------------------------------------
    ("2b bare value", "<answer>72</answer>", "72", True, "72", "answer_tag"),
    ("2b bare value (wrong)", "<answer>73</answer>", "72", False, "73", "answer_tag"),
    ("2b currency", "<answer>$1,680</answer>", "1680", True, "$1,680", "answer_tag"),
    ("2b sentence", "<answer>Tom earns $1,680 in 4 weeks.</answer>", "1680", True, "$1,680", "answer_tag"),
    ("2b sentence (wrong)", "<answer>Tom earns $1,680 in 4 weeks.</answer>", "4", False, "$1,680", "answer_tag"),
    ("2b equation: the right-hand side", "<answer>12 × 35 × 4 = 1680</answer>", "1680", True, "1680", "answer_tag"),
    ("2b equation (wrong)", "<answer>12 × 35 × 4 = 1680</answer>", "12", False, "1680", "answer_tag"),
    ("2b last tag", "<answer>5</answer> no wait <answer>6</answer>", "6", True, "6", "answer_tag"),
    ("2b last tag (wrong)", "<answer>5</answer> no wait <answer>6</answer>", "5", False, "6", "answer_tag"),
    (
        "2b tag outranks hashes and phrases",
        "<answer>6</answer>\n#### 5\nThe answer is 5.",
        "6",
        True,
        "6",
        "answer_tag",
    ),
    ("2b box outranks tag", f"<answer>{B}{{6}}</answer>", "6", True, "6", "boxed"),
    ("2b tag with hashes inside", "<answer>so\n#### 72</answer>", "72", True, "72", "answer_tag"),
    ("2b tag with latex", "<answer>$\\frac{3}{4}$</answer>", "0.75", True, "\\frac{3}{4}", "answer_tag"),
    (
        "2b tag with reasoning outside",
        "<reasoning>48/2=24</reasoning>\n<answer>72</answer>",
        "72",
        True,
        "72",
        "answer_tag",
    ),
    # bare LaTeX in the tag is the value itself, not a sentence to pick a number from (issue 12)
    ("2b bare latex fraction", "<answer>\\frac{3}{4}</answer>", "\\frac{3}{4}", True, "\\frac{3}{4}", "answer_tag"),
    ("2b bare latex fraction (wrong)", "<answer>\\frac{3}{4}</answer>", "3", False, "\\frac{3}{4}", "answer_tag"),
    ("2b bare latex radical", "<answer>2\\sqrt{2}</answer>", "\\sqrt{8}", True, "2\\sqrt{2}", "answer_tag"),
    ("2b bare latex pi", "<answer>\\frac{\\pi}{3}</answer>", "\\frac{\\pi}{3}", True, "\\frac{\\pi}{3}", "answer_tag"),
    ("2b bare polynomial", "<answer>x^2+2x+1</answer>", "(x+1)^2", True, "x^2+2x+1", "answer_tag"),
    ("2b bare polynomial (wrong)", "<answer>x^2+2x+1</answer>", "2", False, "x^2+2x+1", "answer_tag"),
    ("2b bare interval", "<answer>(-\\infty, 2)</answer>", "(-\\infty, 2)", True, "(-\\infty, 2)", "answer_tag"),
    (
        "2b bare interval (wrong end)",
        "<answer>(-\\infty, 2]</answer>",
        "(-\\infty, 2)",
        False,
        "(-\\infty, 2]",
        "answer_tag",
    ),
    ("2b bare hedge", "<answer>72 or 73</answer>", "72", False, ANY, "answer_tag"),
    # ---- §2c the last #### X line ----------------------------------------------------------------------------
    ("2c hashes", "48/2 = 24\n48 + 24 = 72\n#### 72", "72", True, "72", "hashes"),
    ("2c hashes (wrong)", "48/2 = 24\n48 + 24 = 72\n#### 71", "72", False, "71", "hashes"),
    ("2c last hashes line", "#### 5\nrecheck\n#### 6", "6", True, "6", "hashes"),
    ("2c hashes with commas", "#### 1,680", "1680", True, "1,680", "hashes"),
    ("2c hashes outrank phrases", "The answer is 5.\n#### 6", "6", True, "6", "hashes"),
    ("2c hashes outrank phrases (wrong)", "The answer is 5.\n#### 6", "5", False, "6", "hashes"),
    # ---- §2d the last explicit answer phrase -----------------------------------------------------------------
    ("2d the answer is", "Adding up: the answer is 72.", "72", True, "72", "phrase"),
    ("2d the final answer is", "The final answer is 72", "72", True, "72", "phrase"),
    ("2d Answer:", "48 + 24\nAnswer: 72", "72", True, "72", "phrase"),
    ("2d Answer: (wrong)", "48 + 24\nAnswer: 71", "72", False, "71", "phrase"),
    ("2d bold Answer:", "**Answer:** 72 clips", "72", True, "72", "phrase"),
    ("2d Final Answer:", "Final Answer: $72$", "72", True, "72", "phrase"),
    ("2d markdown heading", "## Final Answer\n\n72", "72", True, "72", "phrase"),
    ("2d markdown heading (latex)", "### Answer\n$\\frac{3}{4}$", "\\frac34", True, "\\frac{3}{4}", "phrase"),
    ("2d Chinese", "答案是 72", "72", True, "72", "phrase"),
    ("2d last phrase wins", "The answer is 5. Hmm, no: the answer is 6.", "6", True, "6", "phrase"),
    ("2d last phrase wins (wrong)", "The answer is 5. Hmm, no: the answer is 6.", "5", False, "6", "phrase"),
    ("2d phrase outranks the conclusion", "The answer is 6. In total 7 steps.", "6", True, "6", "phrase"),
    ("2d restatement after the answer", "The answer is 72 muffins, which is 6 dozen.", "72", True, "72", "phrase"),
    # tuples and lettered choices after an answer phrase, without a box (issue 12)
    ("2d tuple", "The answer is (3, -2).", "(3, -2)", True, "(3, -2)", "phrase"),
    ("2d tuple order matters", "The answer is (-2, 3).", "(3, -2)", False, "(-2, 3)", "phrase"),
    ("2d tuple of three", "So the final answer is (1, 2, 3)", "(1,2,3)", True, "(1, 2, 3)", "phrase"),
    ("2d interval", "The answer is [1, 3).", "[1, 3)", True, "[1, 3)", "phrase"),
    ("2d interval (wrong end)", "The answer is [1, 3].", "[1, 3)", False, "[1, 3]", "phrase"),
    ("2d choice letter", "The answer is B.", "B", True, "B", "phrase"),
    ("2d choice letter (wrong)", "The answer is C.", "B", False, "C", "phrase"),
    ("2d choice in parentheses", "The correct answer is (B).", "\\text{(B)}", True, "(B)", "phrase"),
    ("2d choice with its value", "Answer: (D) 23", "D", True, "(D)", "phrase"),
    ("2d choice in bold", "The final answer is **C**", "C", True, ANY, "phrase"),
    ("2d choices hedged", "The answer is (B) or (C).", "B", False, ANY, ANY),
    ("2d a word is not a choice", "The answer is A lot of apples: 5.", "A", False, ANY, ANY),
    # ---- §2e the result of the concluding sentence of a complete response ------------------------------------
    ("2e bold result", "So the total is **72** muffins.", "72", True, "72", "conclusion"),
    ("2e bold result (wrong)", "So the total is **72** muffins.", "73", False, "72", "conclusion"),
    ("2e math result", "Therefore $x = 5$.", "5", True, "x = 5", "conclusion"),
    ("2e plain number", "Natalia sold 48+24 = 72 clips altogether in April and May.", "72", True, "72", "conclusion"),
    (
        "2e other units do not replace it",
        "So the baker made 72 muffins, which is 6 dozen.",
        "72",
        True,
        "72",
        "conclusion",
    ),
    (
        "2e other units do not replace it (wrong)",
        "So the baker made 72 muffins, which is 6 dozen.",
        "6",
        False,
        "72",
        "conclusion",
    ),
    ("2e truncated mid-sentence", "So the total number of muffins is", "72", False, None, None),
    ("2e truncated mid-equation", "So the total is 48 + 24 =", "72", False, None, None),
    ("2e truncated inside math", "Therefore \\(x = \\frac{3", "72", False, None, None),
    ("2e complete without a full stop", "So the total is 72", "72", True, "72", "conclusion"),
    ("2e earlier sentences do not count", "She sold 72 clips. Then she went home.", "72", False, None, None),
    ("2e no result", "I am not sure how to solve this.", "72", False, None, None),
    # ---- §3 hedging is wrong ---------------------------------------------------------------------------------
    ("3 hedge in a box", f"{B}{{72 \\text{{ or }} 73}}", "72", False, ANY, "boxed"),
    ("3 hedge in a sentence", "So the answer is 72 or 73.", "72", False, "72", "phrase"),
    ("3 every number", f"{B}{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}", "7", False, ANY, "boxed"),
    ("3 list when the truth is that list", f"{B}{{1, 2, 3}}", "3, 2, 1", True, ANY, "boxed"),
    ("3 or when the truth says or", f"{B}{{\\text{{yes or no}}}}", "\\text{yes or no}", True, ANY, "boxed"),
    # ---- §3 code is not an answer (and is never executed: see test_safety) ----------------------------------
    ("3 code in a box", f"{B}{{sum([48, 24])}}", "72", False, ANY, "boxed"),
    ("3 code in a phrase", "The answer is `print(48 + 24)`", "72", False, ANY, "phrase"),
    ("3 python power", f"{B}{{2**3}}", "8", False, ANY, "boxed"),
    ("3 latex power is math", f"{B}{{2^3}}", "8", True, ANY, "boxed"),
    ("3 latex max is math", f"{B}{{\\max(3, 5)}}", "5", True, ANY, "boxed"),
    # ---- §3 number formatting does not matter ----------------------------------------------------------------
    ("3 thousands comma", f"{B}{{1,680}}", "1680", True, "1,680", "boxed"),
    ("3 thousands {,}", f"{B}{{1{{,}}680}}", "1680", True, ANY, "boxed"),
    ("3 thousands \\,", f"{B}{{1\\,680}}", "1,680", True, ANY, "boxed"),
    ("3 currency $", f"{B}{{\\$18}}", "18", True, ANY, "boxed"),
    ("3 currency plain $", "<answer>$18</answer>", "18", True, ANY, "answer_tag"),
    ("3 trailing .00", f"{B}{{18.00}}", "18", True, ANY, "boxed"),
    ("3 trailing .0", "#### 18.0", "18", True, ANY, "hashes"),
    ("3 wrong decimal", f"{B}{{18.5}}", "18", False, ANY, "boxed"),
    ("3 leading zeros (AIME)", f"{B}{{072}}", "72", True, ANY, "boxed"),
    ("3 unit word", f"{B}{{72 \\text{{ muffins}}}}", "72", True, ANY, "boxed"),
    ("3 unit word plain", "<answer>72 muffins</answer>", "72", True, ANY, "answer_tag"),
    ("3 degrees ^\\circ", f"{B}{{30^\\circ}}", "30", True, ANY, "boxed"),
    ("3 degrees °", f"{B}{{30°}}", "30", True, ANY, "boxed"),
    ("3 unicode minus", f"{B}{{−5}}", "-5", True, ANY, "boxed"),
    ("3 sign matters", f"{B}{{5}}", "-5", False, ANY, "boxed"),
    # ---- §3 percent ------------------------------------------------------------------------------------------
    ("3 percent sign", f"{B}{{25\\%}}", "25", True, ANY, "boxed"),
    ("3 percent word", "The answer is 25 percent.", "25", True, ANY, "phrase"),
    ("3 fraction is not the percentage", f"{B}{{0.25}}", "25", False, ANY, "boxed"),
    ("3 percent of the wrong number", f"{B}{{20\\%}}", "25", False, ANY, "boxed"),
    # ---- §3 exact values -------------------------------------------------------------------------------------
    ("3 terminating decimal = fraction", f"{B}{{0.5}}", "\\frac12", True, ANY, "boxed"),
    ("3 2.25 = 9/4", f"{B}{{2.25}}", "\\dfrac94", True, ANY, "boxed"),
    ("3 -3.5 = -7/2", f"{B}{{-3.5}}", "-\\frac72", True, ANY, "boxed"),
    ("3 fraction = decimal truth", f"{B}{{\\frac{{3}}{{4}}}}", "0.75", True, ANY, "boxed"),
    ("3 rounded irrational", f"{B}{{0.866}}", "\\frac{\\sqrt3}{2}", False, ANY, "boxed"),
    ("3 rounded irrational, 6 digits", f"{B}{{0.866025}}", "\\frac{\\sqrt3}{2}", False, ANY, "boxed"),
    ("3 rounded 1/6", f"{B}{{0.1667}}", "\\frac16", False, ANY, "boxed"),
    ("3 rounded 4pi", f"{B}{{12.57}}", "4\\pi", False, ANY, "boxed"),
    ("3 exact with approx", f"{B}{{\\frac{{1}}{{6}} \\approx 0.167}}", "\\frac16", True, ANY, "boxed"),
    # ---- §3 unsimplified / equivalent forms ------------------------------------------------------------------
    ("3 sqrt8 = 2sqrt2", f"{B}{{\\sqrt8}}", "2\\sqrt2", True, ANY, "boxed"),
    ("3 sqrt8 != 3sqrt2", f"{B}{{\\sqrt8}}", "3\\sqrt2", False, ANY, "boxed"),
    ("3 2/4 = 1/2", f"{B}{{\\frac{{2}}{{4}}}}", "\\frac12", True, ANY, "boxed"),
    ("3 rationalised", f"{B}{{\\frac{{3}}{{2\\sqrt3}}}}", "\\frac{\\sqrt3}{2}", True, ANY, "boxed"),
    ("3 24/4 = 6", f"{B}{{\\frac{{24}}{{4}}}}", "6", True, ANY, "boxed"),
    ("3 expanded polynomial", f"{B}{{(x+1)^2}}", "x^2+2x+1", True, ANY, "boxed"),
    ("3 different polynomial", f"{B}{{(x+1)^2}}", "x^2+x+1", False, ANY, "boxed"),
    ("3 complex order", f"{B}{{2i+1}}", "1+2i", True, ANY, "boxed"),
    ("3 pi/3", f"{B}{{\\frac13\\pi}}", "\\frac\\pi3", True, ANY, "boxed"),
    ("3 pi/3 != pi/6", f"{B}{{\\frac16\\pi}}", "\\frac\\pi3", False, ANY, "boxed"),
    # ---- §3 mixed numbers ------------------------------------------------------------------------------------
    ("3 mixed number", f"{B}{{1\\frac12}}", "\\frac32", True, ANY, "boxed"),
    ("3 mixed number is not a product", f"{B}{{1\\frac12}}", "\\frac12", False, ANY, "boxed"),
    ("3 mixed number vs decimal", f"{B}{{2\\frac{{1}}{{4}}}}", "2.25", True, ANY, "boxed"),
    # ---- §3 order and brackets -------------------------------------------------------------------------------
    ("3 tuple order matters", f"{B}{{(3,-2)}}", "(3,-2)", True, ANY, "boxed"),
    ("3 tuple order matters (wrong)", f"{B}{{(-2,3)}}", "(3,-2)", False, ANY, "boxed"),
    ("3 tuple signs matter", f"{B}{{(3,2)}}", "(3,-2)", False, ANY, "boxed"),
    ("3 interval ends matter", f"{B}{{[1,2]}}", "[1,2)", False, ANY, "boxed"),
    ("3 interval ends (right)", f"{B}{{[1,2)}}", "[1,2)", True, ANY, "boxed"),
    ("3 union order free", f"{B}{{[1,2)\\cup(3,4]}}", "(3,4]\\cup[1,2)", True, ANY, "boxed"),
    ("3 solutions order free", f"{B}{{2, -3}}", "-3, 2", True, ANY, "boxed"),
    ("3 missing solution", f"{B}{{2}}", "-3, 2", False, ANY, "boxed"),
    ("3 extra solution", f"{B}{{2, -3, 4}}", "-3, 2", False, ANY, "boxed"),
    ("3 inequality = interval", f"{B}{{x < 2}}", "(-\\infty, 2)", True, ANY, "boxed"),
    ("3 inequality != interval", f"{B}{{x \\le 2}}", "(-\\infty, 2)", False, ANY, "boxed"),
    ("3 assignments = point", f"{B}{{x = 3, y = -2}}", "(3, -2)", True, ANY, "boxed"),
    ("3 assignments != point", f"{B}{{x = -2, y = 3}}", "(3, -2)", False, ANY, "boxed"),
    # ---- §3 x = 5 equals 5; equations --------------------------------------------------------------------------
    ("3 x = 5", f"{B}{{x = 5}}", "5", True, ANY, "boxed"),
    ("3 x = 4", f"{B}{{x = 4}}", "5", False, ANY, "boxed"),
    ("3 same line", f"{B}{{y = 5 - 2x}}", "y = -2x + 5", True, ANY, "boxed"),
    ("3 other line", f"{B}{{y = 5 + 2x}}", "y = -2x + 5", False, ANY, "boxed"),
    # ---- §3 multiple choice ----------------------------------------------------------------------------------
    ("3 choice letter", f"{B}{{B}}", "B", True, ANY, "boxed"),
    ("3 choice (B)", f"{B}{{(B)}}", "B", True, ANY, "boxed"),
    ("3 choice \\text{(B)}", f"{B}{{\\text{{(B)}}}}", "B", True, ANY, "boxed"),
    ("3 choice \\textbf{(B)}\\ 23", f"{B}{{\\textbf{{(B)}}\\ 23}}", "B", True, ANY, "boxed"),
    ("3 choice truth in parentheses", f"{B}{{B}}", "(B)", True, ANY, "boxed"),
    ("3 wrong choice", f"{B}{{\\textbf{{(C)}}\\ 23}}", "B", False, ANY, "boxed"),
    # ---- §3 bases --------------------------------------------------------------------------------------------
    ("3 base digits", f"{B}{{1011}}", "1011_2", True, ANY, "boxed"),
    ("3 base with subscript", f"{B}{{1011_2}}", "1011_2", True, ANY, "boxed"),
    ("3 base decimal value is wrong", f"{B}{{11}}", "1011_2", False, ANY, "boxed"),
    # ---- §3 answers in words ---------------------------------------------------------------------------------
    ("3 sign in words", "The submarine ends up 105 meters below sea level.", "-105", True, "-105", "conclusion"),
    (
        "3 sign in words (wrong truth)",
        "The submarine ends up 105 meters below sea level.",
        "105",
        False,
        "-105",
        "conclusion",
    ),
    ("3 number in words", "The answer is seventy-two.", "72", True, "72", "phrase"),
    ("3 number in words (wrong)", "The answer is seventy-three.", "72", False, "73", "phrase"),
    # ---- realistic Qwen3 endings ------------------------------------------------------------------------------
    ("Q heading then bold sentence", "### Final Answer\nJanet makes **$18** every day.", "18", True, "$18", "phrase"),
    ("Q currency sentence", "Thus, Janet makes $18 per day at the farmers' market.", "18", True, "$18", "conclusion"),
    (
        "Q currency sentence (wrong)",
        "Thus, Janet makes $18 per day at the farmers' market.",
        "2",
        False,
        "$18",
        "conclusion",
    ),
    ("Q inline math", "Therefore, she has \\( 72 \\) clips.", "72", True, "72", "conclusion"),
    ("Q display box", "$$\\boxed{72}$$", "72", True, "72", "boxed"),
    ("Q bare last line", "Let's add them.\n\n72", "72", True, "72", "conclusion"),
    ("Q plain fraction", "The answer is 1/2.", "\\frac12", True, "1/2", "phrase"),
    ("Q plain fraction (wrong)", "The answer is 1/2.", "2", False, "1/2", "phrase"),
    ("Q bold steps then Answer", "**Step 3:** Add: 48 + 24 = 72.\n\n**Answer:** 72", "72", True, "72", "phrase"),
    ("Q rejected value", "Hence the required number is 5, not 6.", "5", True, "5", "conclusion"),
    ("Q rejected value (wrong)", "Hence the required number is 5, not 6.", "6", False, "5", "conclusion"),
    ("Q negative", "The temperature dropped to -3 degrees.", "-3", True, "-3", "conclusion"),
    # ---- Decisions where the convention is silent ------------------------------------------------------------
    ("D1 cut off inside a later box: no answer", f"so {B}{{5}}. Wait, recheck: {B}{{7", "5", False, None, None),
    ("D1 unclosed box before a closed one", f"{B}{{3 oops {B}{{5}}", "5", True, "5", "boxed"),
    ("D2 unclosed answer tag: its text is read", "<answer>72", "72", True, "72", "conclusion"),
    ("D2 unclosed answer tag, truncated sentence", "<answer>Tom earns $1,680 in", "1680", False, None, None),
    (
        "D3 #### heading is not an answer line",
        "#### Step 2: add\nSo she has 18 apples.",
        "18",
        True,
        "18",
        "conclusion",
    ),
    ("D3 #### heading, wrong value", "#### Step 2: add\nSo she has 18 apples.", "2", False, "18", "conclusion"),
    ("D4 closing pleasantry skipped", "So the total is 72. I hope this helps!", "72", True, "72", "conclusion"),
    (
        "D4 closing pleasantry skipped (wrong)",
        "So the total is 71. I hope this helps!",
        "72",
        False,
        "71",
        "conclusion",
    ),
    ("D5 25% equals 0.25", f"{B}{{25\\%}}", "0.25", True, ANY, "boxed"),
    ("D5 25 does not equal 0.25", f"{B}{{25}}", "0.25", False, ANY, "boxed"),
    ("D6 the same value boxed twice", f"{B}{{5}} and {B}{{5}}", "5", True, "5, 5", "boxed"),
    ("D7 ends in a code block", "Let me compute:\n```python\nprint(48 + 24)\n```", "72", False, None, None),
    ("D8 context numbers are not the result", "In 4 weeks, Tom earns $1,680.", "1680", True, "$1,680", "conclusion"),
    ("D8 context numbers (wrong)", "Tom has 5 apples left after 3 days.", "3", False, "5", "conclusion"),
    ("D9 thousands comma vs list", f"{B}{{1, 680}}", "1680", False, ANY, "boxed"),
    ("D10 empty truth is never matched", f"{B}{{}}", "", False, None, None),
    # ---- Issue 18: reward leaks closed at the root ------------------------------------------------------------
    # Equations are relations: equal only when they state the same relation (same polynomial up to a factor).
    ("E1 plane vs other plane", f"{B}{{x + y - z + 2 = 0}}", "5x - 7y + 11z + 4 = 0", False, ANY, "boxed"),
    ("E1 plane scaled", f"{B}{{10x - 14y + 22z + 8 = 0}}", "5x - 7y + 11z + 4 = 0", True, ANY, "boxed"),
    ("E1 plane rearranged", f"{B}{{-5x + 7y - 11z = 4}}", "5x - 7y + 11z + 4 = 0", True, ANY, "boxed"),
    ("E1 relation vs its right-hand side", f"{B}{{0}}", "5x - 7y + 11z + 4 = 0", False, ANY, "boxed"),
    ("E1 same right-hand side, other relation", f"{B}{{x + y = 5}}", "2x = 5", False, ANY, "boxed"),
    ("E1 solved form of the relation", f"{B}{{x = \\frac{{5}}{{2}}}}", "2x = 5", True, ANY, "boxed"),
    ("E1 value written first", f"{B}{{x = 2}}", "2=x", True, ANY, "boxed"),
    ("E1 value written first, bare value", f"{B}{{2}}", "2 = y", True, ANY, "boxed"),
    ("E1 value written first (wrong)", f"{B}{{3}}", "2=x", False, ANY, "boxed"),
    ("E1 value for another name", f"{B}{{y = 2}}", "x = 2", False, ANY, "boxed"),
    # Labelled answers compare label by label.
    ("E2 labels swapped", f"{B}{{a_{{37}} = 2, a_3 = 19}}", "a_3 = 2, a_{37} = 19", False, ANY, "boxed"),
    ("E2 labels in another order", f"{B}{{a_{{37}} = 19, a_3 = 2}}", "a_3 = 2, a_{37} = 19", True, ANY, "boxed"),
    ("E2 a and b swapped", f"{B}{{a=2, b=19}}", "a=19, b=2", False, ANY, "boxed"),
    ("E2 a and b reordered", f"{B}{{b=2, a=19}}", "a=19, b=2", True, ANY, "boxed"),
    # Exact values are compared exactly (relative to their size), never with an absolute float tolerance.
    ("E3 tiny factorial reciprocals", f"{B}{{\\frac{{1}}{{2004!}}}}", "\\frac{1}{2006!}", False, ANY, "boxed"),
    ("E3 tiny factorial reciprocal (right)", f"{B}{{\\frac{{1}}{{2004!}}}}", "\\frac{1}{2004!}", True, ANY, "boxed"),
    ("E3 tiny powers", f"{B}{{\\frac{{1}}{{2^{{98}}}}}}", "\\frac{1}{2^{99}}", False, ANY, "boxed"),
    ("E3 tiny power, other form", f"{B}{{2^{{-99}}}}", "\\frac{1}{2^{99}}", True, ANY, "boxed"),
    ("E3 tiny value", f"{B}{{10^{{-20}}}}", "10^{-21}", False, ANY, "boxed"),
    # MATH's thousands separator.
    ("E4 MATH thousands", f"The answer is ${B}{{10,\\!000}}$.", "10000", True, ANY, "boxed"),
    ("E4 MATH thousands, currency", f"${B}{{\\$15,\\!000}}$", "15000", True, ANY, "boxed"),
    ("E4 MATH thousands, spaced", f"{B}{{11,\\! 111,\\! 100}}", "11111100", True, ANY, "boxed"),
    ("E4 MATH thousands (wrong)", f"{B}{{11,\\! 111,\\! 101}}", "11111100", False, ANY, "boxed"),
    ("E4 MATH thousands in the truth", f"{B}{{10000}}", "10,\\!000", True, ANY, "boxed"),
    ("E4 a list is not a thousands number", f"{B}{{1,2}}", "10,\\!000", False, ANY, "boxed"),
    # Decisions where the convention was silent (docs/answer-convention.md).
    ("D11 decimal comma in the answer", f"{B}{{1000,99}}", "1000.99", True, ANY, "boxed"),
    ("D11 decimal comma (wrong)", f"{B}{{2,75}}", "2.74", False, ANY, "boxed"),
    ("D11 a thousands group is no decimal comma", f"{B}{{1,500}}", "1.5", False, ANY, "boxed"),
    ("D11 against a list it is a list", f"{B}{{1,5}}", "1, 5", True, ANY, "boxed"),
    ("D12 Oxford comma", f"{B}{{19, 46, \\text{{ and }} 82}}", "19, 46, and 82", True, ANY, "boxed"),
    ("D12 Oxford comma (wrong)", f"{B}{{19, 46, \\text{{ and }} 83}}", "19, 46, and 82", False, ANY, "boxed"),
    ("D13 a worked solution as the truth", f"{B}{{20}}", "So $x = 1/5$, or $\\boxed{20}$ percent.", True, ANY, "boxed"),
    # ---- Issue 18: answers without a box (rules b-e) --------------------------------------------------------
    ("E5 a named quantity is no result", "Final Answer: The largest $n$ is 34.", "34", True, "34", "phrase"),
    ("E5 a named quantity (wrong)", "Final Answer: The largest $n$ is 35.", "34", False, "35", "phrase"),
    ("E5 a named figure", "So the volume of $ABCDEFGH$ is 120.", "120", True, "120", "conclusion"),
    ("E5 a named function", "The most points in the domain of $f(x)$ is 19.", "19", True, "19", "conclusion"),
    (
        "E5 a matrix in the concluding sentence",
        "The inverse is $ \\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix} $.",
        "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
        True,
        ANY,
        "conclusion",
    ),
    (
        "E5 a matrix in the concluding sentence (wrong)",
        "The inverse is $\\begin{pmatrix} 1 & 2 \\\\ 3 & 5 \\end{pmatrix}$.",
        "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
        False,
        ANY,
        "conclusion",
    ),
    ("E5 a relation is kept whole", "Therefore the solution set is $x < 2$.", "(-\\infty, 2)", True, "x < 2", ANY),
    ("E5 a relation is not its number", "Therefore the solution set is $x < 2$.", "2", False, "x < 2", ANY),
    ("E5 an equation is kept whole", "So the plane is $-34x-45y+20z-100=0$.", "34x+45y-20z+100=0", True, ANY, ANY),
    (
        "E5 prose result after a display equation",
        "We get $$\\frac{a}{b} = \\frac{2}{1}.$$ Therefore the error increases by 100%.",
        "100",
        True,
        ANY,
        "conclusion",
    ),
    ("E5 bare LaTeX as the response", "\\frac{4}{23}", "8/46", True, ANY, "conclusion"),
    ("E5 bare LaTeX (wrong)", "\\frac{4}{25}", "8/46", False, ANY, "conclusion"),
    (
        "E6 next turn after the answer",
        "So the total is 72. I hope it is correct. <|im_start|>user",
        "72",
        True,
        "72",
        ANY,
    ),
    ("E6 next turn after the answer (wrong)", "So the total is 71.<|im_start|>user\nHi", "72", False, "71", ANY),
    ("E7 'The answer:' and a letter", "The answer: D, it doesn't make sense for it to be A or B", "D", True, "D", ANY),
    ("E7 'The answer is for sure'", "The answer is for sure D, it can't be A or B", "D", True, "D", "phrase"),
    ("E7 'The answer is for sure' (wrong)", "The answer is for sure D, it can't be A or B", "A", False, "D", ANY),
    ("E7 French answer phrase", "Réponse : Janeth aura encore 220 $ à payer d'ici 12 mois.", "220", True, "220", ANY),
    ("E7 French phrase and a letter", "réponse est C non A", "C", True, "C", "phrase"),
    ("E7 Chinese phrase and bare LaTeX", "答案：每份应该是 (\\frac{2}{5}) 吨。", "2/5", True, ANY, "phrase"),
    ("E7 Chinese phrase and bare LaTeX (wrong)", "答案：每份应该是 (\\frac{2}{5}) 吨。", "3/5", False, ANY, "phrase"),
    ("E7 a number glued to CJK text", "所以Haley总共有99颗弹珠。", "99", True, "99", "conclusion"),
    ("E7 a number glued to CJK text (wrong)", "所以Haley总共有98颗弹珠。", "99", False, "98", "conclusion"),
    ("E7 a response that is a letter", "A", "A", True, "A", "conclusion"),
    ("E7 a response that opens with its letter", "B。不是 A", "B", True, "B", "conclusion"),
    ("E7 the letter the conclusion settles on", "It's not A, therefore I think it's B", "B", True, "B", ANY),
    ("E7 the letter the conclusion settles on (wrong)", "It's not A, therefore I think it's B", "A", False, "B", ANY),
    ("E8 a choice stored with its text", f"{B}{{D}}", "(D) Alina", True, ANY, "boxed"),
    ("E8 a choice stored with its text (wrong)", f"{B}{{C}}", "(D) Alina", False, ANY, "boxed"),
    ("E8 text with math inside", f"{B}{{\\text{{odd }} n}}", "odd $n$", True, ANY, "boxed"),
    ("E8 text with math inside (wrong)", f"{B}{{\\text{{even }} n}}", "odd $n$", False, ANY, "boxed"),
    ("D14 space as thousands separator", "1 000", "1000", True, "1 000", "conclusion"),
    ("D14 decimal comma in a sentence", "Soucis : 2,74 $ a..", "2.74", True, "2,74", "conclusion"),
    ("E9 a negated letter is no answer", "The answer is not A.", "A", False, None, None),
    ("E9 a negated letter is no answer (can't)", "It can't be A.", "A", False, None, None),
    (
        "E9 a fraction in passing is no result",
        "Each gets \\frac{1}{2} of the pie, so 3 pies in total.",
        "3",
        True,
        "3",
        ANY,
    ),
    (
        "E9 a display continued in prose keeps its value",
        "We get $$A = 16386.20$$ rounded to 2 decimal places.",
        "16386.20",
        True,
        ANY,
        "conclusion",
    ),
    ("E9 number words in a text command", f"{B}{{\\text{{forty-two}}}}", "42", True, ANY, "boxed"),
    ("D15 a stray trailing backslash in the truth", f"{B}{{185}}", "185\\", True, ANY, "boxed"),
    ("D15 a stray trailing backslash in the truth (wrong)", f"{B}{{186}}", "185\\", False, ANY, "boxed"),
]


@pytest.mark.parametrize("cid,completion,truth,correct,extracted,source", CASES, ids=[c[0] for c in CASES])
def test_convention(cid, completion, truth, correct, extracted, source):
    v = verify(completion, truth)
    assert v.correct is correct, f"{cid}: {v}"
    if extracted is None:
        assert not v.found and v.extracted is None, f"{cid}: expected no answer, got {v}"
        assert v.reason and v.reason.startswith("no answer"), v
    elif extracted is not ANY:
        assert v.found and v.extracted == extracted, f"{cid}: {v}"
    if source is not ANY and extracted is not None:
        assert v.source == source, f"{cid}: {v}"
    if not correct:
        assert v.reason, f"{cid}: a wrong verdict must say why: {v}"
    else:
        assert v.reason is None


def test_every_rule_has_both_outcomes():
    rules: dict[str, set] = {}
    for cid, *_rest, correct, _e, _s in [(c[0], c[3], c[4], c[5]) for c in CASES]:
        rules.setdefault(cid.split()[0], set()).add(correct)
    one_sided = [
        r for r, outcomes in rules.items() if outcomes != {True, False} and not r.startswith(("D", "1.2", "E"))
    ]
    assert not one_sided, f"rules with only one outcome tested: {one_sided}"


@pytest.mark.parametrize(
    "completion,truth",
    [
        (f"{B}{{x = \\pm 1}}", "x^2 = 1"),  # a side that is a set: no relation to compare, not an error
        (f"{B}{{F_n = \\sum_{{k=0}}^{{n-2}} F_k}}", "F_n = \\sum_{k=0}^{n-1} F_k"),
        (f"{B}{{\\frac{{1}}{{2004!}}}}", "\\frac{1}{2006!}"),
    ],
)
def test_relations_and_exact_values_are_decided_not_errors(completion, truth):
    v = verify(completion, truth)
    assert not v.correct and not v.error, v
