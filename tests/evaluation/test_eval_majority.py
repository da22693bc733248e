"""maj@k votes by the verifier's equivalence (issue 31): answers the verifier finds equal vote together
(``1/2``, ``0.5``, ``\\frac{1}{2}``), answers it tells apart never do (``1,2`` and ``12``), and the number of
comparisons one problem's vote makes is bounded. Completions are scored as ``evaluate`` scores them."""

from __future__ import annotations

from grpoflow.evaluation.metrics import (
    MAX_VOTE_COMPARISONS,
    aggregate,
    majority_correct,
    score_completion,
    vote_clusters,
)
from grpoflow.generation import Completion


def scored(answers: list[str], truth: str) -> list[dict]:
    """One problem's completions, each boxing one answer, scored by the verifier with the token fields
    ``evaluate`` adds."""
    out = []
    for a in answers:
        text = f"<think>so</think>The answer is \\boxed{{{a}}}."
        s = score_completion(Completion(text=text, n_tokens=10, finish_reason="stop"), truth)
        out.append({**s, "response_tokens": 10, "truncated": False})
    return out


def test_equivalent_answers_vote_together():
    # Three ways of writing 1/2 against two votes for 3: one half wins (a string key splits it three ways).
    votes = scored(["0.5", "1/2", "3", "3", "\\frac{1}{2}"], "1/2")
    assert [s["correct"] for s in votes] == [True, True, False, False, True]
    assert vote_clusters([s["extracted"] for s in votes]) == [0, 0, 1, 1, 0]
    assert majority_correct(votes)
    assert aggregate([votes])["metrics"]["maj@5"] == 1.0


def test_answers_the_verifier_tells_apart_never_share_a_vote():
    # "1,2" (a list) is not 12: stripping commas made it a third vote for 12, won by its first, wrong, member.
    votes = scored(["1,2", "12", "12"], "12")
    assert [s["correct"] for s in votes] == [False, True, True]
    assert vote_clusters([s["extracted"] for s in votes]) == [0, 1, 1]
    assert majority_correct(votes)
    # A thousands separator is still one number: 1,000 and 1000 vote together against 999 twice.
    assert majority_correct(scored(["999", "1,000", "1000", "999", "1000"], "1000"))


def test_a_tie_goes_to_the_answer_seen_first():
    assert not majority_correct(scored(["7", "0.5", "1/2", "7.0"], "1/2"))
    assert majority_correct(scored(["0.5", "7", "7.0", "1/2"], "1/2"))


def test_the_comparisons_of_one_vote_are_bounded():
    # Past the budget an answer no comparison placed votes alone, however many distinct answers came before it.
    assert vote_clusters(["0", "1", "0.0"]) == [0, 1, 0]
    many = [str(i) for i in range(MAX_VOTE_COMPARISONS + 5)] + ["0.0"]
    assert vote_clusters(many)[-1] == len(many) - 1
