"""Re-derive the external agreement suite (tests/rewards/external/*.jsonl) from the upstream test files.

    .venv/bin/python tests/rewards/external/port.py --mirror DIR [--check]

``DIR`` holds a git clone of each source repository as ``DIR/<owner>+<name>/repo`` (or ``DIR/<owner>+<name>``);
``--only OWNER/NAME ...`` derives those sources alone.
Each upstream assertion becomes one case — the completion (or answer) and ground truth exactly as upstream
passes them, its file, line and commit, the category (the upstream test's name) and upstream's expected verdict
— then ``labels.py`` gives the label by grpoflow's answer convention where it differs (with the reason) and marks
cases a reasonable convention could label either way as ambiguous. Only the cases are kept, no upstream code.
``--check`` compares with the committed files instead of writing them (exit 1 on a difference).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from labels import AMBIGUOUS, LABELS, OVERRIDES  # noqa: E402

SOURCES = {
    "huggingface/Math-Verify": [
        "tests/test_all.py",
        "tests/test_boxed.py",
        "tests/test_numina_cases.py",
        "tests/test_open_thoughts.py",
        "tests/test_yujianll.py",
        "tests/test_strict.py",
        "tests/test_string_extraction.py",
    ],
    "huggingface/lighteval": ["tests/unit/metrics/test_extractive_match.py"],
    "hendrycks/math": ["modeling/math_equivalence_test.py"],
    "huggingface/open-r1": ["tests/test_rewards.py"],
    "inclusionAI/AReaL": ["tests/test_math_verify_reward.py"],
    "NovaSky-AI/SkyRL": ["skyrl-gym/tests/test_aime.py", "skyrl-gym/tests/test_gsm8k.py"],
    "NVIDIA/NeMo-Skills": ["tests/test_math_equal.py"],
    # Issue 41 (labels and relations): the equation tests proposed for Qwen2.5-Math's grader (pull request 53, not
    # merged: its head commit is pinned below) and rllm's math reward tests.
    "QwenLM/Qwen2.5-Math": ["evaluation/grader.py"],
    "rllm-org/rllm": ["tests/rewards/test_math_reward.py"],
}
# Sources read at a given commit instead of the clone's HEAD.
PINNED = {"QwenLM/Qwen2.5-Math": "29a82a8802e058c236fe7903ae6d8362df078aa7"}
OUT = {
    "huggingface/Math-Verify": "math_verify.jsonl",
    "huggingface/lighteval": "lighteval.jsonl",
    "hendrycks/math": "hendrycks_math.jsonl",
    "huggingface/open-r1": "open_r1.jsonl",
    "inclusionAI/AReaL": "areal.jsonl",
    "NovaSky-AI/SkyRL": "skyrl.jsonl",
    "NVIDIA/NeMo-Skills": "nemo_skills.jsonl",
    "QwenLM/Qwen2.5-Math": "qwen25_math.jsonl",
    "rllm-org/rllm": "rllm.jsonl",
}


def _git(repo_dir: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo_dir), *args], capture_output=True, text=True, check=True).stdout


def _repo_dir(mirror: Path, repo: str) -> Path:
    d = mirror / repo.replace("/", "+")
    return d / "repo" if (d / "repo").exists() else d


def _literal(node):
    """A literal (strings, numbers, lists, f-strings of constants evaluated), or raise ValueError."""
    if isinstance(node, ast.JoinedStr):  # f"{math.sqrt(17):.15f}" (test_float_precision): evaluate the constant
        return eval(compile(ast.Expression(node), "<case>", "eval"), {"math": __import__("math")})  # noqa: S307
    if isinstance(node, ast.Tuple):
        return tuple(_literal(e) for e in node.elts)
    if isinstance(node, ast.BinOp) and all(isinstance(x, ast.Constant) for x in (node.left, node.right)):
        return eval(compile(ast.Expression(node), "<case>", "eval"), {"__builtins__": {}})  # noqa: S307 (5 / 2)
    if isinstance(node, (ast.Call, ast.Attribute)):  # StringExtractionConfig(...), Language.FRENCH: as written
        return ast.unparse(node)
    return ast.literal_eval(node)


def _parametrized(text: str):
    """(test name, argument names, line, values) for each row of every ``pytest.mark.parametrize``."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        for d in node.decorator_list:
            if not (isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "parametrize"):
                continue
            names = [n.strip() for n in ast.literal_eval(d.args[0]).split(",")]
            for row in d.args[1].elts:
                values = [_literal(row)] if len(names) == 1 else [_literal(v) for v in row.elts]
                yield node.name, names, row.lineno, dict(zip(names, values)), ast.get_source_segment(text, node)


def _cases_parametrized(repo: str, path: str, text: str):
    for test, names, line, row, body in _parametrized(text):
        if names == ["output_pair"]:  # NeMo-Skills: math_equal(a, b) is expected both ways round
            a, b = row["output_pair"]
            if a is None or b is None:
                continue  # math_equal(0, None): an API test, not a grading case
            expected = test == "test_correct_examples"
            for gold, answer, way in ((a, b, "(a, b)"), (b, a, "(b, a)")):
                yield dict(
                    category="nemo_math_equal",
                    # math_equal compares two answers: the answer is given as the completion's box.
                    completion="\\boxed{" + str(answer) + "}",
                    gold=str(gold),
                    upstream=expected,
                    upstream_assertion=f"math_equal{way} is {expected} for {row['output_pair']!r}",
                    line=line,
                    sub=way,
                )
            continue
        if "output" in row and "ground_truth" in row:  # SkyRL: env.step(output)["reward"] == expected (1/0/-1)
            env = re.search(r'skyrl_gym\.make\(\s*"(\w+)"', body)
            yield dict(
                category=f"skyrl_{env.group(1) if env else test}",
                completion=row["output"],
                gold=row["ground_truth"],
                upstream=row["expected"] > 0,
                upstream_assertion=f"env.step(output)['reward'] == {row['expected']!r}",
                line=line,
            )
            continue
        extra = {k: v for k, v in row.items() if k not in ("gold", "pred", "expected", "result")}
        if "expected" in row and isinstance(row["expected"], list):  # test_string_extraction: parse(pred) == [...]
            gold = row["expected"][-1] if row["expected"] else "A"
            yield dict(
                category=test,
                completion=row["pred"],
                gold=gold,
                upstream=bool(row["expected"]),
                upstream_assertion=f"parse(pred, [{row['config']}]) == {row['expected']!r}",
                line=line,
            )
            continue
        expected = row.get("expected", row.get("result"))
        m = re.search(r"match_types=\[([^\]]*)\]", body)
        how = f"compare_strings(gold, pred, match_types=[{m.group(1)}]" if m else "verify(parse(gold), parse(pred)"
        how += "".join(f", {k}={v!r}" for k, v in extra.items()) + f") == {expected!r}"
        yield dict(
            category=test,
            completion=row["pred"],
            gold=row["gold"],
            upstream=bool(expected),
            upstream_assertion=how,
            line=line,
        )


_HENDRYCKS_RE = re.compile(
    r"def (test_\w+)\(self\):\s*test_in = (\".*?\")\s*test_out = (\".*?\")\s*self\.assert(True|False)\(is_equiv", re.S
)


def _cases_hendrycks(repo: str, path: str, text: str):
    for m in _HENDRYCKS_RE.finditer(text):
        gold, answer = ast.literal_eval(m.group(2)), ast.literal_eval(m.group(3))
        yield dict(
            category="is_equiv",
            # is_equiv compares two answer strings: the answer is given as the completion's box.
            completion="\\boxed{" + answer + "}",
            gold=gold,
            upstream=m.group(4) == "True",
            upstream_assertion=f"is_equiv({gold!r}, {answer!r}) is {m.group(4)}  [{m.group(1)}]",
            line=text.count("\n", 0, m.start()) + 1,
        )


# open-r1's accuracy assertions: (completion content, solution, expected reward) inside unittest methods.
_OPEN_R1_RE = re.compile(
    r"def (test_accuracy_reward\w*)\(self\):.*?\"content\": (r\".*?\")\}\]\]\s*solution = \[(r?\".*?\")\]"
    r".*?self\.assertEqual\(rewards\[0\], ([01])\.0\)",
    re.S,
)


def _cases_open_r1(repo: str, path: str, text: str):
    for m in _OPEN_R1_RE.finditer(text):
        content, gold = ast.literal_eval(m.group(2)), ast.literal_eval(m.group(3))
        yield dict(
            category="accuracy_reward",
            completion=content,
            gold=gold,
            upstream=m.group(4) == "1",
            upstream_assertion=f"accuracy_reward([[{{'content': {content!r}}}]], [{gold!r}]) == [{m.group(4)}.0]",
            line=text.count("\n", 0, m.start()) + 1,
        )


def _cases_areal(repo: str, path: str, text: str):
    """AReaL's reward tests: ``reward = <fn>(completions=..., answer=...)`` then ``assert reward == X`` (or an
    assertion that only checks the reward is 0 or 1: no upstream verdict)."""
    tree = ast.parse(text)
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for fn in cls.body:
            if not isinstance(fn, ast.FunctionDef):
                continue
            call = next(
                (
                    n
                    for n in ast.walk(fn)
                    if isinstance(n, ast.Call) and {"completions", "answer"} <= {k.arg for k in n.keywords}
                ),
                None,
            )
            if call is None:
                continue
            kw = {k.arg: k.value for k in call.keywords}
            try:
                completion, gold = ast.literal_eval(kw["completions"]), ast.literal_eval(kw["answer"])
            except ValueError:
                continue
            if not isinstance(completion, str) or not isinstance(gold, str):
                continue  # answer=None: an API-robustness test, not a grading case
            expected = None
            for n in ast.walk(fn):
                if (
                    isinstance(n, ast.Compare)
                    and isinstance(n.left, ast.Name)
                    and n.left.id == "reward"
                    and isinstance(n.ops[0], ast.Eq)
                    and isinstance(n.comparators[0], ast.Constant)
                ):
                    expected = bool(n.comparators[0].value)
            fname = ast.unparse(call.func)
            yield dict(
                category=f"areal_{fname}",
                completion=completion,
                gold=gold,
                upstream=expected,
                upstream_assertion=f"{fname}(completions={completion!r}, answer={gold!r}) == {expected}  [{fn.name}]"
                if expected is not None
                else f"{fname}(...) in [0.0, 1.0] (no verdict asserted)  [{fn.name}]",
                line=call.lineno,
            )


# Qwen2.5-Math's grader (PR 53): unittest assertions on its grading functions, (prediction, reference, ...).
_QWEN_RE = re.compile(
    r"self\.assert(True|False)\((math_equal|compare_equations|check_symbolic_equality|check_math_equality)\("
    r"(\"(?:[^\"\\]|\\.)*\"), (\"(?:[^\"\\]|\\.)*\")"
)


def _cases_qwen(repo: str, path: str, text: str):
    for m in _QWEN_RE.finditer(text):
        prediction, reference = ast.literal_eval(m.group(3)), ast.literal_eval(m.group(4))
        yield dict(
            category=f"qwen_{m.group(2)}",
            # The grading function compares two answers: the prediction is given as the completion's box.
            completion="\\boxed{" + prediction + "}",
            gold=reference,
            upstream=m.group(1) == "True",
            upstream_assertion=f"{m.group(2)}({prediction!r}, {reference!r}, ...) is {m.group(1)}",
            line=text.count("\n", 0, m.start()) + 1,
        )


def _rllm_param_rows(fn: ast.FunctionDef):
    """(model_response, ground_truth, expected is_correct, line) of each pytest.param row, when given."""
    for d in fn.decorator_list:
        if not (isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "parametrize"):
            continue
        names = [n.strip() for n in ast.literal_eval(d.args[0]).split(",")]
        for row in d.args[1].elts:
            args = row.args if isinstance(row, ast.Call) else row.elts
            values = dict(zip(names, args))
            try:
                response, gold = ast.literal_eval(values["model_response"]), ast.literal_eval(values["ground_truth"])
            except (KeyError, ValueError):
                continue
            expected = values.get("expected_correct")
            yield response, gold, (ast.literal_eval(expected) if expected is not None else False), row.lineno


def _cases_rllm(repo: str, path: str, text: str):
    """rllm's math reward tests: ``model_response = "…"``, ``"ground_truth": "…"`` in ``task_info`` and an
    assertion on ``output.is_correct``; tests with several responses, skipped ones, and a ground truth that is
    not one non-empty string (a list, None, "" — the reward's input handling, not grading) are left out."""
    for fn in (n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef)):
        rows = list(_rllm_param_rows(fn))
        if not rows:
            responses = [
                n
                for n in ast.walk(fn)
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "model_response"
            ]
            golds = [
                v
                for n in ast.walk(fn)
                if isinstance(n, ast.Dict)
                for k, v in zip(n.keys, n.values)
                if isinstance(k, ast.Constant) and k.value == "ground_truth"
            ]
            body = ast.unparse(fn)
            verdicts = [v for v in ("output.is_correct is True", "not output.is_correct") if f"assert {v}" in body]
            if len(responses) != 1 or len(golds) != 1 or len(verdicts) != 1 or "skip" in ast.unparse(fn.decorator_list):
                continue  # several responses, no or mixed verdicts, or a skipped test: no grading case
            try:
                response, gold = ast.literal_eval(responses[0].value), ast.literal_eval(golds[0])
            except ValueError:
                continue
            rows = [(response, gold, verdicts[0] == "output.is_correct is True", responses[0].lineno)]
        for response, gold, expected, line in rows:
            if not isinstance(gold, str) or not gold.strip() or gold.strip() in ("\\boxed{}", "\\boxed"):
                continue
            yield dict(
                category="rllm_math_reward",
                completion=response,
                gold=gold,
                upstream=bool(expected),
                upstream_assertion=f"RewardMathFn(...)(task_info, model_response).is_correct is {bool(expected)}"
                f"  [{fn.name}]",
                line=line,
            )


def derive(mirror: Path, only: set[str] | None = None) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    seen: dict[tuple[str, str], str] = {}
    for repo, files in SOURCES.items():
        if only and repo not in only:
            continue
        repo_dir = _repo_dir(mirror, repo)
        commit = PINNED.get(repo) or _git(repo_dir, "rev-parse", "HEAD").strip()
        rows = []
        for path in files:
            text = _git(repo_dir, "show", f"{commit}:{path}")
            if repo == "hendrycks/math":
                found = _cases_hendrycks(repo, path, text)
            elif repo == "huggingface/open-r1":
                found = _cases_open_r1(repo, path, text)
            elif repo == "inclusionAI/AReaL":
                found = _cases_areal(repo, path, text)
            elif repo == "QwenLM/Qwen2.5-Math":
                found = _cases_qwen(repo, path, text)
            elif repo == "rllm-org/rllm":
                found = _cases_rllm(repo, path, text)
            else:
                found = _cases_parametrized(repo, path, text)
            for c in found:
                key = (c["completion"], c["gold"])
                case_id = f"{repo.split('/')[1]}:{path}:{c['line']}" + (f"{c['sub']}" if c.get("sub") else "")
                if key in seen:  # lighteval copies many of Math-Verify's cases: each pair is counted once
                    continue
                seen[key] = case_id
                label, why = c["upstream"], None
                if case_id in LABELS:  # no verdict asserted upstream: labelled here
                    label, why = LABELS[case_id], "no upstream verdict; labelled by the convention"
                if case_id in OVERRIDES:
                    label, why = OVERRIDES[case_id]
                row = {
                    "id": case_id,
                    "category": c["category"],
                    "completion": c["completion"],
                    "gold": c["gold"],
                    "label": label,
                    "ambiguous": case_id in AMBIGUOUS,
                    "why": why if why is not None else AMBIGUOUS.get(case_id),
                    "upstream_expected": c["upstream"],
                    "upstream_assertion": c["upstream_assertion"],
                    "source": repo,
                    "commit": commit,
                    "file": path,
                    "line": c["line"],
                }
                if row["label"] is None:
                    raise SystemExit(f"{case_id}: no upstream verdict and no label in labels.LABELS")
                rows.append(row)
        out[OUT[repo]] = rows
    unknown = (set(OVERRIDES) | set(AMBIGUOUS) | set(LABELS)) - {r["id"] for rows in out.values() for r in rows}
    if only:  # a partial run checks only the ids of the sources it read
        unknown = {u for u in unknown if any(u.startswith(repo.split("/")[1] + ":") for repo in only)}
    if unknown:
        raise SystemExit(f"labels.py names cases that no longer exist upstream: {sorted(unknown)}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirror", type=Path, required=True, help="directory of <owner>+<name>[/repo] git clones")
    ap.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    ap.add_argument("--only", nargs="*", metavar="OWNER/NAME", help="derive these sources only")
    args = ap.parse_args(argv)
    status = 0
    for name, rows in derive(args.mirror, set(args.only) if args.only else None).items():
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        path = HERE / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                print(f"{path.name}: differs from what the upstream files give")
                status = 1
        else:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
        print(f"{name}: {len(rows)} cases")
    return status


if __name__ == "__main__":
    sys.exit(main())
