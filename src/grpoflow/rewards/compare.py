"""Equality of an extracted answer and a ground truth decided without sympy (docs/answer-convention.md §3): the
verifier's fast path, before math-verify.

``decide_locally(answer, gold, equal)`` settles, in order: code, hedges, choice letters and unknowns by their shape
(``shapes``); numbers in a base; labelled values; lists; equations; plain numbers (``numbers``, exact); answers in
words; identical LaTeX; intervals, tuples, sets and matrices of numbers (``intervals``, exact); and arithmetic by its
value (``numeric``: a different value is a wrong answer). What it cannot settle comes back as a ``Forward``: the
texts math-verify is to compare. ``equal`` is the verifier's own comparison, for the parts of a labelled answer.
Pure functions of the text; nothing here is evaluated from it but arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Callable

from grpoflow.rewards import _linear_re as lre
from grpoflow.rewards import extract as _extract
from grpoflow.rewards import intervals, numeric
from grpoflow.rewards.numbers import numbers_equal, parse_number
from grpoflow.rewards.shapes import (
    BASE_RE,
    HEDGE_WORD_RE,
    INEQUALITY_RE,
    PATHOLOGICAL_RE,
    GoldShape,
    choice_letter,
    equation,
    for_math_verify,
    gold_shape,
    is_set,
    labelled,
    latex_key,
    membership,
    or_union,
    or_values,
    plain_number,
    plainly_not_a_number,
    split_list,
    text_words,
    tuple_items,
    unknown,
)

__all__ = ["decide_locally", "Forward", "Decision", "Result", "MAX_ANSWER_CHARS"]

Result = tuple[bool, str, "str | None"]  # (equal, method, reason when not equal)
Decision = tuple[Result, "str | None"]  # the result and the counter to bump
Equal = Callable[[str, str], Result]

MAX_ANSWER_CHARS = 1000

_PLAIN_DECIMAL_RE = lre.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")  # "72", "-1,680.5"
# One number with a currency sign before it or a percent sign after it, nothing else.
_MONEY_OR_PERCENT_RE = lre.compile(r"[-+]?(?:\\?\$\s?)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?\s?(?:\\?%)?")
_UPPER_TEXT_CMD_RE = lre.compile(r"^\\TEXT\s*\{(.*)\}$")  # \text{1011} after .upper()


@dataclass(frozen=True)
class Forward:
    """Not decided locally: math-verify compares these texts (as its worker is given them)."""

    gold: str
    answer: str


def decide_locally(answer: str, gold: str, equal: Equal) -> Decision | Forward:
    """Everything decided without sympy — ((equal, method, reason), counter to bump) — or what math-verify is to
    compare."""
    if not gold:
        return (False, "shape", "error: empty ground truth"), None
    if len(answer) > MAX_ANSWER_CHARS:
        return (False, "shape", f"answer longer than {MAX_ANSWER_CHARS} characters"), "guarded"
    g = gold_shape(gold)
    gold_unknown = g.unknown
    if g.membership is not None:  # "x \in [1, 2)": the set is the ground truth, stated for x
        gold = g.membership[1]
        g = gold_shape(gold)
    # A plain decimal ("72", "1,680.5") is never code, a hedge, a choice letter, a label or a list.
    plain = (answer.isascii() and answer.isdigit()) or _PLAIN_DECIMAL_RE.fullmatch(answer) is not None
    if plain and g.number is not None:  # GSM8K's case: two numbers, compared exactly
        digits = answer.replace(",", "")
        value = Fraction(int(digits)) if "." not in digits else Fraction(Decimal(digits))
        gn = g.number
        same = value == gn.value or (gn.percent and gn.value / 100 == value)  # numbers_equal, for a bare number
        return ((True, "number", None) if same else (False, "number", "wrong answer")), "fast_path"
    if g.number is not None and _MONEY_OR_PERCENT_RE.fullmatch(answer):  # "\$1,680", "25\%": one number too
        value = parse_number(answer)
        if value is not None:
            same = numbers_equal(value, g.number)
            return ((True, "number", None) if same else (False, "number", "wrong answer")), "fast_path"
    if not plain:
        read = _read_shape(answer, g, gold_unknown)
        if not isinstance(read, str):
            return read
        answer = read
    decided = _decide_values(answer, g, plain, equal)
    if decided is None:
        decided = _decide_numerically(answer, gold, g)
    return decided if decided is not None else Forward(for_math_verify(gold), for_math_verify(answer))


def _read_shape(answer: str, g: GoldShape, gold_unknown: str | None) -> Decision | str:
    """Code, hedges, choice letters and unknowns, settled by their shape; else the answer as compared further (a
    membership's set, the solutions an "or" lists)."""
    if _extract.looks_like_code(answer):
        return (False, "shape", "code is not an answer"), None
    if not g.hedge and HEDGE_WORD_RE.search(answer) and or_union(answer) is None:
        # Inequalities joined by "or" are one union; equations joined by "or" list every solution, which only a
        # list can equal; any other "or" offers alternatives.
        solutions = or_values(answer) if g.items else None
        if solutions is None:
            return (False, "shape", "hedge (the answer offers alternatives)"), None
        answer = ", ".join(solutions)
    # Multiple choice: the letter in any wrapper.
    if g.choice is not None:
        letter = choice_letter(answer)
        if letter is not None:
            return ((True, "choice", None) if letter == g.choice else (False, "choice", "wrong choice")), None
    if "\\in" in answer or INEQUALITY_RE.search(answer):
        # A membership or inequality about another unknown than the ground truth's is another answer.
        answer_unknown = unknown(answer)
        if answer_unknown and gold_unknown and answer_unknown != gold_unknown:
            return (False, "relation", "wrong answer (about another unknown)"), None
        member = membership(answer)
        if member is not None:
            answer = member[1]
    return answer


def _decide_values(answer: str, g: GoldShape, plain: bool, equal: Equal) -> Decision | None:
    """Bases, labels, lists, equations, numbers and words, decided without sympy; None for math-verify."""
    # A number written in a base: the digits as written ("1011" for 1011_2), not its decimal value.
    if g.base is not None:
        digits, base = g.base
        mm = BASE_RE.match(answer)
        pred = mm.group(1).upper() if mm and mm.group(2) == base else answer.strip().strip("$").upper()
        pred = _UPPER_TEXT_CMD_RE.sub(r"\1", pred).strip()
        return (
            (True, "base", None) if pred.lstrip("0") == digits.lstrip("0") else (False, "base", "wrong answer")
        ), None
    a_items, g_items = (None if plain else split_list(answer)), g.items
    if g.labels and not plain:
        labels = _compare_to_labels(answer, a_items, g, equal)
        if labels is not None:
            return labels, None
    # A decimal comma ("2,74", "1000,99") against a single number: the comma is no list separator there.
    if a_items and not g_items and g.number is not None and _DECIMAL_COMMA_RE.fullmatch(answer.strip().strip("$")):
        value = parse_number(answer.strip().strip("$").replace(",", "."))
        if value is not None:
            same = numbers_equal(value, g.number)
            return ((True, "number", None) if same else (False, "number", "wrong answer")), "fast_path"
    # Equations: a relation ("x + y = 5") equals only the same relation (decided by sympy); a value given for a
    # name ("x = 5") equals that value, and another assignment only for the same name.
    if g.equation is not None or not plain:
        verdict = _compare_equations(answer, g)
        if verdict is not None:
            return verdict, None
    if a_items and not g_items and g.number is not None:
        if len(set(a_items)) == 1:
            a_items = None  # "5 and 5" states one value twice
        else:
            return (False, "list", "hedge (several answers for one value)"), None
    an = plain_number(answer) if not a_items else None
    if g_items and not a_items and an is not None and all(g.item_numbers):  # type: ignore[arg-type]
        return (False, "list", "wrong answer (one value for a list)"), "fast_path"
    if a_items and g_items:
        a_nums, g_nums = [plain_number(x) for x in a_items], g.item_numbers
        if all(a_nums) and all(g_nums):  # type: ignore[arg-type]
            same = sorted(n.value for n in a_nums) == sorted(n.value for n in g_nums)  # type: ignore[union-attr]
            return ((True, "list", None) if same else (False, "list", "wrong answer")), "fast_path"
    return _decide_scalars(answer, an, g)


def _decide_scalars(answer: str, an, g: GoldShape) -> Decision | None:
    """Plain numbers (exact, no sympy), answers in words, identical LaTeX; None for math-verify."""
    gn = g.number
    if gn is not None and an is not None:
        return ((True, "number", None) if numbers_equal(an, gn) else (False, "number", "wrong answer")), "fast_path"
    if gn is not None and an is None and plainly_not_a_number(answer):
        return (False, "number", "wrong answer (not a number)"), "fast_path"
    if g.words is not None:  # "odd" for odd, "\text{odd}", "odd $n$"
        words = text_words(answer)
        if words is not None:
            return ((True, "words", None) if words == g.words else (False, "words", "wrong answer")), "fast_path"
    # The same LaTeX up to spacing and delimiters is the same answer.
    if latex_key(answer) == g.key:
        return (True, "string", None), "fast_path"
    if not g.pathological and PATHOLOGICAL_RE.search(answer):
        return (False, "shape", "too expensive to evaluate (huge power, factorial or number): not correct"), "guarded"
    return None


def _decide_numerically(answer: str, gold: str, g: GoldShape) -> Decision | None:
    """Intervals, tuples, sets and matrices of plain numbers compared exactly (``intervals``); arithmetic compared
    by its value to 60 digits (``numeric``: a different value is a wrong answer, an equal constant a right one);
    None when neither settles it."""
    if g.key in _INFINITIES:  # ∞: a number or the other infinity is another answer (sympy would try evaluating)
        a_key = latex_key(answer)
        if a_key in _INFINITIES or plain_number(answer) is not None:
            same = _INFINITIES.get(a_key) == _INFINITIES[g.key]
            return ((True, "number", None) if same else (False, "number", "wrong answer")), "fast_path"
    gold_structure = intervals.read(gold)
    if gold_structure is not None:
        answer_structure = intervals.read(answer)
        same = intervals.equal(answer_structure, gold_structure) if answer_structure is not None else None
        if same is None and gold_structure[0] == "brackets":
            same = _labels_as_tuple(answer, gold_structure[3])
        if same is not None:
            return ((True, "structure", None) if same else (False, "structure", "wrong answer")), "fast_path"
    gold_value = numeric.value(_value_text(gold, g.equation))
    if gold_value is None:
        return None
    answer_value = numeric.value(_value_text(answer, equation(answer) if "=" in answer else None))
    verdict = numeric.compare(answer_value, gold_value) if answer_value is not None else None
    if verdict == "different":
        return (False, "numeric", "wrong answer"), "fast_path"
    if verdict == "same":
        return (True, "numeric", None), "fast_path"
    return None


def _labels_as_tuple(answer: str, entries: tuple) -> bool | None:
    """``x = 3, y = -2`` (or ``y = -2, x = 3``) for the point ``(3, -2)``: one-letter names in alphabetical order
    (x, y, z; a, b) give the coordinates; other names give them in the order written, and the same values in
    another order are left to math-verify."""
    items = split_list(answer) if "=" in answer else None
    labels = labelled(items) if items and len(items) == len(entries) else None
    if labels is None:
        return None
    letters = all(len(name) == 1 and name.isalpha() for name, _ in labels)
    values = tuple(intervals.entry(v) for _, v in (sorted(labels) if letters else labels))
    if any(v is None for v in values):
        return None
    if values == entries:
        return True
    # (x, y) is the coordinates in alphabetical order: any other assignment is another point. With other names
    # only other values settle it (math-verify rewarded y = 3, x = -2 for (3, -2)).
    return False if letters or sorted(values) != sorted(entries) else None


_INFINITIES = {"\\infty": 1, "+\\infty": 1, "-\\infty": -1, "\\infin": 1}


def _value_text(text: str, eq: tuple[str, str | None] | None) -> str:
    """The value a text gives: the right-hand side of an assignment (``y = 2x + 5``, ``f(x) = …``), else the text."""
    return eq[1] if eq is not None and eq[0] and eq[1] is not None else text


_DECIMAL_COMMA_RE = lre.compile(r"[-+]?\d+,(?:\d{1,2}|\d{4,})")


def _compare_to_labels(answer: str, a_items: list[str] | None, g: GoldShape, equal: Equal) -> Result | None:
    """Against values given for distinct names ("a = 3, b = 4"): a labelled answer compares name by name; an
    unlabelled list or tuple ("3, 4", "(3, 4)") compares value by value in the ground truth's order; a set
    (``\\{3, 4\\}``) does not say which value is which name. None when the answer is none of these."""
    assert g.labels is not None and g.items is not None
    if a_items:
        a_labels = labelled(a_items)
        if a_labels is not None:
            return _compare_labelled(a_labels, g.labels, equal)
    ordered = a_items or tuple_items(answer)
    if ordered and len(ordered) == len(g.labels):
        for value, gold_item in zip(ordered, g.items):
            same, _, reason = equal(value, gold_item)
            if not same:
                return False, "labels", reason or "wrong answer"
        return True, "labels", None
    if is_set(answer):
        return False, "labels", "wrong answer (a set does not say which value is which name)"
    return None


def _compare_labelled(answer: tuple[tuple[str, str], ...], gold: tuple[tuple[str, str], ...], equal: Equal) -> Result:
    if {label for label, _ in answer} != {label for label, _ in gold}:
        return False, "labels", "wrong answer (other names)"
    values = dict(gold)
    for label, value in answer:
        same, _, reason = equal(value, values[label])
        if not same:
            return False, "labels", reason or "wrong answer"
    return True, "labels", None


def _compare_equations(answer: str, g: GoldShape) -> Result | None:
    """Equality settled by the shapes of equations, or None (then numbers or math-verify decide)."""
    a_eq = equation(answer) if "=" in answer else None
    g_eq = g.equation
    if g_eq is not None and g_eq[1] is None:  # the ground truth is a relation between unknowns
        if a_eq is None and not INEQUALITY_RE.search(answer):
            return False, "equation", "wrong answer (a value for an equation)"
        return None  # relation against equation: sympy, in the worker
    if a_eq is not None and g_eq is not None and a_eq[1] is not None and g_eq[1] is not None:
        if a_eq[0] and g_eq[0] and a_eq[0] != g_eq[0]:
            return False, "equation", "wrong answer (a value for another name)"
        a_num, g_num = parse_number(a_eq[1]), parse_number(g_eq[1])
        if a_num is not None and g_num is not None:
            return (True, "number", None) if numbers_equal(a_num, g_num) else (False, "number", "wrong answer")
    return None  # e.g. y = 5 - 2x against y = -2x + 5: numbers or the worker compare the values
