"""Benchmark: grpoflow's combined reward vs plain math-verify, on 1,000 Qwen3-style completions.

    .venv/bin/python benchmarks/rewards.py [--n 1000] [--group 8] [--seed 0] [--show 5]

Completions are generated deterministically: GSM8K-style ones from the real GSM8K test set
(../shared/data/gsm8k/test.jsonl, else data/gsm8k_sample/test.jsonl) — the reference solution rewritten as a
long <think> block with re-checks, then a final response in one of the styles Qwen3 uses (boxed, **Final
Answer**, "The answer is", ####, bold conclusion, <answer> tags) — and MATH-style ones from answer keys written
here (fractions, radicals, π, intervals, tuples, polynomials, sets, matrices, bases, choices), answered with the
key, an equivalent form, a wrong value or a rounded decimal. Each completion carries the label the answer
convention gives it (correct or not).

In the same run both scorers see the same completions, in GRPO groups of ``--group`` per prompt:

- grpoflow: ``RewardSet({funcs: [accuracy, format2, cosine, length], normalize: per_prompt})`` — the verifier
  plus every other component, the weighted sum and the z-norm (the combined reward);
- plain math-verify: ``verify(parse(f"${ground_truth}$"), parse(completion))`` per completion, with its default
  extraction and its own (signal) timeouts, in the main thread.

It prints the time per completion for each, the speed-up per style (targets, issue 41: >= 20x GSM8K, >= 5x MATH,
on a loaded 2-core machine), how often each agrees with the convention's label, and every disagreement between
the two, grouped by kind. Each of ``--repeats`` runs is a fresh process (no cache of either scorer, sympy's
included, carries over); before timing, math-verify parses a generic warm-up set, grpoflow reads a few generic
completions (``grpoflow.rewards.warm_up``: RE2 builds parts of its automata on first use) and starts its
math-verify workers (a one-off cost, printed, not timed); the best time of each scorer is reported.

External agreement suite (issue 18): ``--external`` scores the cases of ``tests/rewards/external/`` (ported from
Math-Verify's, lighteval's, hendrycks/math's and open-r1's public test suites, labelled by the answer convention)
with grpoflow's verifier, plain math-verify and — when installed — mathruler (verl/EasyR1's boxed-answer grader),
each in a fresh process, and prints accuracy, false positives, false negatives and throughput per category
(ambiguous cases apart, never in the accuracy).

    .venv/bin/python benchmarks/rewards.py --external

Hostile batches (issue 13): the same completions scored by ``grpoflow.rewards.verify`` from ``--threads``
threads, as verl's reward workers call it (``adversarial.run_in_scorer_threads``), once clean and once with
``--hostile`` (10 %) of them replaced by pathological ones — the same reasoning, then a final answer that is a
huge exponent, a tower, a factorial, deep nesting, thousands of digits or a long letter run after a number —
reporting completions per second for both, their ratio and the slowest call. The worker pool's size and budget
are the ``GRPOFLOW_VERIFY_WORKERS``/``GRPOFLOW_VERIFY_TIMEOUT`` settings of the environment.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GSM8K_FILES = [REPO.parent / "shared" / "data" / "gsm8k" / "test.jsonl", REPO / "data" / "gsm8k_sample" / "test.jsonl"]
B = "\\boxed"


@dataclass
class Item:
    style: str  # gsm8k | math
    kind: str  # how the final answer is written (for the disagreement report)
    completion: str
    truth: str
    label: bool  # correct under the answer convention
    group: int


# ---------------------------------------------------------------------------------------------------------------
# GSM8K-style completions from real GSM8K problems

FILLER = [
    "Wait, let me re-read the problem to make sure I have the numbers right.",
    "Hmm, let me double-check that calculation step by step.",
    "Let me verify this another way, just to be safe.",
    "Okay, so far so good. Let me make sure I did not miss any part of the question.",
    "Actually, I should be careful here about what the question is asking for.",
    "Let me recompute: I'll redo the arithmetic slowly.",
]


def _steps(solution: str) -> list[str]:
    lines = [re.sub(r"<<[^>]*>>", "", ln).strip() for ln in solution.split("\n") if not ln.startswith("####")]
    return [ln for ln in lines if ln]


def _think(question: str, steps: list[str], rng: random.Random, rounds: int) -> str:
    parts = [f"Okay, let's see. The problem says: {question}", "I need to figure out the answer step by step."]
    for r in range(rounds):
        if r:
            parts.append(rng.choice(FILLER))
        for s in steps:
            parts.append(s if r == 0 else f"So again, {s[0].lower()}{s[1:]}")
    return "<think>\n" + "\n\n".join(parts) + "\n</think>\n\n"


def _fmt_number(value: int, rng: random.Random) -> tuple[str, str]:
    """(text, kind) — a correctly formatted variant of an integer answer."""
    choice = rng.random()
    if choice < 0.55 or value < 1000:
        return (f"{value}", "plain") if choice < 0.8 else (f"{value}.00", "decimal .00")
    return f"{value:,}", "thousands"


def gsm8k_items(rows: list[dict], n_groups: int, group: int, rng: random.Random) -> list[Item]:
    items = []
    for g in range(n_groups):
        row = rows[g % len(rows)]
        truth = row["answer"].rsplit("####", 1)[1].strip().replace(",", "")
        value = int(float(truth))
        steps = _steps(row["answer"])
        for _ in range(group):
            think = _think(row["question"], steps, rng, rounds=rng.randint(3, 9))
            outcome = rng.random()
            if outcome < 0.06:  # cut off while reasoning: no </think>
                cut = think[: rng.randint(len(think) // 3, len(think) - 20)]
                items.append(Item("gsm8k", "truncated in think", cut, truth, False, len(items) // group))
                continue
            correct = outcome < 0.66
            shown = value if correct else value + rng.choice([-10, -3, -1, 1, 2, 5, 12, value or 1])
            text, fmt = _fmt_number(shown, rng)
            summary = " ".join(steps[:3])
            style = rng.choice(["boxed", "boxed", "boxed", "final", "phrase", "hashes", "bold", "tag", "dollar"])
            if style == "boxed":
                final = f"{summary}\n\nTherefore, the answer is $\\boxed{{{text}}}$."
            elif style == "final":
                final = f"{summary}\n\n**Final Answer**\n\\[\n\\boxed{{{text}}}\n\\]"
            elif style == "phrase":
                final = f"{summary}\n\nThe answer is {text}."
            elif style == "hashes":
                final = f"{summary}\n#### {text}"
            elif style == "bold":
                final = f"{summary}\n\nSo the final result is **{text}**."
            elif style == "tag":
                final = f"<answer>{text}</answer>"
            else:
                final = f"{summary}\n\nSo the answer is ${B}{{\\${text}}}$."
            items.append(
                Item("gsm8k", f"{style}/{fmt}", think + final + "<|im_end|>", truth, correct, len(items) // group)
            )
    return items


# ---------------------------------------------------------------------------------------------------------------
# MATH-style completions: answer keys with equivalent, wrong and rounded forms

# (truth, [equivalent forms], [wrong forms], rounded decimal or None)
MATH_KEYS = [
    ("\\frac{3}{4}", ["0.75", "\\dfrac{3}{4}", "\\frac{6}{8}"], ["\\frac{4}{3}", "\\frac{3}{8}"], None),
    (
        "\\frac{\\sqrt{3}}{2}",
        ["\\frac{3}{2\\sqrt{3}}", "\\dfrac{\\sqrt3}{2}"],
        ["\\frac{\\sqrt{2}}{2}", "\\sqrt{3}"],
        "0.866025",
    ),
    ("2\\sqrt{2}", ["\\sqrt{8}", "2 \\sqrt 2"], ["\\sqrt{2}", "4\\sqrt{2}"], "2.828427"),
    ("4\\pi", ["\\pi \\cdot 4", "4 \\pi"], ["2\\pi", "8\\pi"], "12.566371"),
    ("\\frac{\\pi}{3}", ["\\frac{1}{3}\\pi", "\\frac13\\pi"], ["\\frac{\\pi}{6}", "\\frac{2\\pi}{3}"], "1.047198"),
    ("(-\\infty, 2)", ["x < 2"], ["(-\\infty, 2]", "(2, \\infty)"], None),
    ("[1, 3) \\cup (4, 5]", ["(4, 5] \\cup [1, 3)"], ["[1, 3] \\cup (4, 5]", "[1, 5]"], None),
    ("(3, -2)", ["x = 3, y = -2", "\\left(3, -2\\right)"], ["(-2, 3)", "(3, 2)"], None),
    ("-3, 2", ["2, -3", "x = -3, x = 2"], ["-3", "3, -2"], None),
    ("x^2 + 2x + 1", ["(x+1)^2", "x^2 + x + x + 1"], ["x^2 + 1", "(x-1)^2"], None),
    ("1 + 2i", ["2i + 1"], ["1 - 2i", "2 + i"], None),
    (
        "\\begin{pmatrix} 1 \\\\ -2 \\end{pmatrix}",
        ["\\begin{pmatrix}1\\\\-2\\end{pmatrix}"],
        ["\\begin{pmatrix} -2 \\\\ 1 \\end{pmatrix}"],
        None,
    ),
    ("1011_2", ["1011"], ["11", "1101_2"], None),
    ("\\text{(B)}", ["B", "\\textbf{(B)}"], ["\\text{(C)}", "D"], None),
    ("30^\\circ", ["30", "30^{\\circ}"], ["60^\\circ", "150"], None),
    ("\\frac{1}{6}", ["\\frac{2}{12}", "\\dfrac16"], ["\\frac{1}{5}", "6"], "0.1667"),
    ("y = -2x + 5", ["y = 5 - 2x"], ["y = 2x + 5", "y = -2x - 5"], None),
    ("\\frac{9}{4}", ["2.25", "2\\frac{1}{4}"], ["\\frac{4}{9}", "2.5"], None),
    ("-\\frac{7}{2}", ["-3.5", "\\frac{-7}{2}"], ["\\frac{7}{2}", "-\\frac{2}{7}"], None),
    ("\\sqrt{5}", ["5^{1/2}", "\\sqrt5"], ["5", "\\sqrt{3}"], "2.236068"),
    ("\\{1, 2, 3\\}", ["\\{3, 2, 1\\}"], ["\\{1, 2\\}", "\\{1, 2, 3, 4\\}"], None),
    ("e^{2}", ["e^2"], ["2e", "e^{3}"], "7.389056"),
    ("\\frac{5}{12}", ["\\frac{10}{24}"], ["\\frac{7}{12}", "\\frac{5}{11}"], "0.416667"),
    ("10", ["10.0", "010"], ["11", "9"], None),
    ("204", ["204"], ["202", "240"], None),
    ("\\$18.90", ["18.90", "18.9"], ["18.09", "19.80"], None),
    ("\\infty", ["\\infty"], ["-\\infty", "0"], None),
    ("\\frac{1}{2}", ["0.5", "\\frac{2}{4}"], ["2", "\\frac{1}{4}"], None),
]

MATH_THINK = [
    "Let me set up the problem. We have $f(x) = x^2 - 4x + 3$, so $f'(x) = 2x - 4$ and the vertex is at $x = 2$.",
    "Using the identity $\\sin^2\\theta + \\cos^2\\theta = 1$, we get $\\cos\\theta = \\pm\\sqrt{1 - \\sin^2\\theta}$.",
    "By Vieta's formulas, $r_1 + r_2 = -\\frac{b}{a}$ and $r_1 r_2 = \\frac{c}{a}$.",
    "Let me compute the discriminant: $\\Delta = b^2 - 4ac = 16 - 12 = 4$, so $\\sqrt{\\Delta} = 2$.",
    "Wait, I should double check the boundary case where $x = 0$: then the expression is $\\frac{0}{1} = 0$.",
    "Hmm, let me reconsider. If I substitute $u = x + 1$, the integral becomes $\\int_0^1 u^2\\,du = \\frac{1}{3}$.",
    "So the area is $\\frac{1}{2} \\cdot 6 \\cdot 4 = 12$, and the perimeter is $3 + 4 + 5 = 12$ as well.",
    "Let me verify by plugging back in: $2(3) + 3(-2) = 0$, which matches.",
]


def math_items(n_groups: int, group: int, rng: random.Random, start_group: int) -> list[Item]:
    items = []
    for g in range(n_groups):
        truth, equiv, wrong, rounded = MATH_KEYS[g % len(MATH_KEYS)]
        for _ in range(group):
            paras = [rng.choice(MATH_THINK) for _ in range(rng.randint(12, 40))]
            think = "<think>\n" + "\n\n".join(paras) + "\n</think>\n\n"
            outcome = rng.random()
            if outcome < 0.06:
                cut = think[: rng.randint(len(think) // 3, len(think) - 20)]
                items.append(Item("math", "truncated in think", cut, truth, False, start_group + g))
                continue
            if outcome < 0.35:
                shown, correct, kind = truth, True, "key"
            elif outcome < 0.62:
                shown, correct, kind = rng.choice(equiv), True, "equivalent"
            elif outcome < 0.9 or rounded is None:
                shown, correct, kind = rng.choice(wrong), False, "wrong"
            else:
                shown, correct, kind = rounded, False, "rounded decimal"
            lead = "\n\n".join(rng.sample(MATH_THINK, 2))
            ending = rng.choice(
                [
                    f"{lead}\n\nTherefore, the final answer is $\\boxed{{{shown}}}$.",
                    f"{lead}\n\n**Final Answer**\n\\[\n\\boxed{{{shown}}}\n\\]",
                    f"{lead}\n\nThus the answer is $\\boxed{{{shown}}}$.",
                ]
            )
            items.append(Item("math", kind, think + ending + "<|im_end|>", truth, correct, start_group + g))
    return items


def build(n: int, group: int, seed: int) -> list[Item]:
    rng = random.Random(seed)
    src = next((p for p in GSM8K_FILES if p.exists()), None)
    if src is None:
        sys.exit(f"benchmarks/rewards.py: no GSM8K data at {' or '.join(map(str, GSM8K_FILES))}")
    rows = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines() if line.strip()]
    rng.shuffle(rows)
    n_groups = n // group
    gsm_groups = (n_groups + 1) // 2
    items = gsm8k_items(rows, gsm_groups, group, rng)
    items += math_items(n_groups - gsm_groups, group, rng, gsm_groups)
    return items


# ---------------------------------------------------------------------------------------------------------------
# Scoring


def run_grpoflow(items: list[Item]) -> tuple[list[bool], float]:
    from grpoflow.rewards import RewardSet, Sample, groups_of

    rset = RewardSet(
        {
            "funcs": ["accuracy", "format2", "cosine", "length"],
            "normalize": "per_prompt",
            "params": {"cosine": {"max_len": 8192}},
        }
    )
    start = time.perf_counter()
    samples = [Sample(it.completion, it.truth, n_tokens=len(it.completion) // 4) for it in items]
    scores = rset.score(samples, groups_of([it.group for it in items]))
    elapsed = time.perf_counter() - start
    return scores.correct, elapsed


def run_math_verify(items: list[Item]) -> tuple[list[bool], list[float]]:
    from math_verify import parse, verify

    verdicts, times = [], []
    for it in items:
        start = time.perf_counter()
        # The ground truth in $…$, as math-verify's README parses gold answers (bare LaTeX is not extracted).
        verdicts.append(bool(verify(parse(f"${it.truth}$"), parse(it.completion))))
        times.append(time.perf_counter() - start)
    return verdicts, times


def warm_up() -> float:
    """Start grpoflow's math-verify workers (timed: a one-off cost), warm grpoflow's in-process matching and make
    math-verify's first calls: neither scorer's one-off start-up is in the timed comparison."""
    from math_verify import parse, verify

    import grpoflow.rewards
    from grpoflow.rewards._mv_worker import WARMUP
    from grpoflow.rewards._sandbox import default_pool

    # The same generic warm-up grpoflow's workers do at start (latex2sympy's parser caches fill lazily).
    for gold, pred in WARMUP:
        verify(parse(f"${gold}$"), parse(f"${pred}$"))
    # Generic completions through grpoflow's reading once (RE2 builds parts of its automata on first use); no
    # verdict of them is kept. (A grpoflow from before issue 41, compared through PYTHONPATH, has no warm_up.)
    if hasattr(grpoflow.rewards, "warm_up"):
        grpoflow.rewards.warm_up()
    start = time.perf_counter()
    default_pool().start()
    return time.perf_counter() - start


def hostile_items(items: list[Item], rate: float, seed: int) -> list[Item]:
    """``items`` with ``rate`` of them (chosen with ``seed``) ending in a pathological final answer instead."""
    from grpoflow.rewards import adversarial

    rng = random.Random(seed + 1)
    answers = adversarial.PATHOLOGICAL_ANSWERS + [
        adversarial.hostile("letter_run_after_number", 2000),
        adversarial.hostile("letter_run_in_box", 5000),
        adversarial.hostile("nested_frac", 500),
        adversarial.hostile("nested_boxes", 2000),
        adversarial.hostile("digits", 3000),
        "((99^{99})^{99})^{99}",
        "(10^{10})!",
        "2^{2^{2^{2^{2}}}}",
    ]
    out = list(items)
    for i in rng.sample(range(len(items)), int(len(items) * rate)):
        it = items[i]
        head = it.completion.rsplit("</think>", 1)[0] + "</think>\n\n" if "</think>" in it.completion else ""
        form = rng.choice(adversarial.ANSWER_FORMS[:12])
        out[i] = Item(it.style, "hostile", head + form.replace("@", rng.choice(answers)), it.truth, False, it.group)
    return out


def threaded_rate(items: list[Item], threads: int) -> dict:
    """``verify`` over the items from ``threads`` threads (fresh caches): completions/s and the slowest call."""
    from grpoflow.rewards import adversarial, reset_caches

    reset_caches()
    report = adversarial.run_in_scorer_threads(
        [(it.completion, it.truth) for it in items], threads=threads, deadline_s=600
    )
    return {
        "rate": report.n / report.seconds,
        "slowest": report.slowest_s,
        "errors": report.errors,
        "seconds": report.seconds,
    }


def one_run(args) -> dict:
    """Both scorers on the same completions, in this (fresh) process: neither has seen them before."""
    from grpoflow.rewards import stats
    from grpoflow.rewards._sandbox import default_pool

    items = build(args.n, args.group, args.seed)
    out = {"startup": warm_up(), "workers": default_pool().size, "ours": {}, "mv": {}, "time_ours": {}, "time_mv": {}}
    for style in ("gsm8k", "math"):
        subset = [it for it in items if it.style == style]
        out["mv"][style], times = run_math_verify(subset)
        out["time_mv"][style] = sum(times)
        out["ours"][style], out["time_ours"][style] = run_grpoflow(subset)
    out["stats"] = stats()
    if args.hostile > 0:
        out["clean"] = threaded_rate(items, args.threads)
        out["hostile"] = threaded_rate(hostile_items(items, args.hostile, args.seed), args.threads)
    return out


# ---------------------------------------------------------------------------------------------------------------
# The external agreement suite (--external)

EXTERNAL = REPO / "tests" / "rewards" / "external"
VERIFIERS = ("grpoflow", "math-verify", "mathruler")


def _gold_for_math_verify(gold: str) -> str:
    # Ground truths already in math delimiters or a box are parsed as they are; bare LaTeX is put in $…$.
    return gold if ("$" in gold or "\\boxed" in gold or "\\(" in gold or "\\[" in gold) else f"${gold}$"


def _external_verifier(name: str):
    """(completion, gold) -> bool for one verifier, or None when it is not installed here."""
    if name == "grpoflow":
        from grpoflow.rewards import verify
        from grpoflow.rewards._sandbox import default_pool

        default_pool().start()
        return lambda completion, gold: verify(completion, gold).correct
    if name == "math-verify":
        from math_verify import parse, verify

        return lambda completion, gold: bool(verify(parse(_gold_for_math_verify(gold)), parse(completion)))
    if name == "mathruler":
        try:
            from mathruler.grader import extract_boxed_content, grade_answer
        except ImportError:
            return None

        def grade(completion: str, gold: str) -> bool:
            import signal

            def _stop(signum, frame):
                raise TimeoutError

            # mathruler calls sympy with no deadline of its own: 5 s per case, as math-verify's default.
            signal.signal(signal.SIGALRM, _stop)
            signal.alarm(5)
            try:
                answer = extract_boxed_content(completion)
                return answer != "None" and bool(grade_answer(answer, gold.strip().strip("$")))
            except Exception:  # noqa: BLE001 - a grader that fails on a case scores it 'not correct'
                return False
            finally:
                signal.alarm(0)

        return grade
    raise ValueError(name)


def external_one(name: str) -> dict:
    """One verifier on the whole suite, in this (fresh) process: tallies by category and the verdicts."""
    sys.path.insert(0, str(EXTERNAL))
    import suite

    verifier = _external_verifier(name)
    if verifier is None:
        return {"installed": False}
    cases = suite.load_cases()
    tallies, verdicts = suite.score(cases, verifier)
    return {
        "installed": True,
        "tallies": {
            k: {f: getattr(t, f) for f in ("n", "tp", "tn", "fp", "fn", "seconds")} for k, t in tallies.items()
        },
        "verdicts": verdicts,
    }


def external(args) -> int:
    sys.path.insert(0, str(EXTERNAL))
    import suite

    cases = suite.load_cases()
    results, verdicts = {}, {}
    for name in VERIFIERS:
        cmd = [sys.executable, __file__, "--external-one", name]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        if not out["installed"]:
            print(f"{name}: not installed here (skipped)")
            continue
        results[name] = {k: suite.Tally(**v) for k, v in out["tallies"].items()}
        verdicts[name] = out["verdicts"]
    print(f"{len(cases)} cases, {sum(c['ambiguous'] for c in cases)} of them ambiguous (scored apart)\n")
    print(suite.table(results))
    print("\nthroughput (cases/s, whole suite incl. ambiguous; grpoflow's workers started before timing):")
    for name, t in results.items():
        n = t["ALL"].n + (t["AMBIGUOUS"].n if "AMBIGUOUS" in t else 0)
        secs = t["ALL"].seconds + (t["AMBIGUOUS"].seconds if "AMBIGUOUS" in t else 0)
        print(f"  {name:12} {n / secs:10.1f}")
    if args.show:
        for name, vs in verdicts.items():
            wrong = [(c, v) for c, v in zip(cases, vs) if v != c["label"] and not c["ambiguous"]]
            print(f"\n{name}: {len(wrong)} disagreements with the label (non-ambiguous)")
            for c, v in wrong[: args.show * 10]:
                kind = "FP" if v else "FN"
                print(f"  {kind} {c['id']} gold {c['gold'][:60]!r} completion ends {c['completion'][-70:]!r}")
    fp = results["grpoflow"]["ALL"].fp if "grpoflow" in results else 0
    return 0 if fp == 0 else 1


def score_only(args) -> int:
    """One scorer over one style's completions, once, after the same warm-up as a timed run; the scoring call alone
    runs inside ``operator.call`` so that callgrind can count its instructions (``--toggle-collect``)."""
    import operator

    items = [it for it in build(args.n, args.group, args.seed) if it.style == args.style]
    warm_up()
    if args.score_only == "grpoflow":
        from grpoflow.rewards import RewardSet

        RewardSet({"funcs": ["accuracy"]})  # the schema is read once per process, outside the count
        operator.call(run_grpoflow, items)
    else:
        operator.call(run_math_verify, items)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=3, help="examples printed per kind of disagreement")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs, each in a fresh process; best kept")
    ap.add_argument(
        "--hostile",
        type=float,
        default=0.1,
        help="fraction of pathological completions in the hostile-batch case (0: skip it)",
    )
    ap.add_argument("--threads", type=int, default=8, help="reward threads in the hostile-batch case")
    ap.add_argument(
        "--score-only",
        choices=("grpoflow", "math-verify"),
        help="score one style's completions once with one scorer, inside operator.call (for valgrind --tool=callgrind "
        "--toggle-collect=_operator_call: instructions, which do not depend on the machine's load)",
    )
    ap.add_argument("--style", choices=("gsm8k", "math"), default="gsm8k", help="with --score-only")
    ap.add_argument("--one-run", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--external", action="store_true", help="the external agreement suite (tests/rewards/external)")
    ap.add_argument("--external-one", choices=VERIFIERS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.external_one:  # the child process of one verifier on the external suite
        print(json.dumps(external_one(args.external_one)))
        return 0
    if args.external:
        return external(args)
    if args.score_only:
        return score_only(args)
    if args.one_run:  # the child process of one timed run
        print(json.dumps(one_run(args)))
        return 0

    items = build(args.n, args.group, args.seed)
    chars = sum(len(it.completion) for it in items) / len(items)
    print(
        f"{len(items)} completions ({Counter(it.style for it in items)}), mean {chars:,.0f} characters, "
        f"groups of {args.group}"
    )
    runs = []
    for rep in range(args.repeats):
        # A fresh process per run: no cache of either scorer (sympy's included) survives from an earlier run.
        cmd = [
            sys.executable,
            __file__,
            "--one-run",
            "--n",
            str(args.n),
            "--group",
            str(args.group),
            "--seed",
            str(args.seed),
            "--hostile",
            str(args.hostile),
            "--threads",
            str(args.threads),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(
            f"run {rep + 1}: {runs[-1]['startup']:.2f}s to start {runs[-1]['workers']} grpoflow math-verify "
            "worker(s) (one-off, not timed)"
        )
    ours = runs[-1]["ours"]
    mv = runs[-1]["mv"]
    ours_time = {s: min(r["time_ours"][s] for r in runs) for s in ("gsm8k", "math")}
    mv_time = {s: min(r["time_mv"][s] for r in runs) for s in ("gsm8k", "math")}

    print()
    print(f"best of {args.repeats} runs:")
    print(
        f"{'style':8} {'n':>5} {'grpoflow ms/compl':>18} {'math-verify ms/compl':>21} {'speed-up':>9} "
        f"{'grpoflow = label':>17} {'math-verify = label':>20}"
    )
    for style in ("gsm8k", "math"):
        subset = [it for it in items if it.style == style]
        n = len(subset)
        ok_ours = sum(o == it.label for o, it in zip(ours[style], subset))
        ok_mv = sum(o == it.label for o, it in zip(mv[style], subset))
        print(
            f"{style:8} {n:5d} {1000 * ours_time[style] / n:18.3f} {1000 * mv_time[style] / n:21.3f} "
            f"{mv_time[style] / ours_time[style]:8.1f}x {ok_ours:11d}/{n:<5d} {ok_mv:14d}/{n:<5d}"
        )
    print(f"verifier counters (one run): {runs[-1]['stats']}")
    if args.hostile > 0:
        clean = max(runs, key=lambda r: r["clean"]["rate"])["clean"]
        hostile = max(runs, key=lambda r: r["hostile"]["rate"])["hostile"]
        print(
            f"\nhostile batches: verify() from {args.threads} threads, {runs[-1]['workers']} math-verify workers "
            f"(best of {args.repeats} runs)"
        )
        print(f"  clean:                  {clean['rate']:8.1f} completions/s, slowest call {clean['slowest']:.2f}s")
        print(
            f"  {args.hostile:.0%} pathological:       {hostile['rate']:8.1f} completions/s, slowest call "
            f"{hostile['slowest']:.2f}s, {hostile['errors']} undecided (timeouts/errors)"
        )
        print(f"  hostile / clean:        {hostile['rate'] / clean['rate']:8.2f}")

    print("\nDisagreements between grpoflow and plain math-verify (label = the answer convention's verdict):")
    by_kind: dict[tuple, list] = defaultdict(list)
    where_mv_right_differs = 0
    for style in ("gsm8k", "math"):
        subset = [it for it in items if it.style == style]
        for it, o, m in zip(subset, ours[style], mv[style]):
            if o != m:
                right = "grpoflow" if o == it.label else "math-verify"
                where_mv_right_differs += right == "math-verify"
                by_kind[(style, it.kind, f"grpoflow={o}", f"math-verify={m}", f"right: {right}")].append(it)
    if not by_kind:
        print("  none")
    for key, its in sorted(by_kind.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(its):4d} x {' | '.join(key)}")
        for it in its[: args.show]:
            tail = it.completion.rsplit("</think>", 1)[-1] if "</think>" in it.completion else it.completion[-120:]
            print(f"         truth {it.truth!r}; completion ends {tail[-110:]!r}")
    print(f"\nCases where math-verify matches the label but grpoflow does not: {where_mv_right_differs}")
    return 0 if where_mv_right_differs == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
