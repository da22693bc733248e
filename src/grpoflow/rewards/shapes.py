"""The shapes of answers and ground truths, read from their text: what the verifier's local decisions and its
hand-off to math-verify need to know (docs/answer-convention.md §3).

A ground truth is cleaned once (``clean_gold``: end tokens, ``$…$``, a box or a worked solution's last box, MATH's
thousands separators) and its shape worked out once (``gold_shape``: choice letter, number in a base, list items,
plain number, equation, ...); an answer is read with the same functions. Pure functions of the text — no state
beyond two LRU caches, no sympy, nothing evaluated — and every pattern RE2 (``_linear_re``). The verifier
(``verifier``) decides equality from these shapes and keeps the counters and caches.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction

from grpoflow.rewards import _linear_re as lre
from grpoflow.rewards.extract import extract_boxed_answer, find_boxes, strip_end_tokens, unwrap_boxes
from grpoflow.rewards.numbers import MINUS_SIGNS, Number, parse_number, words_to_number
from grpoflow.rewards.statement import split_equals

_CHOICE_RE = lre.compile(
    r"^\s*(?:\\text(?:bf|rm)?\s*\{\s*|\\mathrm\s*\{\s*|\\textbf\s*\{\s*)?\(?\s*([A-E])\s*\)?\s*\}?\s*(?:[.:)]|\\[ ,;]|\s|$)"
)
_GOLD_CHOICE_RE = lre.compile(
    r"^\s*(?:\\text(?:bf|rm)?\s*\{\s*|\\mathrm\s*\{\s*)?\(?\s*([A-E])\s*\)?\s*\}?\s*$"
    # a choice with its option's text, as datasets store it: "(D) Alina", "C Cecile"
    r"|^\s*\(([A-E])\)\s*[^\n]+$|^\s*([A-E])\s+[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*\s*$"
)
BASE_RE = lre.compile(r"^\s*(?:\\text\s*\{)?([0-9A-Za-z]+)\}?\s*_\s*\{?\s*(\d{1,2})\s*\}?\s*$")
HEDGE_WORD_RE = lre.compile(
    r"\\text\s*\{\s*or\s*\}|(?:^|[^a-z])or(?:[^a-z]|$)|\\lor\b|\\vee\b|\bmaybe\b|\beither\b", lre.I
)
_LIST_SPLIT_RE = lre.compile(
    r"\s*(?:[,;]\s*(?:\band\b|\\text\s*\{\s*and\s*\})?|\\text\s*\{\s*,?\s*and\s*\}|\band\b)\s*"
)
_THOUSANDS_RE = lre.compile(r"^\s*[-+]?\\?\$?\d{1,3}(?:,\d{3})+(?:\.\d+)?\s*$")
# Inputs that would make sympy compute for minutes or exhaust memory: towers of exponents, factorials of large
# numbers, numbers with hundreds of digits. Checked on the answer only (a ground truth may legitimately be big).
PATHOLOGICAL_RE = lre.compile(
    r"\^\s*\{[^{}]*\^\s*\{[^{}]*\^"  # a^{b^{c^d}}
    r"|\^\s*\{?\s*\d{4,}"  # 2^{12345}
    r"|(?:\d{4,}|[})])\s*!"  # 100000!, (n)!
    r"|\\(?:prod|sum)(?:[^A-Za-z].{0,40})?\\infty"  # \prod_{n=1}^{\infty}: after "prod" any non-letter
    r"|\d{300,}"
)


# Unicode math symbols models write inside boxes, as the LaTeX math-verify and the exact-number path read.
_UNICODE_LATEX = {
    "∞": "\\infty ",
    "π": "\\pi ",
    "×": "\\times ",
    "·": "\\cdot ",
    "⋅": "\\cdot ",
    "÷": "\\div ",
    "≤": "\\le ",
    "≥": "\\ge ",
    "≠": "\\neq ",
    "±": "\\pm ",
    "∪": "\\cup ",
    "∩": "\\cap ",
    "∈": "\\in ",
    "²": "^{2}",
    "³": "^{3}",
    **{m: "-" for m in MINUS_SIGNS},
}


def unicode_math_to_latex(text: str) -> str:
    """``√2`` → ``\\sqrt{2}``, ``2√3`` → ``2\\sqrt{3}``, ``√(x+1)`` → ``\\sqrt{x+1}``, ``−∞`` → ``-\\infty``,
    ``3π`` → ``3\\pi``, ``×``/``·``/``≤``/``²``… → their LaTeX (one linear scan; ASCII text is returned as is).
    A root applies to the number, letter, LaTeX command, ``{…}`` or ``(…)`` right after it."""
    if text.isascii():
        return text
    out: list[str] = []
    parens: list[bool] = []  # one entry per open "(": True when it opened a root's argument
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "(":
            parens.append(False)
            out.append(c)
        elif c == ")" and parens:
            out.append("}" if parens.pop() else ")")
        elif c != "√":
            out.append(_UNICODE_LATEX.get(c, c))
        else:
            j = i + 1
            while j < n and text[j] == " ":
                j += 1
            if j < n and text[j] in "({":
                if text[j] == "(":
                    parens.append(True)
                out.append("\\sqrt{")
                i = j + 1
                continue
            k = j
            if k < n and text[k] == "\\":
                k += 1
                while k < n and text[k].isalpha():
                    k += 1
            else:
                while k < n and (text[k].isdecimal() or text[k] == "."):
                    k += 1
                if k == j and k < n and text[k].isalpha():
                    k += 1
            arg = text[j:k]
            out.append("\\sqrt{" + _UNICODE_LATEX.get(arg, arg) + "}" if k > j else "\\sqrt")
            i = k
            continue
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=65536)
def clean_gold(gold: str) -> str:
    g = unicode_math_to_latex(str(gold).strip())
    g = strip_end_tokens(g).strip()
    if g.endswith("\\") and not g.endswith("\\\\"):
        # A stray trailing backslash (185 and then one backslash): an artifact of how the key was cut out.
        g = g[:-1].rstrip()
    if g.startswith("$") and g.endswith("$") and len(g) > 1:
        g = g.strip("$").strip()
    boxed = find_boxes(g)
    if len(boxed) == 1 and boxed[0].end >= 0 and not g[: boxed[0].start].strip() and not g[boxed[0].end :].strip():
        g = unwrap_boxes(boxed[0].content)
    elif any(b.end >= 0 for b in boxed):
        # A worked solution as the ground truth (MATH's own form): its answer is its last box (run), rule a.
        g = extract_boxed_answer(g) or g
    return number_format(g)


# MATH writes large numbers as 10,\!000 and 11,\! 111,\! 100 (a comma, then a negative thin space): one number.
_MATH_THOUSANDS_RE = lre.compile(r"(?:,|\{,\})\\!\s*(\d{3})")


def number_format(text: str) -> str:
    """MATH's thousands separators ``,\\!`` (with or without a space after it) and ``{,}`` written as ``,``."""
    if "\\!" not in text:
        return text
    return _MATH_THOUSANDS_RE.sub(
        lambda m: "," + m.group(1) if m.start() and text[m.start() - 1].isdecimal() else m.group(0), text
    )


def _thousands_group_at(t: str, i: int) -> bool:
    """``t[i]`` is a comma followed by exactly three digits (",680" in "1,680")."""
    group = t[i + 1 : i + 4]
    return len(group) == 3 and group.isdecimal() and not t[i + 4 : i + 5].isdecimal()


def _ends_in_short_number(text: str) -> bool:
    """``text`` ends in 1-3 digits that are not part of a longer number or a decimal ("x, 1" but not "0.1")."""
    k = len(text) - len(text.rstrip("0123456789"))
    return 1 <= k <= 3 and (k == len(text) or not (text[-k - 1].isdecimal() or text[-k - 1] == "."))


def split_list(text: str) -> list[str] | None:
    """Top-level comma/"and" separated items of an unbracketed list ("-3, 2"), or None for a single value.

    A bracketed tuple/interval/set ("(3, -2)", "[1, 2)") is one value: order and brackets matter there."""
    t = text.strip().strip("$").strip()
    if not t or _THOUSANDS_RE.match(t):
        return None
    if t[0] in "([{" or t.startswith(("\\{", "\\left", "\\langle", "\\begin")):
        # One bracketed object unless brackets close before the end (then it is a list of several objects).
        depth = 0
        for i, ch in enumerate(t):
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
                if depth == 0 and i < len(t) - 1:
                    break
        else:
            return None
    items, depth, start = [], 0, 0
    i = 0
    while i < len(t):
        ch = t[i]
        if ch == "\\":  # a command or escape (\{, \,, \text): never a list separator itself
            depth += {"{": 1, "}": -1}.get(t[i + 1 : i + 2], 0)
            if t.startswith("\\text", i):
                m = _LIST_SPLIT_RE.match(t, i)
                if depth == 0 and m and m.end() > i:
                    items.append(t[start:i])
                    start = i = m.end()
                    continue
            i += 2
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and (ch in ",;" or ch.isspace()):
            m = _LIST_SPLIT_RE.match(t, i)
            if m and m.end() > i:
                if ch == "," and _thousands_group_at(t, i) and _ends_in_short_number(t[start:i]):
                    i += 1  # a thousands separator inside a number of the list
                    continue
                items.append(t[start:i])
                start = m.end()
                i = m.end()
                continue
        i += 1
    items.append(t[start:])
    items = [x.strip() for x in items if x.strip()]
    return items if len(items) > 1 else None


INEQUALITY_RE = lre.compile(r"[<>]|\\[lg]eq?\b|\\neq")
_THREE_LETTERS_RE = lre.compile(r"[a-z]{3}", lre.I)
_DIGIT_OR_COMMAND_RE = lre.compile(r"\d|\\")


_SUBSCRIPT_RE = lre.compile(r"_\s*(?:\{[^{}]*\}|\w)")
_OPERATOR_RE = lre.compile(r"[-+*/^=<>]|\\(?:cdot|times|div|pm|mp)\b")
_COMMAND_RE = lre.compile(r"\\[A-Za-z]+")
_ASCII_LETTER_RE = lre.compile(r"[A-Za-z]")


def _is_label(side: str) -> bool:
    """A name that an answer's value is given for: ``x``, ``a_{37}``, ``f(x)``, ``|AB|``, ``A:B``, ``(p, q)``,
    ``\\frac{NO}{BO}`` — no arithmetic on unknowns (``2x``, ``a + 3z``, ``x^2`` are not names)."""
    t = _SUBSCRIPT_RE.sub("", side.strip())
    if not t or t[0].isdecimal() or _OPERATOR_RE.search(t):
        return False
    return bool(_ASCII_LETTER_RE.search(_COMMAND_RE.sub("", t)))


def _letter_free(side: str) -> bool:
    """Arithmetic on numbers only (``48 + 24``, ``\\frac{1}{2} \\cdot 4``): no unknown in it."""
    return not _ASCII_LETTER_RE.search(_COMMAND_RE.sub("", _TEXT_WRAP_RE.sub("", side)))


_TEXT_WRAP_RE = lre.compile(r"\\(?:text|mathrm|textbf|mbox)\s*\{[^{}]*\}")


def equation(text: str) -> tuple[str, str | None] | None:
    """``text`` as an equation: (label or "", value) for a value given for a name or computed ("x = 5" → ("x",
    "5"), "2 = x" → ("x", "2"), "48 + 24 = 72" → ("", "72"), "x = 5 + 5 + 1 = 11" → ("x", "11")); (text, None)
    for a relation between unknowns ("x + y = 5", "2x = 4"), which only an equal relation matches; None when
    ``text`` is no single equation (no "=", an inequality, a list)."""
    if "=" not in text or INEQUALITY_RE.search(text) or split_list(text):
        return None
    parts = [p.strip().strip("$").strip() for p in split_equals(text)]
    if len(parts) < 2 or not all(parts):
        return None
    first, last = parts[0], parts[-1]
    if len(parts) == 2 and _is_label(last) and _letter_free(first):
        return latex_key(last), first
    if _is_label(first):
        return latex_key(first), last
    if _letter_free(first):
        return "", last
    return text, None


def plain_number(text: str) -> Number | None:
    """The answer as a plain number: the text itself, the value of an assignment or arithmetic chain ("x = 5",
    "2 = x", "48 + 24 = 72"; never a side of a relation such as "2x + z = 1"), or number words ("seventy-two")."""
    n = parse_number(text)
    if n is not None:
        return n
    eq = equation(text) if "=" in text else None
    if eq is not None and eq[1] is not None:
        n = parse_number(eq[1])
        if n is not None:
            return n
    if "\\" in text:  # number words in a text command: "\\text{forty-two}"
        text = _TEXT_CONTENT_RE.sub(lambda m: m.group(1), text)
    if _THREE_LETTERS_RE.search(text) and not _DIGIT_OR_COMMAND_RE.search(text):
        value = words_to_number(text)
        if value is not None:
            return Number(Fraction(value))
    return None


def choice_letter(text: str) -> str | None:
    m = _CHOICE_RE.match(text)
    return m.group(1) if m else None


@dataclass(frozen=True)
class GoldShape:
    """What the local decisions need to know about a (cleaned) ground truth, worked out once per distinct value."""

    hedge: bool  # the ground truth itself offers alternatives ("1 or 2")
    choice: str | None  # its multiple-choice letter
    base: tuple[str, str] | None  # (digits, base) of a number written in a base
    items: tuple[str, ...] | None  # the items of an unbracketed list
    item_numbers: tuple[Number | None, ...] | None
    number: Number | None
    key: str  # latex_key
    pathological: bool
    equation: tuple[str, str | None] | None  # equation: (label, value), (relation, None) or None
    labels: tuple[tuple[str, str], ...] | None  # the (label, value) of each item of a list of assignments
    membership: tuple[str, str] | None  # "x \\in [1, 2)" → ("x", "[1, 2)")
    unknown: str | None  # the one unknown a membership or inequality is about ("x" for "x < 2")
    words: tuple[str, ...] | None  # a short answer in words ("odd", "\\text{odd } n") → ("odd",)


_PLAIN_GOLD_RE = lre.compile(r"[+-]?\d+(?:\.\d+)?")  # GSM8K's form: nothing about it but its value


@functools.lru_cache(maxsize=65536)
def gold_shape(gold: str) -> GoldShape:
    if _PLAIN_GOLD_RE.fullmatch(gold):
        number = parse_number(gold)
        return GoldShape(False, None, None, None, None, number, gold, False, None, None, None, None, None)
    number = plain_number(gold)
    m = _GOLD_CHOICE_RE.match(gold)
    b = BASE_RE.match(gold)
    items = split_list(gold)
    return GoldShape(
        hedge=bool(HEDGE_WORD_RE.search(gold)),
        choice=next((c for c in m.groups() if c), None) if m else None,
        base=(b.group(1).upper(), b.group(2)) if b and not number else None,
        items=tuple(items) if items else None,
        item_numbers=tuple(plain_number(x) for x in items) if items else None,
        number=number,
        key=latex_key(gold),
        pathological=bool(PATHOLOGICAL_RE.search(gold)),
        equation=equation(gold),
        labels=labelled(items),
        membership=membership(gold),
        unknown=unknown(gold),
        words=text_words(gold),
    )


def labelled(items) -> tuple[tuple[str, str], ...] | None:
    """The (label, value) of every item of a list when each assigns a value to a distinct name
    ("a_3 = 2, a_{37} = 19"), else None."""
    if not items:
        return None
    out = []
    for item in items:
        eq = equation(item)
        if eq is None or eq[1] is None or not eq[0]:
            return None
        out.append((eq[0], eq[1]))
    return tuple(out) if len({label for label, _ in out}) == len(out) else None


_LATEX_NOISE_RE = lre.compile(r"\\left|\\right|\\[,;:! ]|\\q?quad\b|\\displaystyle|\s+|\$")
_TEXT_CONTENT_RE = lre.compile(r"\\(?:text|textrm|mathrm|textbf|mbox)\s*\{([^{}]*)\}")


def latex_key(text: str) -> str:
    """LaTeX with spacing, sizing and math delimiters removed, and \\dfrac/\tfrac written \frac."""
    text = _TEXT_CONTENT_RE.sub(lambda m: m.group(1), text) if "\\" in text else text  # "\\text{odd } n" = "odd n"
    return _LATEX_NOISE_RE.sub("", text).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")


_MATH_CHAR_RE = lre.compile(r"[\d\\^_{}()=+\-*/]")
_AND_RE = lre.compile(r"\band\b|\\text\s*\{\s*and")


def plainly_not_a_number(answer: str) -> bool:
    """Words without any digit or math (a name, "none") cannot equal a numeric ground truth."""
    return not _MATH_CHAR_RE.search(answer) and words_to_number(answer) is None


def for_math_verify(answer: str) -> str:
    """An answer or ground truth as math-verify is given it: inequalities joined by "or" as their union
    (``\\lor``, read by the worker), other list separators as a set ("2 and -3" → "2, -3")."""
    union = or_union(answer) if HEDGE_WORD_RE.search(answer) else None
    if union is not None:
        return union
    return _LIST_SPLIT_RE.sub(", ", answer) if _AND_RE.search(answer) else answer


def clear_caches() -> None:
    """Forget the cleaned ground truths and their shapes (``verifier.reset_caches``)."""
    clean_gold.cache_clear()
    gold_shape.cache_clear()


# ---------------------------------------------------------------------------------------------------------------
# Labels, memberships and relations (docs/answer-convention.md, "Labels and relations"): which unknown an answer
# is about, and what it states of it.

_MEMBERSHIP_RE = lre.compile(r"\s*([A-Za-z](?:\s*_\s*(?:\{[^{}]*\}|\w))?)\s*\\in\b\s*(\S.*?)\s*", lre.S)
_UNKNOWN_TOKEN_RE = lre.compile(r"[A-Za-z](?:_(?:\{[^{}]*\}|\w))?")
# Commands whose braced argument is a name or a set, not an unknown: \text{ or }, \mathbb{R}, \operatorname{Re}.
_NAMED_ARG_RE = lre.compile(r"\\(?:text|textrm|mathrm|mathbb|mathbf|mathcal|operatorname|textbf|mbox)\s*\{[^{}]*\}")
_OR_RE = lre.compile(r"\\text\s*\{\s*or\s*\}|\\(?:lor|vee)\b|\bor\b")


def _name_key(name: str) -> str:
    """A name as compared: ``x_{1}``, ``x_1`` and ``x _ 1`` are one name."""
    return latex_key(name).replace("{", "").replace("}", "")


def membership(text: str) -> tuple[str, str] | None:
    """``x \\in [1, 2)`` → ``("x", "[1, 2)")``: the set is the answer, stated for the unknown ``x``."""
    if "\\in" not in text:
        return None
    m = _MEMBERSHIP_RE.fullmatch(text)
    return (_name_key(m.group(1)), m.group(2)) if m else None


def unknown(text: str) -> str | None:
    """The one unknown a membership or an inequality is about: ``x`` for ``x \\in [0, 1)``, ``-1 \\le x < 2``
    or ``2 > x``; None when the text is neither, or names no unknown or several (then names decide nothing)."""
    m = membership(text)
    if m is not None:
        return m[0]
    if not INEQUALITY_RE.search(text):
        return None
    bare = _COMMAND_RE.sub(" ", _NAMED_ARG_RE.sub(" ", text))
    names = {_name_key(t) for t in _UNKNOWN_TOKEN_RE.findall(bare)}
    return names.pop() if len(names) == 1 else None


def or_parts(text: str) -> list[str] | None:
    """The parts of ``text`` joined by "or" (``\\text{ or }``, ``\\lor``, ``\\vee``) outside brackets, or None."""
    parts, depth, start, pos = [], 0, 0, 0
    for m in _OR_RE.finditer(text):
        for ch in text[pos : m.start()]:
            depth += 1 if ch in "([{" else -1 if ch in ")]}" else 0
        pos = m.end()
        if depth == 0:
            parts.append(text[start : m.start()].strip())
            start = m.end()
    parts.append(text[start:].strip())
    return parts if len(parts) > 1 and all(parts) else None


def _is_inequality(part: str) -> bool:
    return bool(INEQUALITY_RE.search(part)) and len(split_equals(part)) == 1


def or_union(text: str) -> str | None:
    """``x \\le -1 \\text{ or } x \\ge 1`` → ``x \\le -1 \\lor x \\ge 1``: inequalities in one unknown joined by
    "or" state the union of their solution sets, not alternatives (the worker reads ``\\lor`` as that union)."""
    parts = or_parts(text)
    if parts is None or not all(_is_inequality(p) for p in parts) or unknown(text) is None:
        return None
    return " \\lor ".join(parts)


def or_values(text: str) -> list[str] | None:
    """``x = 2 \\text{ or } x = 3`` → ``["x = 2", "x = 3"]``: the parts of an "or" that states every solution
    (read so only against a ground truth that is a list), or None when a part is an inequality."""
    parts = or_parts(text)
    return None if parts is None or any(INEQUALITY_RE.search(p) for p in parts) else parts


def tuple_items(text: str) -> list[str] | None:
    """The items of one bracketed tuple: ``(3, -2)``, ``\\left(3, -2\\right)``, ``[3, 4]``; else None."""
    t = text.strip().strip("$").strip().replace("\\left", "").replace("\\right", "")
    if len(t) < 2 or t[0] not in "([" or t[-1] not in ")]":
        return None
    depth = 0
    for i, ch in enumerate(t):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0 and i < len(t) - 1:
                return None  # "(1, 2) \cup (3, 4)": brackets close before the end
    return split_list(t[1:-1])


def is_set(text: str) -> bool:
    """A set written with braces, ``\\{3, -2\\}``: its order says nothing."""
    return text.strip().strip("$").strip().startswith(("\\{", "\\left\\{"))


_NOT_WORDS_RE = lre.compile(r"[\d\\^_{}()\[\]=<>+*/|&:;]")
_WORD_TOKEN_RE = lre.compile(r"[A-Za-z][A-Za-z'’-]*")
_STOP_WORDS = frozenset({"a", "an", "the", "is", "are", "be", "must"})


def text_words(text: str) -> tuple[str, ...] | None:
    """A short answer in words, as the words that carry it: ``\\text{odd}``, ``odd $n$``, ``**Odd**.`` →
    ``("odd",)``. Letters standing alone (``$n$``, the unknown the words describe) and articles are left out.
    None when the text holds a digit or math, or no word is left."""
    t = _TEXT_CONTENT_RE.sub(lambda m: " " + m.group(1) + " ", text) if "\\" in text else text
    t = t.replace("$", " ").replace("*", " ").strip().rstrip(".!").replace(",", " ")
    if not t or len(t) > 80 or _NOT_WORDS_RE.search(t):
        return None
    tokens = t.lower().split()
    if not all(_WORD_TOKEN_RE.fullmatch(w) for w in tokens):
        return None
    words = tuple(w for w in tokens if len(w) > 1 and w not in _STOP_WORDS)
    return words or None
