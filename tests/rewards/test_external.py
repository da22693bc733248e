"""The external agreement suite (tests/rewards/external/): cases from Math-Verify's, lighteval's, hendrycks/math's
and open-r1's public test suites and from issue 18, labelled by docs/answer-convention.md.

On the cases no reasonable convention labels otherwise (not ``ambiguous``): accuracy >= 0.98 and no false
positive (a false positive is a reward for a wrong answer). Every case, ambiguous ones included, must be decided
— no crash, no hang, no timeout. The agreement by category is printed (``pytest -s``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from grpoflow.rewards import verify_many

EXTERNAL = Path(__file__).resolve().parent / "external"
sys.path.insert(0, str(EXTERNAL))

import suite  # noqa: E402

CASES = suite.load_cases()


def test_the_suite_is_there_and_well_formed():
    sources = {c["source"] for c in CASES}
    assert {"huggingface/Math-Verify", "huggingface/lighteval", "hendrycks/math", "huggingface/open-r1"} <= sources
    assert len(CASES) >= 300, len(CASES)
    for c in CASES:
        assert isinstance(c["label"], bool) and isinstance(c["ambiguous"], bool), c["id"]
        assert c["completion"] is not None and c["gold"] is not None, c["id"]
        if c["upstream_expected"] is not None:
            assert c["commit"] and c["file"] and c["line"], c["id"]
            if c["label"] != c["upstream_expected"] or c["ambiguous"]:
                assert c["why"], f"{c['id']}: a label that differs from upstream (or ambiguous) says why"
    assert len({c["id"] for c in CASES}) == len(CASES), "case ids are unique"


@pytest.fixture(scope="module")
def verdicts():
    return verify_many([(c["completion"], c["gold"]) for c in CASES])


def test_agreement_on_the_external_suite(verdicts):
    by_case = dict(zip((c["id"] for c in CASES), verdicts))
    tallies, _ = suite.score(CASES, lambda completion, gold, _it=iter(verdicts): next(_it).correct)
    print("\n" + suite.table({"grpoflow": tallies}))
    undecided = [(c["id"], v.reason) for c, v in zip(CASES, verdicts) if v.error]
    assert not undecided, f"timeouts or errors: {undecided}"
    total = tallies["ALL"]
    wrong = [
        f"{'FP' if by_case[c['id']].correct else 'FN'} {c['id']}: gold {c['gold'][:60]!r}, read "
        f"{by_case[c['id']].extracted!r} ({by_case[c['id']].reason})"
        for c in total.wrong
    ]
    assert total.fp == 0, "false positives (rewards for wrong answers):\n" + "\n".join(wrong)
    assert total.accuracy >= 0.98, f"accuracy {total.accuracy:.3f} < 0.98:\n" + "\n".join(wrong)


def test_port_script_names_only_existing_cases():
    # labels.py overrides and ambiguity marks refer to case ids that the data holds (port.py checks this when it
    # re-derives the data from the upstream files; here, against the committed data).
    import labels

    ids = {c["id"] for c in CASES}
    missing = (set(labels.OVERRIDES) | set(labels.AMBIGUOUS)) - ids
    assert not missing, missing
    for case_id, (label, _why) in labels.OVERRIDES.items():
        case = next(c for c in CASES if c["id"] == case_id)
        assert case["label"] is label, case_id
    rows = [json.loads(line) for line in (EXTERNAL / "math_verify.jsonl").read_text(encoding="utf-8").splitlines()]
    assert all(r["source"] == "huggingface/Math-Verify" for r in rows)
