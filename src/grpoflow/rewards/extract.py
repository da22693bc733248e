"""Which final answer a completion gives — sections 1 and 2 of docs/answer-convention.md.

``extract_answer(completion)`` returns an ``Extraction``: the answer text as read (``"72"``, ``"\\frac{3}{4}"``,
``"-3, 2"`` for a run of adjacent boxes), the rule that produced it (``boxed``, ``answer_tag``, ``hashes``,
``phrase``, ``conclusion``) or, when there is none, why. Everything here is regex and linear scans over the
text — no sympy, nothing evaluated — and runs in time linear in the completion's length (one brace-matching pass;
patterns without nested quantifiers), so pathological completions (20k-character loops, unbalanced braces) cost
milliseconds. Finding boxes is ``boxes``; reading one statement for its result (rules b–e) is ``statement``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grpoflow.rewards import _linear_re as lre
from grpoflow.rewards.boxes import find_boxes, top_level, unwrap_boxes
from grpoflow.rewards.numbers import MINUS_SIGNS
from grpoflow.rewards.statement import read_statement

__all__ = [
    "Extraction",
    "extract_answer",
    "extract_boxed_answer",
    "response_part",
    "find_boxes",
    "top_level",
    "unwrap_boxes",
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
    first = text.find("<|")  # every token starts so: the text before the first one need not be searched again
    if first < 0:
        return text
    for tok in END_TOKENS:  # the common case: one end token, at the very end
        if text.endswith(tok) and len(text) - len(tok) == first:
            return text[:first]
    for tok in END_TOKENS:
        if text.find(tok, first) >= 0:
            text = text.replace(tok, "")
    turn = text.find(TURN_START, first)
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
# 2a. Boxes: which top-level boxes make the final answer (finding them is ``boxes``)

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
_DIGIT_RE = lre.compile(r"\d")


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
    for fence in _FENCE_RE.finditer(text) if "```" in text else ():
        pass
    if fence is not None and not text[fence.end() :].strip():
        return _none("the response ends in a code block (code is not an answer)")
    sentences = _sentences(_FENCE_RE.sub(" ", text) if fence is not None else text)
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
    value = _last_hashes_value(body)
    if value is not None:
        return value, False
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


def _last_hashes_value(text: str) -> str | None:
    """The value of the last ``#### X`` line whose X is a value (rule c), or None."""
    if "####" not in text:
        return None
    for m in reversed(list(_HASHES_RE.finditer(text))):
        value = _bare_value(m.group(1))
        if value:
            return value
    return None


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


_SINGLE_LETTER_RE = lre.compile(r"[A-Za-z]")
_LONE_LETTER_MATH_RE = lre.compile(r"\$[A-Za-z]\$|\\text\s*\{")
_TWO_LETTERS_RE = lre.compile(r"[A-Za-z]{2}")
# Up to five words (or single-letter math such as $n$, or \text{…}), then at most a full stop.
_WORD_OR_NAME = r"(?:[A-Za-z][A-Za-z'’-]*|\$[A-Za-z]\$|\\text\s*\{[A-Za-z ,'’-]*\})"
_WORDS_RE = lre.compile(rf"[\s*:]*({_WORD_OR_NAME}(?:[ \t]+{_WORD_OR_NAME}){{0,4}})[\s*]*[.!]?[\s*]*")


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
    if value is None or _SINGLE_LETTER_RE.fullmatch(value):
        # "**Answer:** odd $n$", "The answer is odd.": a few words that close the response are the answer (the
        # letter alone would be the name they describe). Words that do not close it ("The answer is not
        # obvious. …") or that talk about choice letters ("not A") are no answer.
        words = _WORDS_RE.fullmatch(stmt)
        if (
            words
            and _TWO_LETTERS_RE.search(_LONE_LETTER_MATH_RE.sub(" ", words.group(1)))
            and not _LETTER_RE.search(stmt)
            and not response[found.end() :].strip().removesuffix(stmt.strip()).strip(" \t*:")
        ):
            return Extraction(words.group(1).strip(), "phrase")
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
    value = _last_hashes_value(response)
    if value is not None:
        return Extraction(value, "hashes")
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
