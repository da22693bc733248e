"""Which final answer a completion gives — sections 1 and 2 of docs/answer-convention.md.

``extract_answer(completion)`` returns an ``Extraction``: the answer text as read (``"72"``, ``"\\frac{3}{4}"``,
``"-3, 2"`` for a run of adjacent boxes), the rule that produced it (``boxed``, ``answer_tag``, ``hashes``,
``phrase``, ``conclusion``) or, when there is none, why. Everything here is regex and linear scans over the
text — no sympy, nothing evaluated — and runs in time linear in the completion's length (one brace-matching pass;
patterns without nested quantifiers), so pathological completions (20k-character loops, unbalanced braces) cost
milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grpoflow.rewards import _linear_re as lre
from grpoflow.rewards.numbers import MINUS_SIGNS, NUMBER_WORDS, words_to_number

__all__ = [
    "Extraction",
    "extract_answer",
    "extract_boxed_answer",
    "response_part",
    "find_boxes",
    "top_level",
    "END_TOKENS",
    "looks_like_code",
]

END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>")
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class Extraction:
    answer: str | None  # the final answer as read, None when the completion gives none
    source: str | None  # boxed | answer_tag | hashes | phrase | conclusion
    reason: str | None = None  # why there is no answer (None when there is one)
    parts: tuple[str, ...] = field(default=())  # the pieces of a multi-part answer (adjacent boxes)
    hedge: bool = False  # the statement offers alternatives ("72 or 73")

    @property
    def found(self) -> bool:
        return self.answer is not None


def _none(reason: str) -> Extraction:
    return Extraction(None, None, reason)


# ---------------------------------------------------------------------------------------------------------------
# 1. The response


TURN_START = "<|im_start|>"


def strip_end_tokens(text: str) -> str:
    """Chat-template end tokens removed, and anything from a ``<|im_start|>`` after the response on (the model
    went on to write the next turn, "<|im_start|>user…": not part of its answer)."""
    for tok in END_TOKENS:
        if tok in text:
            text = text.replace(tok, "")
    turn = text.find(TURN_START)
    while turn >= 0 and not text[:turn].strip():  # a template that opens the completion with its own turn
        text = text[turn + len(TURN_START) :]
        turn = text.find(TURN_START)
    return text[:turn] if turn >= 0 else text


def response_part(completion: str) -> tuple[str | None, str | None]:
    """(response, None) or (None, reason): the part of the completion that counts (convention §1)."""
    text = strip_end_tokens(completion)
    cut = text.rfind(THINK_CLOSE)
    if cut >= 0:
        return text[cut + len(THINK_CLOSE) :], None
    if THINK_OPEN in text:
        return None, "cut off during reasoning (<think> without </think>)"
    return text, None


# ---------------------------------------------------------------------------------------------------------------
# 2a. Boxes


_BOX_RE = lre.compile(r"\\(?:boxed|fbox)\s*\{")


def match_braces(text: str) -> dict[int, int]:
    """Index of every ``{`` → index of its matching ``}`` (unclosed ones absent). Escaped ``\\{ \\}`` are text."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            pairs[stack.pop()] = i
        i += 1
    return pairs


@dataclass(frozen=True)
class Box:
    start: int  # index of the backslash
    end: int  # index just past the closing brace (== -1 when unclosed)
    text: str = field(repr=False, compare=False)  # the text the box was found in

    @property
    def content(self) -> str:
        """Between the braces ("" when unclosed). Sliced on demand: slicing every box of a deeply nested text
        up front would copy the text once per box (quadratic)."""
        if self.end < 0:
            return ""
        return self.text[self.text.index("{", self.start) + 1 : self.end - 1]


def top_level(boxes: list[Box]) -> list[Box]:
    """The closed boxes not inside another box (a box inside a box is part of that answer)."""
    top: list[Box] = []
    for b in boxes:
        if b.end < 0 or (top and b.start < top[-1].end):
            continue
        top.append(b)
    return top


def find_boxes(text: str) -> list[Box]:
    """Every ``\\boxed{...}``/``\\fbox{...}`` in order; unclosed ones have ``end == -1``."""
    if "box" not in text:
        return []
    pairs = match_braces(text)
    boxes = []
    for m in _BOX_RE.finditer(text):
        brace = m.end() - 1
        close = pairs.get(brace)
        if close is None:
            boxes.append(Box(m.start(), -1, text))
        else:
            boxes.append(Box(m.start(), close + 1, text))
    return boxes


def unwrap_boxes(content: str) -> str:
    """``\\boxed{\\boxed{x}}`` means ``x``; box commands inside an answer are dropped, their contents kept.

    One pass (one brace matching, then every box command and its closing brace skipped): removing them one at a
    time re-scanned the content per box, quadratic in a deeply nested answer."""
    if "box" not in content:
        return content.strip()
    pairs = match_braces(content)
    skip: list[tuple[int, int]] = []
    for m in _BOX_RE.finditer(content):
        skip.append((m.start(), m.end()))
        close = pairs.get(m.end() - 1)
        if close is not None:
            skip.append((close, close + 1))
    skip.sort()
    out, pos = [], 0
    for a, b in skip:
        if a >= pos:
            out.append(content[pos:a])
        pos = max(pos, b)
    out.append(content[pos:])
    return "".join(out).strip()


# Between adjacent boxes of one multi-part answer: spaces, commas, "and", "or", $ (and inline-math delimiters,
# \text{ and }, \quad) — never a newline or a sentence end.
_BOX_GAP_RE = lre.compile(r"(?:[ \t,$]|\\[()]|\band\b|\bor\b|\\text\s*\{\s*(?:and|or|,)?\s*\}|\\q?quad\b|\\[,;: ])*")


def _from_boxes(response: str) -> Extraction | None:
    boxes = find_boxes(response)
    if not boxes:
        return None
    top = top_level(boxes)
    last_closed_end = top[-1].end if top else -1
    if any(b.end < 0 and b.start > last_closed_end for b in boxes):
        # The output stops inside its (last) box: the answer was cut off, there is none.
        return _none("cut off inside \\boxed{ (unbalanced braces)")
    answers = [(b, unwrap_boxes(b.content)) for b in top]
    answers = [(b, a) for b, a in answers if a]  # empty boxes (an echoed instruction) are ignored
    if not answers:
        return None
    run = [answers[-1]]
    for b, a in reversed(answers[:-1]):
        gap = response[b.end : run[0][0].start]
        if _BOX_GAP_RE.fullmatch(gap):
            run.insert(0, (b, a))
        else:
            break
    parts = tuple(a for _, a in run)
    return Extraction(", ".join(parts), "boxed", parts=parts if len(parts) > 1 else ())


def extract_boxed_answer(text: str) -> str | None:
    """The final boxed answer of a text by rule a alone (e.g. a MATH worked solution → its answer key), or None."""
    found = _from_boxes(strip_end_tokens(text))
    return found.answer if found is not None else None


# ---------------------------------------------------------------------------------------------------------------
# Reading a statement: "Tom earns $1,680 in 4 weeks." → 1,680 ; "12 × 35 × 4 = 1680" → 1680


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
    for m in _BOLD_RE.finditer(stmt):
        inner = m.group("b") or m.group("u") or ""
        if _DIGIT_RE.search(inner) or _WORDNUM_RE.search(inner):
            cands.append(_Cand(m.start(), m.end(), inner, "bold"))
            claimed.append((m.start(), m.end()))
    masked = _mask(stmt, claimed)
    for m in _math_spans(masked):
        inner = next(
            g for g in (m.group("dd"), m.group("br"), m.group("pa"), m.group("dl"), m.group("dx")) if g is not None
        )
        if inner.strip():
            display = m.group("dd") is not None or m.group("br") is not None
            cands.append(_Cand(m.start(), m.end(), inner, "math", display=display))
            claimed.append((m.start(), m.end()))
    masked = _mask(stmt, claimed)
    for m in _BARE_LATEX_RE.finditer(masked):  # "(\frac{2}{5}) 吨", a bare "\frac{10}{9}": LaTeX outside $…$
        # read like a number (not like $…$ math, which outranks numbers): position decides among numbers
        cands.append(_Cand(m.start(), m.end(), m.group(0), "number"))
        claimed.append((m.start(), m.end()))
    masked = _mask(stmt, claimed)
    for m in _CHAIN_RE.finditer(masked):
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


# ---------------------------------------------------------------------------------------------------------------
# 2b–e. Answer tags, "####", answer phrases, the concluding sentence


# "#### X" (X as group 1, possibly with leading spaces: readers strip it); "#####" is not a GSM8K answer line.
_HASHES_RE = lre.compile(r"(?m)^[ \t]*####([ \t]+\S[^\n]*?|[^#\s][^\n]*?)[ \t]*$")
_PHRASE_RE = lre.compile(
    r"(?:"
    r"\b(?:the\s+)?final\s+answer\s*(?:is|would\s+be|will\s+be)?\s*:?"
    r"|\bthe\s+(?:correct\s+)?answer\s+(?:to\s+[^.\n:]{1,60}?\s+)?(?:is|would\s+be|will\s+be)\s*:?"
    r"|\banswer\s*:"
    r"|\*\*\s*(?:final\s+)?answer\s*:?\s*\*\*\s*:?"
    r"|^[ \t]*#{1,6}[ \t]*(?:final\s+)?answer\b[ \t]*:?"
    r"|答案(?:是|为|：|:)"
    r"|\b(?:la\s+)?réponse\s*(?:finale\s*)?(?:est|:)"
    r")",
    lre.I | lre.M,
)
_FENCE_RE = lre.compile(r"```.*?(?:```|\Z)", lre.S)
# Sentence ends: a full stop (after a digit only before a capital, "*" or the end: "3.5" and "1. item" are not),
# a blank line, or a line break before a list item. The conditions on the neighbours are checked in
# _sentence_ends (RE2 has no look-arounds).
_SENTENCE_END_RE = lre.compile(r"(?P<stop>[.!?。])|\n\s*\n|(?P<nl>\n)")
_CLOSER_RE = lre.compile(
    r"(?i)^\W*(?:i\s+hope\s+(?:this|that|it)|hope\s+(?:this|that)|let\s+me\s+know|good\s+luck|"
    r"have\s+a\s+(?:nice|great|good)|happy\s+to\s+help|feel\s+free)"
)
_DANGLING_RE = lre.compile(
    r"(?:[-+*/=^×÷(\[{,:\\]|\\frac|\b(?:the|a|an|of|to|is|are|was|were|and|or|but|so|then|with|for|by|from|in|on|"
    r"at|as|that|which|we|i|it|this|be|each|per|than|into|has|have|get|gets|equals|plus|minus|times|divided|"
    r"multiplied|if|because|therefore|thus|hence|since|total|let's|let|compute|calculate))\s*$",
    lre.I,
)


def _statement_after(text: str, start: int) -> str:
    """The statement that follows an answer phrase: the rest of its line, or the next non-empty line."""
    rest = text[start:]
    line, _, after = rest.partition("\n")
    if line.strip(" \t*:#"):
        return line
    for nxt in after.split("\n"):
        if nxt.strip(" \t*"):
            return nxt
    return ""


def _truncated(response: str) -> bool:
    """True when the response stops mid-sentence or mid-equation (convention §2e)."""
    tail = response.rstrip().rstrip("*_ \t")
    if not tail:
        return True
    if _DANGLING_RE.search(tail[-80:]):
        return True
    # Unclosed math or braces in the last paragraph: cut off mid-equation.
    para = tail[tail.rfind("\n\n") + 1 :]
    if para.count("\\(") > para.count("\\)") or para.count("\\[") > para.count("\\]"):
        return True
    if para.count("$$") % 2 == 1:
        return True
    return para.count("{") > para.count("}")


def _sentence_ends(text: str):
    n = len(text)
    for m in _SENTENCE_END_RE.finditer(text):
        end = m.end()
        if m.group("stop") is not None:
            j = end
            while j < n and text[j].isspace():
                j += 1
            if m.start() > 0 and text[m.start() - 1].isdecimal():
                ok = j == n or (j > end and (text[j] == "*" or "A" <= text[j] <= "Z"))
            else:
                ok = j == n or j > end
            if not ok:
                continue
        elif m.group("nl") is not None and not _list_item_at(text, end):
            continue
        yield m


def _list_item_at(text: str, i: int) -> bool:
    """A list item starts at ``text[i:]`` after spaces: ``-``, ``*``, ``#`` or ``12.``/``12)`` and a space.
    (A scan rather than ``match(text, pos)``: on non-ASCII text each positioned RE2 call converts offsets from
    the start, which a loop over the lines would make quadratic.)"""
    n = len(text)
    while i < n and text[i].isspace():
        i += 1
    if i < n and text[i] in "-*#":
        return True
    k = i
    while k < n and text[k].isdecimal():
        k += 1
    return i < k < n - 1 and text[k] in ".)" and text[k + 1].isspace()


def _sentences(text: str) -> list[str]:
    out, last = [], 0
    for m in _sentence_ends(text):
        out.append(text[last : m.end()])
        last = m.end()
    out.append(text[last:])
    return [s for s in out if s.strip(" \t\n*#>-")]


# A response that is a single expression of numbers and one-letter unknowns, with an operator between terms.
_BARE_EXPRESSION_RE = lre.compile(
    r"[-+]?(?:\d+(?:\.\d+)?[a-z]?|[a-z]|\(|\))(?:\s*(?:[-+*/^]\s*)?(?:\d+(?:\.\d+)?[a-z]?|[a-z]|\(|\)))*"
)
_OPERATOR_BETWEEN_RE = lre.compile(r"[\w)]\s*[-+*/^]\s*[\w(]")
_ONLY_CHOICE_RE = lre.compile(r"[\s*]*\(?([A-E])\)?[\s*]*[.。]?\s*")
# A response that opens with its choice letter ("D. it can't be A or B", "B。不是 A", "B不是 A").
_OPENING_CHOICE_RE = lre.compile(r"[\s*]*\(?([A-E])\)?(?:[.。:：)]|[^\x00-\x7F])")
_LETTER_RE = lre.compile(r"(?:^|[^A-Za-z'’])([A-E])(?:[^A-Za-z'’]|$)")
MAX_LETTER_RESPONSE_CHARS = 300
_NEGATION_RE = lre.compile(r"\bnot\b|n't|\bnon\b|不是|不", lre.I)


def _choice_letter(response: str) -> str | None:
    """A short response with no number gives its choice letter: the one it opens with, else the last one its
    concluding sentence names ("therefore I think it's B")."""
    text = response.strip()
    if len(text) > MAX_LETTER_RESPONSE_CHARS:
        return None
    m = _OPENING_CHOICE_RE.match(text)
    if m:
        return m.group(1)
    last = _sentences(text)[-1] if text else ""
    found = None
    for m in _LETTER_RE.finditer(last):
        if not _NEGATION_RE.search(last[max(0, m.start() - 12) : m.start() + 1]):  # "not A", "can't be A"
            found = m
    return found.group(1) if found else None


def _from_conclusion(response: str) -> Extraction:
    if not response.strip():
        return _none("empty response")
    only = _ONLY_CHOICE_RE.fullmatch(response)
    if only:  # the whole response is a choice letter ("A" is not a truncated sentence)
        return Extraction(only.group(1), "conclusion")
    bare = response.strip()
    if len(bare) <= 100 and _BARE_EXPRESSION_RE.fullmatch(bare) and _OPERATOR_BETWEEN_RE.search(bare):
        return Extraction(bare, "conclusion")  # the response is one expression ("3+2", "2x + 2"): read it whole
    opening = _OPENING_CHOICE_RE.match(response) if len(response.strip()) <= MAX_LETTER_RESPONSE_CHARS else None
    if opening and not _DIGIT_RE.search(response):  # "B。不是 A", "D. it can't be A or B": the letter it opens with
        return Extraction(opening.group(1), "conclusion")
    if _truncated(response):
        return _none("response stops mid-sentence or mid-equation (truncated)")
    text = response
    fence = None
    for fence in _FENCE_RE.finditer(text):
        pass
    if fence is not None and not text[fence.end() :].strip():
        return _none("the response ends in a code block (code is not an answer)")
    sentences = _sentences(_FENCE_RE.sub(" ", text))
    while sentences and _CLOSER_RE.match(sentences[-1].strip()) and not _DIGIT_RE.search(sentences[-1]):
        sentences.pop()  # "I hope this helps!" closes, it does not conclude
    if not sentences:
        return _none("no concluding statement")
    value, hedge = read_statement(sentences[-1], prefer="last")
    if value is None:
        letter = _choice_letter(text)
        if letter is not None:
            return Extraction(letter, "conclusion")
        return _none("the concluding sentence states no result")
    return Extraction(value, "conclusion", hedge=hedge)


def _last_answer_tag(response: str) -> str | None:
    """The content of the last non-empty ``<answer>…</answer>`` (linear scans from the end)."""
    close = response.rfind("</answer>")
    while close >= 0:
        start = response.rfind("<answer>", 0, close)
        if start < 0:
            return None
        content = response[start + len("<answer>") : close]
        if content.strip():
            return content
        close = response.rfind("</answer>", 0, start)
    return None


def _read_tag_content(content: str) -> tuple[str | None, bool]:
    """An ``<answer>`` tag's content, read with rules c–e: a bare value, ``#### X``, a phrase, a sentence."""
    body = content.strip()
    if not body:
        return None, False
    hashes = [m for m in _HASHES_RE.finditer(body) if _bare_value(m.group(1))]
    if hashes:
        return _bare_value(hashes[-1].group(1)), False
    bare = _bare_math(body)
    if bare is not None:
        return bare, False
    phrase = _from_phrase(body)
    if phrase is not None and phrase.answer is not None:
        return phrase.answer, phrase.hedge
    value, hedge = read_statement(body, prefer="first")
    if value is None and "\n" not in body and len(body) <= 200:
        return body, False  # a bare expression the statement reader has no pattern for (e.g. "x^2+1")
    return value, hedge


_VALUE_START_RE = lre.compile(r"[-+$\\(.\d]|" + "|".join(MINUS_SIGNS))


_LATEX_COMMAND_RE = lre.compile(r"\\[A-Za-z]+")
_WORD3_RE = lre.compile(r"[A-Za-z]{3,}")


def _bare_math(body: str) -> str | None:
    """A tag's content when it is one LaTeX expression (``\\frac{3}{4}``, ``x^2+2x+1``, ``(-\\infty, 2)``): the
    value itself, not a sentence to pick a number from. Equations and anything with words are left to rules c-e."""
    text = body.strip()
    if "\n" in text or len(text) > 200 or "=" in text:
        return None
    if len(text) > 1 and text.startswith("$") and text.endswith("$"):
        text = text.strip("$").strip()
    if (
        not text
        or not ("\\" in text or "^" in text or text[0] in "([")
        or _WORD3_RE.search(_LATEX_COMMAND_RE.sub(" ", text))
    ):
        return None
    return text


def _bare_value(text: str) -> str | None:
    """The value of a ``#### X`` line, or None when X is words (a markdown heading such as "#### Step 2")."""
    text = text.strip()
    if not _VALUE_START_RE.match(text):
        return None
    value, _ = read_statement(text, prefer="first")
    return value


# A choice letter that opens what follows an answer phrase (adverbs allowed), then a break.
_LEADING_CHOICE_RE = lre.compile(
    r"[\s*]*(?:(?:for\s+sure|definitely|clearly|certainly|surely|obviously|probably)\s*,?\s*)?"
    r"\(?([A-E])\)?(?:[\s*.,;:!)。，]|$)"
)
_ARTICLE_A_RE = lre.compile(r"A\s+[a-z]")  # "A lot of apples": the article, not choice A
_CHOICE_HEDGE_RE = lre.compile(r"\)?[\s*]*,?\s*(?:or|and/or)\s+\(?[A-E]\)?(?:[^A-Za-z]|$)", lre.I)
_CODE_SPAN_RE = lre.compile(r"\s*`([^`]+)`")
_PHRASE_TUPLE_RE = lre.compile(r"[\s*]*\$?\s*([(\[][^()\[\]\n]*,[^()\[\]\n]*[)\]])\s*\$?[\s*]*[.!;]?\s*")
_PHRASE_CHOICE_RE = lre.compile(
    r"[\s*]*(\(?[A-Z]\)?)[\s*]*[.!;:,]?\s*"  # "B", "(B).", "**C**", "U."
    r"|[\s*]*(\([A-E]\))\s+\$?\d[\d,.]*\s*[.!]?\s*"  # "(D) 23": the letter and its option's value
)


def _from_phrase(response: str) -> Extraction | None:
    found = None
    for found in _PHRASE_RE.finditer(response):
        pass
    if found is None:
        return None
    stmt = _statement_after(response, found.end())
    code = _CODE_SPAN_RE.match(stmt)
    if code:  # "The answer is `print(72)`": a code span is read verbatim, the verifier rejects code
        return Extraction(code.group(1).strip(), "phrase")
    # "The answer is (3, -2)." / "The answer is B." / "Answer: (D) 23": a tuple, interval or choice letter that
    # is the whole statement — the number reader would take its first number or nothing.
    whole = _PHRASE_TUPLE_RE.fullmatch(stmt) or _PHRASE_CHOICE_RE.fullmatch(stmt)
    if whole:
        return Extraction(next(g for g in whole.groups() if g), "phrase")
    letter = _LEADING_CHOICE_RE.match(stmt)
    if letter and not _ARTICLE_A_RE.match(stmt, letter.start(1)):
        # "The answer: D, it can't be A or B", "The answer is for sure D", "réponse est C non A"
        hedge = bool(_CHOICE_HEDGE_RE.match(stmt, letter.end(1)))  # "(B) or (C)"
        return Extraction(letter.group(1), "phrase", hedge=hedge)
    value, hedge = read_statement(stmt, prefer="first")
    if value is None:
        return None
    return Extraction(value, "phrase", hedge=hedge)


def extract_answer(completion: str) -> Extraction:
    """The completion's final answer per docs/answer-convention.md §1–2 (first applicable rule wins)."""
    response, why = response_part(completion)
    if response is None:
        return _none(why or "no response")
    boxed = _from_boxes(response)
    if boxed is not None:
        return boxed
    content = _last_answer_tag(response)
    if content is not None:
        value, hedge = _read_tag_content(content)
        if value is not None:
            return Extraction(value, "answer_tag", hedge=hedge)
        return _none("the <answer> tag states no value")
    # An unclosed <answer> (generation stopped before </answer>) is not a tag answer; its text is still read.
    response = response.replace("<answer>", " ").replace("</answer>", " ")
    hashes = [m for m in _HASHES_RE.finditer(response) if _bare_value(m.group(1))]
    if hashes:
        return Extraction(_bare_value(hashes[-1].group(1)), "hashes")
    phrase = _from_phrase(response)
    if phrase is not None:
        return phrase
    return _from_conclusion(response)


# ---------------------------------------------------------------------------------------------------------------
# Code is not an answer (convention §3)

_CODE_RE = lre.compile(
    r"(?:^|[^\\\w])(?:print|eval|exec|open|__import__|import|lambda|len|sum|range|sorted|int|float|str|list|dict|"
    r"set|tuple|abs|round|max|min|pow|map|filter|input|compile|getattr|globals|locals)\s*\("
    r"|\bimport\s+\w|\blambda\b[^:]*:|\bdef\s+\w+\s*\(|\breturn\b|__\w+__"
    r"|(?:^|[^\\\w])[A-Za-z_]\w*\.[A-Za-z_]\w*\s*\("  # attribute call: math.sqrt(2), os.system(...)
    r"|\w\s*\*\*\s*\w|(?:^|[^:/])//"  # Python power and floor division
    r"|\bfor\s+\w+\s+in\b|\bif\s+.+\belse\b|```"
)


def looks_like_code(answer: str) -> bool:
    """True when an answer is (Python) code rather than a value. Code is never executed, only recognised."""
    return bool(_CODE_RE.search(answer))
