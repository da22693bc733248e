"""Issue 41: a ground truth written with a label or a relation that the answer leaves out or writes the other way
round (docs/answer-convention.md, "Labels, memberships and relations"). Every acceptance has its rejections
beside it: a reward for a wrong answer is the worst bug of the verifier.

Each row: (id, ground truth, completion, expected correct). A completion without ``\\boxed`` or an answer phrase
is boxed here (``$\\boxed{…}$`` in a closing sentence, the way models write it); the rows that test reading an
answer phrase give the whole completion."""

from __future__ import annotations

import pytest

from grpoflow.rewards import verify

B = "\\boxed"


def _completion(answer: str) -> str:
    if "\\boxed" in answer or answer.startswith(("The ", "**", "So ")):
        return answer
    return f"Working through the problem step by step, the final answer is ${B}{{{answer}}}$."


LABEL_ON_EXPRESSION = [
    ("f(x)= expression alone", "f(x) = x^2 + 1", "x^2+1", True),
    ("f(x)= same label", "f(x) = x^2 + 1", "f(x)=x^2+1", True),
    ("f(x)= label on the right", "f(x) = x^2 + 1", "x^2 + 1 = f(x)", True),
    ("f(x)= equivalent expression", "f(x) = x^2 + 1", "(x+1)^2 - 2x", True),
    ("f(x)= other expression", "f(x) = x^2 + 1", "x^2+2", False),
    ("f(x)= other sign", "f(x) = x^2 + 1", "f(x) = x^2 - 1", False),
    ("f(x)= another function's name", "f(x) = x^2 + 1", "g(x) = x^2+1", False),
    ("f(x)= a name for another quantity", "f(x) = x^2 + 1", "y = x^2 + 1", False),
    ("y= expression alone", "y = 2x - 1", "2x-1", True),
    ("y= reordered", "y = 2x - 1", "y = -1 + 2x", True),
    ("y= same line as a relation", "y = 2x - 1", "2x - y = 1", True),
    ("y= same line, all on one side", "y = 2x - 1", "y - 2x + 1 = 0", True),
    ("y= other intercept", "y = 2x - 1", "2x+1", False),
    ("y= other intercept, labelled", "y = 2x - 1", "y = 2x+1", False),
    ("y= labels swapped", "y = 2x - 1", "x = 2y-1", False),
    ("y= other line as a relation", "y = 2x - 1", "2x + y = 1", False),
    ("y= its intercept alone", "y = 2x - 1", "-1", False),
    ("unlabelled truth, labelled answer", "2x - 1", "y = 2x - 1", True),
    ("unlabelled truth, function label", "2x - 1", "f(x) = 2x - 1", True),
    ("y=3 value alone", "y = 3", "3", True),
    ("y=3 as a decimal", "y = 3", "y = 3.0", True),
    ("y=3 for another variable", "y = 3", "x = 3", False),
    ("y=3 other value", "y = 3", "y = 4", False),
    # An equation relating unknowns is a relation: its right-hand side alone is no answer to it.
    ("relation: its right-hand side", "x + y = 5", "5", False),
    ("relation: solved for y", "x + y = 5", "y = 5 - x", True),
    ("relation: other constant", "x + y = 5", "x + y = 6", False),
    ("relation 2x - y = 1: right-hand side", "2x - y = 1", "1", False),
    ("relation 2x - y = 1: solved", "2x - y = 1", "y = 2x - 1", True),
]

LABELLED_VALUES = [
    ("a,b as a tuple in order", "a = 3, b = 4", "(3, 4)", True),
    ("a,b as a list in order", "a = 3, b = 4", "3, 4", True),
    ("a,b labels in another order", "a = 3, b = 4", "b = 4, a = 3", True),
    ("a,b tuple the other way round", "a = 3, b = 4", "(4, 3)", False),
    ("a,b list the other way round", "a = 3, b = 4", "4, 3", False),
    ("a,b labels swapped", "a = 3, b = 4", "a = 4, b = 3", False),
    ("a,b as a set", "a = 3, b = 4", "\\{3, 4\\}", False),
    ("a,b one value too many", "a = 3, b = 4", "(3, 4, 5)", False),
    ("a,b another name", "a = 3, b = 4", "a = 3, c = 4", False),
    ("a,b first value under the other name", "a = 3, b = 4", "b = 3, 4", False),
    ("x,y point", "x = 3, y = -2", "(3, -2)", True),
    ("x,y point the other way round", "x = 3, y = -2", "(-2, 3)", False),
    ("x,y list the other way round", "x = 3, y = -2", "-2, 3", False),
    ("x,y as a set", "x = 3, y = -2", "\\{3, -2\\}", False),
    ("point truth, labelled answer", "(3, -2)", "x = 3, y = -2", True),
    ("point truth, labels swapped", "(3, -2)", "x = -2, y = 3", False),
    # Several values for one name: every solution, in any order.
    ("solutions in another order", "x = 2, x = -3", "x = -3, x = 2", True),
    ("solutions unlabelled", "x = 2, x = -3", "-3, 2", True),
    ("solutions: one missing", "x = 2, x = -3", "x = 2", False),
    ("one solution: an 'or' adds another", "x = 2", "x = 2 \\text{ or } x = 3", False),
    ("one solution: a list adds another", "x = 2", "x = 2, x = 3", False),
    ("one solution: two values", "x = 2", "2, 3", False),
    ("all solutions joined by or", "2, 3", "x = 2 \\text{ or } x = 3", True),
    ("all solutions joined by or (wrong one)", "2, 3", "x = 2 \\text{ or } x = 4", False),
    ("all solutions: one missing", "2, 3", "x = 2", False),
]

MEMBERSHIP = [
    ("x in I: the interval", "x \\in [1/2, 3)", "[0.5, 3)", True),
    ("x in I: tfrac and sized brackets", "x \\in \\left[\\tfrac12, 3\\right)", "[0.5, 3)", True),
    ("x in I: the same membership", "x \\in [1/2, 3)", "x \\in [0.5, 3)", True),
    ("x in I: as an inequality", "x \\in [1/2, 3)", "\\frac12 \\le x < 3", True),
    ("x in I: open where closed", "x \\in [1/2, 3)", "(0.5, 3)", False),
    ("x in I: closed where open", "x \\in [1/2, 3)", "[0.5, 3]", False),
    ("x in I: other bound", "x \\in [1/2, 3)", "[0.5, \\infty)", False),
    ("x in I: another unknown", "x \\in [1/2, 3)", "y \\in [0.5, 3)", False),
    ("x in I: inequality in another unknown", "x \\in [1/2, 3)", "\\frac12 \\le y < 3", False),
    ("x in I: strict inequality", "x \\in [1/2, 3)", "\\frac12 < x < 3", False),
    ("interval truth, membership answer", "[\\frac12, 3)", "x \\in [0.5, 3)", True),
    ("interval truth, membership in any name", "[\\frac12, 3)", "t \\in [0.5, 3)", True),
    ("interval truth, membership, open end", "[\\frac12, 3)", "x \\in (0.5, 3)", False),
    ("x in I: unicode", "x \\in [1/2, 3)", "x ∈ [0.5, 3)", True),
]

RELATIONS = [
    ("x<2 flipped", "x < 2", "2 > x", True),
    ("x<2 as an interval", "x < 2", "(-\\infty, 2)", True),
    ("x<2 the other direction", "x < 2", "x > 2", False),
    ("x<2 flipped the other direction", "x < 2", "2 < x", False),
    ("x<2 non-strict", "x < 2", "x \\le 2", False),
    ("x<2 another unknown", "x < 2", "y < 2", False),
    ("x<2 its bound alone", "x < 2", "2", False),
    ("x<2 closed interval", "x < 2", "(-\\infty, 2]", False),
    ("x>=-1 flipped", "x \\ge -1", "-1 \\le x", True),
    ("x>=-1 as an interval", "x \\ge -1", "[-1, \\infty)", True),
    ("x>=-1 strict, flipped", "x \\ge -1", "-1 < x", False),
    ("x>=-1 strict", "x \\ge -1", "x > -1", False),
    ("x>=-1 open interval", "x \\ge -1", "(-1, \\infty)", False),
    ("x>=-1 other direction", "x \\ge -1", "x \\le -1", False),
    ("x>3 as an interval", "x > 3", "(3, \\infty)", True),
    ("x>3 closed interval", "x > 3", "[3, \\infty)", False),
    ("x>3 non-strict", "x > 3", "x \\ge 3", False),
    ("interval truth, inequality", "(3, \\infty)", "x > 3", True),
    ("interval truth, flipped inequality", "(3, \\infty)", "3 < x", True),
    ("interval truth, non-strict inequality", "(3, \\infty)", "x \\ge 3", False),
    ("interval truth, other direction", "(3, \\infty)", "x < 3", False),
    ("chain as an interval", "-1 \\le x < 2", "[-1, 2)", True),
    ("chain: open left end", "-1 \\le x < 2", "(-1, 2)", False),
    ("chain: closed right end", "-1 \\le x < 2", "[-1, 2]", False),
    # Inequalities joined by "or" state a union, not alternatives.
    ("union as 'or'", "(-\\infty, -1] \\cup [1, \\infty)", "x \\le -1 \\text{ or } x \\ge 1", True),
    ("union as 'or', other order", "(-\\infty, -1] \\cup [1, \\infty)", "x \\ge 1 \\text{ or } x \\le -1", True),
    ("union as 'or': one end strict", "(-\\infty, -1] \\cup [1, \\infty)", "x \\le -1 \\text{ or } x > 1", False),
    ("union as 'or': the other end strict", "(-\\infty, -1] \\cup [1, \\infty)", "x < -1 \\text{ or } x \\ge 1", False),
    ("union truth, the complement", "(-\\infty, -1] \\cup [1, \\infty)", "-1 \\le x \\le 1", False),
    ("'or' truth, interval union", "x \\le -1 \\text{ or } x \\ge 1", "(-\\infty, -1] \\cup [1, \\infty)", True),
    (
        "'or' truth, union with an open end",
        "x \\le -1 \\text{ or } x \\ge 1",
        "(-\\infty, -1) \\cup [1, \\infty)",
        False,
    ),
]

TEXT_ANSWERS = [
    ("words after a bold answer phrase", "odd", "**Answer:** odd $n$", True),
    ("words in a text command", "odd", f"{B}{{\\text{{odd}}}}", True),
    ("words after 'the answer is'", "odd", "The answer is odd.", True),
    ("capitalised", "odd", f"{B}{{\\text{{Odd}}}}", True),
    ("truth with its unknown", "\\text{odd } n", f"{B}{{\\text{{odd}}}}", True),
    ("other word after a bold answer phrase", "odd", "**Answer:** even $n$", False),
    ("other word in a text command", "odd", f"{B}{{\\text{{even}}}}", False),
    ("negated", "odd", "The answer is not odd.", False),
    ("both words", "odd", f"{B}{{\\text{{odd or even}}}}", False),
    ("an answer phrase that does not close the response", "odd", "The answer is odd. Wait: $n = 2k$ is even.", False),
    ("number words still a number", "12", "The answer is twelve.", True),
]


def _rows(*groups):
    return [row for group in groups for row in group]


ROWS = _rows(LABEL_ON_EXPRESSION, LABELLED_VALUES, MEMBERSHIP, RELATIONS, TEXT_ANSWERS)


@pytest.mark.parametrize("cid,truth,answer,correct", ROWS, ids=[r[0] for r in ROWS])
def test_labels_and_relations(cid, truth, answer, correct):
    v = verify(_completion(answer), truth)
    assert not v.error, f"{cid}: undecided ({v.reason})"
    assert v.correct is correct, f"{cid}: {v}"
