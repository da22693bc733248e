"""The built-in benchmarks' defaults (issue 31): AIME and AMC get the token limit the published evaluations use
(open-r1 runs lighteval at max_new_tokens 32768), greedy benchmarks keep the global default, and OlympiadBench's
prompt asks for every answer of a multi-answer problem, in the form its grader reads as the list of all of them."""

from __future__ import annotations

from grpoflow.config import resolve_config
from grpoflow.data.convert import answer_list_ground_truth
from grpoflow.rewards import verify


def config(**evaluation):
    return resolve_config(
        {
            "evaluation": {
                "models": {"m": {"path": "Qwen/Qwen3-0.6B"}},
                "benchmarks": {
                    "aime24": {"builtin": "aime2024"},
                    "aime25": {"builtin": "aime2025"},
                    "amc23": {"builtin": "amc23"},
                    "aime24_short": {"builtin": "aime2024", "max_new_tokens": 4096},
                    "math500": {"builtin": "math500"},
                    "olympiad": {"builtin": "olympiadbench"},
                },
                **evaluation,
            }
        }
    )


def max_new_tokens(cfg, bench: str) -> int:
    """As config load resolved it for the evaluate job (WorkflowConfig.benchmark_runs)."""
    return cfg.benchmark_runs[bench].generation.max_new_tokens


def test_competition_benchmarks_get_the_published_token_limit():
    cfg = config()
    assert [max_new_tokens(cfg, b) for b in ("aime24", "aime25", "amc23")] == [32768] * 3
    assert max_new_tokens(cfg, "aime24_short") == 4096  # a limit written on the benchmark wins
    assert max_new_tokens(cfg, "math500") == 1024  # greedy benchmarks: the preset's default
    # A limit set for the whole evaluation is the user's choice: the built-in one does not override it.
    assert max_new_tokens(config(max_new_tokens=8), "aime24") == 8


def test_olympiadbench_asks_for_every_answer_in_the_form_its_grader_reads():
    cfg = config()
    prompt = cfg.datasets["olympiadbench"]["prompt"]
    asked = prompt["template"].replace("{question}", "Find all real x with x^2 - 8x + 15 = 0.")
    assert "put all of them in that \\boxed{}, separated by commas" in asked
    truth = answer_list_ground_truth(["$3$", "$5$"])  # OlympiadBench's final_answer of a two-answer problem
    assert verify("So the final answer is \\boxed{3, 5}.", truth).correct  # as the prompt asks: graded right
    assert not verify("So the final answer is \\boxed{3}.", truth).correct  # one of them: wrong
    # The other built-ins keep the one-answer prompt of DeepSeek-R1's and open-r1's evaluations.
    assert "more than one answer" not in cfg.datasets["math500"]["prompt"]["template"]
