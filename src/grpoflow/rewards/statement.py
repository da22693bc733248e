"""Reading one statement for its result: "Tom earns $1,680 in 4 weeks." → ``1,680``; "12 × 35 × 4 = 1680" →
``1680``; "**72 muffins**, which is 6 dozen" → ``72``.

``read_statement(stmt, prefer)`` is what rules b–e of docs/answer-convention.md §2 apply to the text they pick (a
tag's content, what follows an answer phrase, the concluding sentence). Candidates are found in order of
strength — bold, math spans, arithmetic chains and numbers, number words — with numbers that are only context
("in 4 weeks") set aside. Every pattern is RE2 (``_linear_re``) and the statement is cut to
``MAX_STATEMENT_CHARS`` first, so reading stays linear.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpoflow.rewards import _linear_re as lre
from grpoflow.rewards.numbers import MINUS_SIGNS, NUMBER_WORDS, words_to_number

__all__ = ["read_statement", "split_equals", "MAX_STATEMENT_CHARS"]

_MATH_SPAN_RE = lre.compile(
    r"\$\$(?P<dd>.+?)\$\$"
    r"|\\\[(?P<br>.+?)\\\]"
    r"|\\\((?P<pa>.+?)\\\)"
    # Inline $...$ as pandoc reads it: no space after the opening $, none before the closing one, the opening $
    # not escaped, and the closing $ not followed by a digit — so "$5 and $10" is currency, "$x = 5$" is math.
    r"|\$(?P<dl>[^\s$](?:[^$\n]*?[^\s\\$])?)\$"  # + not after \ or $, not before a digit: _math_spans
    # "$ \frac13 $", "$ \begin{pmatrix}…\end{pmatrix} $": spaces inside, but a LaTeX command makes it math
    r"|\$(?P<dx>(?:[^$\n\\]|\\[^\n])*?\\[A-Za-z](?:[^$\n\\]|\\[^\n])*?)\$",
    lre.S,
)
_BARE_LATEX_RE = lre.compile(
    r"-?\\[dtc]?frac\s*(?:\{[^{}]*\}|\d)\s*(?:\{[^{}]*\}|\d)|-?\d*\\sqrt\s*(?:\[[^\]]*\])?\{[^{}]*\}"
)
_BOLD_RE = lre.compile(r"\*\*(?P<b>[^*\n]{1,80}?)\*\*|__(?P<u>[^_\n]{1,80}?)__")
# Thousands groups with commas or spaces ("1,680", "1 000"), a decimal comma ("2,74": read as one number, the
# verifier decides what it means), plain digits, decimals.
_NUM = r"(?:\d{1,3}(?:,\d{3})+\b|\d{1,3}(?:[ \x{A0}\x{202F}]\d{3})+\b|\d+,\d{1,2}\b|\d+)(?:\.\d+)?|\.\d+"
_OP = r"[-+*/×÷xX·⋅]|\\times|\\cdot|\\div"
# A plain-text arithmetic chain ending in "= result": "48+24 = 72", "12 × 35 × 4 = 1680", "$3 * 4 = $12".
_CHAIN_RE = lre.compile(
    rf"(?:\$?(?:{_NUM})\s*(?:{_OP})\s*)+\$?(?:{_NUM})\s*(?:=\s*\$?(?:{_NUM})\s*(?:(?:{_OP})\s*\$?(?:{_NUM})\s*)*)*=\s*(?P<res>-?\$?(?:{_NUM})%?)"
)
_NUMBER_RE = lre.compile(
    rf"(?P<neg>-\s?)?(?P<cur>\\?\$\s?)?(?P<n>(?:{_NUM})(?:\s?/\s?(?:{_NUM}))?)(?P<pct>\s?(?:\\?%|percent\b))?"
)
_WORDNUM_RE = lre.compile(
    r"\b(?:(?:minus|negative)\s+)?(?:" + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True)) + r")"
    r"(?:[\s-]+(?:and\s+)?(?:" + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True)) + r"))*\b",
    lre.I,
)
# Words after which a number is context, not the result ("in 4 weeks", "after 3 days", "per 2 hours").
_CONTEXT_WORDS = {
    "in",
    "after",
    "per",
    "within",
    "over",
    "every",
    "each",
    "for",
    "from",
    "by",
    "at",
    "on",
    "step",
    "steps",
    "day",
    "week",
    "month",
    "year",
    "part",
    "page",
    "of",
    "not",
    "than",
    "except",
    "without",
}  # "5, not 6": a rejected value is not the result
# A clause that restates the result in other units or words ("72 muffins, which is 6 dozen").
_RESTATE_RE = lre.compile(
    r",\s*(?:which|i\.e\.|that\s+is|that's|or\s+about|or\s+approximately|equivalent|also|so\s+about)\b"
    r"|\s\((?:i\.e\.|which|or|about|approximately|that\s+is|=)"
    r"|\s(?:—|–|--)\s"
    r"|;\s",
    lre.I,
)
_HEDGE_RE = lre.compile(
    r"^\s*(?:,\s*)?(?:or|and/or)\s+(?:maybe\s+|perhaps\s+|possibly\s+|probably\s+)?(?:\\?\$\s?)?-?\s?(?:\d|\\frac)",
    lre.I,
)


@dataclass
class _Cand:
    start: int
    end: int
    text: str
    kind: str  # bold | math | chain | number | words
    context: bool = False
    display: bool = False  # a display equation ($$…$$, \[…\])


def _math_spans(text: str):
    """The math spans of ``_MATH_SPAN_RE``, with the inline ``$`` conditions RE2 cannot express (look-arounds)
    checked here: an inline span that fails them is skipped and the search resumes one character later, as a
    backtracking engine would."""
    pos = 0
    while True:
        m = _MATH_SPAN_RE.search(text, pos)
        if m is None:
            return
        if (m.group("dl") is not None or m.group("dx") is not None) and (
            (m.start() > 0 and text[m.start() - 1] in "\\$") or (m.end() < len(text) and text[m.end()].isdecimal())
        ):
            pos = m.start() + 1
            continue
        yield m
        pos = m.end() if m.end() > m.start() else m.start() + 1


def _mask(text: str, spans: list[tuple[int, int]]) -> str:
    """Blank out already-claimed spans so later patterns do not read inside them (keeps indices)."""
    if not spans:
        return text
    chars = list(text)
    for a, b in spans:
        for i in range(a, b):
            chars[i] = " "
    return "".join(chars)


_NAME_RE = lre.compile(r"(?:\\text\s*\{)?[A-Za-z]+(?:_\{?\w+\}?)?(?:\([A-Za-z, ]*\))?\}?")
_LAST_WORD_RE = lre.compile(r"([A-Za-z=]+)[^A-Za-z0-9=]*$")
_DIGIT_RE = lre.compile(r"\d")


def _preceding_word(text: str, start: int) -> str:
    m = _LAST_WORD_RE.search(text[max(0, start - 40) : start])
    return m.group(1).lower() if m else ""


def split_equals(text: str) -> list[str]:
    """``text`` split at each ``=`` that is an equals sign, not part of ``<=``, ``>=``, ``!=``, ``\\=`` or
    ``==`` (a single linear scan)."""
    parts, start = [], 0
    for i, ch in enumerate(text):
        if ch == "=" and (i == 0 or text[i - 1] not in "<>!\\") and text[i + 1 : i + 2] != "=":
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _math_value(latex: str) -> str:
    """A math span's result: the right-hand side of a chain of arithmetic on numbers ("3 \\times 4 = 12",
    "\\frac12 \\$ = \\frac{10}{9}"), else the whole span — an assignment ("x = 5") or an equation
    ("34x + 45y = 100") is kept whole: the comparison understands both, and an equation's right-hand side alone
    is not its meaning."""
    inner = latex.strip()
    parts = split_equals(inner)
    if len(parts) > 1:
        rhs = parts[-1].strip()
        lhs = parts[0].strip()
        if rhs and lhs and not _ASCII_LETTER_RE.search(_COMMAND_RE.sub("", lhs)):
            return rhs
    return inner


_COMMAND_RE = lre.compile(r"\\[A-Za-z]+")
_ASCII_LETTER_RE = lre.compile(r"[A-Za-z]")


def _candidates(stmt: str) -> list[_Cand]:
    cands: list[_Cand] = []
    claimed: list[tuple[int, int]] = []
    # Each pattern runs only when the characters it needs are there (a plain sentence has no "**", "$" or "\").
    for m in _BOLD_RE.finditer(stmt) if "**" in stmt or "__" in stmt else ():
        inner = m.group("b") or m.group("u") or ""
        if _DIGIT_RE.search(inner) or _WORDNUM_RE.search(inner):
            cands.append(_Cand(m.start(), m.end(), inner, "bold"))
            claimed.append((m.start(), m.end()))
    latex = "\\" in stmt
    masked = _mask(stmt, claimed)
    for m in _math_spans(masked) if latex or "$" in stmt else ():
        inner = next(
            g for g in (m.group("dd"), m.group("br"), m.group("pa"), m.group("dl"), m.group("dx")) if g is not None
        )
        if inner.strip():
            display = m.group("dd") is not None or m.group("br") is not None
            cands.append(_Cand(m.start(), m.end(), inner, "math", display=display))
            claimed.append((m.start(), m.end()))
    masked = _mask(stmt, claimed)
    for m in _BARE_LATEX_RE.finditer(masked) if latex else ():
        # "(\frac{2}{5}) 吨", a bare "\frac{10}{9}": LaTeX outside $…$, read like a number (not like $…$ math, which
        # outranks numbers): position decides among numbers
        cands.append(_Cand(m.start(), m.end(), m.group(0), "number"))
        claimed.append((m.start(), m.end()))
    masked = _mask(stmt, claimed)
    for m in _CHAIN_RE.finditer(masked) if "=" in stmt else ():
        cands.append(_Cand(m.start(), m.end(), m.group("res"), "chain"))
        claimed.append((m.start(), m.end()))
    masked = _mask(stmt, claimed)
    for m in _NUMBER_RE.finditer(masked):
        before = masked[m.start() - 1] if m.start() > 0 else " "
        if (before.isalpha() and before.isascii()) or before == "_":
            continue  # part of an identifier (x2, step_3); a number glued to CJK text ("有99颗") is read

        text = ("-" if m.group("neg") else "") + (m.group("cur") or "") + m.group("n") + (m.group("pct") or "")
        cands.append(_Cand(m.start(), m.end(), text.strip(), "number"))
        claimed.append((m.start(), m.end()))
    if not cands:
        masked = _mask(stmt, claimed)
        for m in _WORDNUM_RE.finditer(masked):
            value = words_to_number(m.group(0))
            if value is not None and m.group(0).strip().lower() not in ("one", "a"):
                cands.append(_Cand(m.start(), m.end(), str(value), "words"))
    for c in cands:
        c.context = _preceding_word(stmt, c.start) in _CONTEXT_WORDS
    cands.sort(key=lambda c: c.start)
    return cands


_BELOW_AFTER_RE = lre.compile(r"\s*(?:[A-Za-z]+\s+){0,2}below\s+(?:sea\s+level|zero|freezing)\b", lre.I)


def _apply_sign_words(stmt: str, c: _Cand) -> str:
    after = stmt[c.end : c.end + 60]
    if _BELOW_AFTER_RE.match(after):
        if not c.text.startswith("-"):
            return "-" + c.text
    return c.text


MAX_STATEMENT_CHARS = 400


def _bounded(stmt: str, prefer: str) -> str:
    """A statement's relevant end, at most MAX_STATEMENT_CHARS (cut at a space): a result sits near the start of
    what follows an answer phrase and near the end of a concluding sentence. Keeps every pattern linear."""
    if len(stmt) <= MAX_STATEMENT_CHARS:
        return stmt
    if prefer == "first":
        head = stmt[:MAX_STATEMENT_CHARS]
        cut = head.rfind(" ")
        return head[:cut] if cut > 0 else head
    tail = stmt[-MAX_STATEMENT_CHARS:]
    cut = tail.find(" ")
    return tail[cut + 1 :] if cut >= 0 else tail


_PLAIN_NUMBER_CHARS_RE = lre.compile(r"[-$\\\d.,%\s]+")


def read_statement(stmt: str, prefer: str) -> tuple[str | None, bool]:
    """(value, hedge) read from one statement; ``prefer`` is ``first`` (after an answer phrase, in a tag) or
    ``last`` (a concluding sentence). Restating clauses are cut first; bold, then math, then numbers that are
    not context ("in 4 weeks") win."""
    stmt = _bounded(stmt.strip(), prefer)
    for ch in MINUS_SIGNS:
        stmt = stmt.replace(ch, "-")
    cands = _candidates(stmt)
    if not cands:
        return None, False
    m = _RESTATE_RE.search(stmt, cands[0].end)
    if m:
        cut = m.start()
        kept = [c for c in cands if c.end <= cut]
        if kept:
            cands = kept
    # "The largest $n$ is 34", "the volume of $ABCDEFGH$ is 120": math that only names something is no result.
    named = [c for c in cands if not (c.kind == "math" and _NAME_RE.fullmatch(c.text.strip()))]
    if named:
        cands = named
    if prefer == "last":
        # "$$…$$ Therefore, the error increases by 100%.": a result stated in prose after a display equation wins.
        last_display = max((c.end for c in cands if c.display), default=-1)
        after = [c for c in cands if c.start >= last_display and c.kind in ("number", "chain")]
        # Only a new statement after the display ("$$…$$ Therefore, …"), not its continuation ("$$…$$ rounded
        # to 2 decimal places").
        if last_display >= 0 and after and stmt[last_display:].lstrip(" \t\n.,")[:1].isupper():
            cands = [c for c in after if not c.context] or after
    for kinds in (("bold",), ("math",), ("chain", "number", "words")):
        pool = [c for c in cands if c.kind in kinds]
        if not pool:
            continue
        strong = [c for c in pool if not c.context] or pool
        chosen = strong[0] if prefer == "first" else strong[-1]
        if chosen.kind == "math":
            value = _math_value(chosen.text)
        elif chosen.kind == "bold" and not _PLAIN_NUMBER_CHARS_RE.fullmatch(chosen.text):
            value = read_statement(chosen.text, prefer)[0] or chosen.text.strip()  # "**72 muffins**"
        elif chosen.kind == "bold":
            value = chosen.text.strip()
        else:
            value = _apply_sign_words(stmt, chosen)
        hedge = bool(_HEDGE_RE.match(stmt[chosen.end :]))
        return value, hedge
    return None, False
