"""The evaluate job end to end on a tiny model: benchmark sources, output files, errors, backends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from evalkit import eos_model, tiny_model, verl_rows, write_jsonl, write_parquet  # noqa: F401 (fixtures)

from grpoflow.errors import DataError
from grpoflow.evaluation.run import evaluate
from grpoflow.evaluation.settings import resolve_benchmark, with_defaults

REPO = Path(__file__).resolve().parents[2]
# Evaluation-wide settings as config load fills them (grpoflow.evaluation.settings.with_defaults: the schema's).
SETTINGS = with_defaults({"max_new_tokens": 6, "batch_size": 4})
GSM8K_FILE = {"path": "bench.jsonl", "prompt_key": "question", "answer_key": "answer", "format": "gsm8k", "limit": None}


def _gsm8k_rows(n: int) -> list[dict]:
    lines = (REPO / "data" / "gsm8k_sample" / "test.jsonl").read_text().splitlines()[:n]
    return [json.loads(line) for line in lines]


def _run(tmp_path, model_path, bench, data, settings=SETTINGS, prompt=None, model_name="tiny"):
    out = tmp_path / "results" / model_name / "eval"
    result = evaluate(
        model_name=model_name,
        model={"kind": "external", "path": str(model_path), "trust_remote_code": False},
        benchmark_name="bench",
        benchmark=bench,
        prompt=prompt,
        run=resolve_benchmark(settings, "bench", bench).as_json(),  # as config load resolves it
        inputs={"data": str(data)},
        metrics_path=str(out / "bench.json"),
        samples_path=str(out / "bench.samples.jsonl"),
        threads=1,
    )
    samples = [json.loads(line) for line in (out / "bench.samples.jsonl").read_text().splitlines()]
    assert json.loads((out / "bench.json").read_text()) == json.loads(json.dumps(result, default=str))
    return result, samples


def test_file_benchmark_outputs(tmp_path, tiny_model):
    rows = _gsm8k_rows(5)
    data = write_jsonl(tmp_path / "bench.jsonl", rows)
    result, samples = _run(tmp_path, tiny_model, GSM8K_FILE, data)

    assert (result["model"], result["benchmark"], result["n_problems"], result["n_completions"]) == (
        "tiny",
        "bench",
        5,
        5,
    )
    assert [s["index"] for s in samples] == list(range(5))
    assert [s["ground_truth"] for s in samples] == [
        r["answer"].rsplit("####", 1)[1].strip().replace(",", "") for r in rows
    ]
    assert samples[0]["prompt"] == f"<|im_start|>user\n{rows[0]['question']}<|im_end|>\n<|im_start|>assistant\n"
    assert set(samples[0]) == {
        "index",
        "id",
        "sample",
        "prompt",
        "ground_truth",
        "response",
        "response_tokens",
        "finish_reason",
        "truncated",
        "extracted",
        "found",
        "source",
        "correct",
        "partial",
        "format_ok",
        "reason",
    }
    # Every metric is recomputable from the per-sample records.
    m = result["metrics"]
    assert m["accuracy"] == sum(s["correct"] for s in samples) / 5
    assert m["truncation_rate"] == sum(s["truncated"] for s in samples) / 5
    assert m["no_answer_rate"] == sum(not s["found"] for s in samples) / 5
    assert m["mean_response_tokens"] == sum(s["response_tokens"] for s in samples) / 5
    assert all(s["response_tokens"] <= 6 for s in samples)

    g = result["generation"]
    assert (g["backend"], g["preset"], g["greedy"], g["temperature"], g["max_new_tokens"], g["seed"], g["device"]) == (
        "transformers",
        "greedy",
        True,
        0.0,
        6,
        0,
        "cpu",
    )
    assert result["benchmark_source"]["kind"] == "file" and len(result["benchmark_source"]["sha256"]) == 64
    assert result["model_source"] == {
        "name": "tiny",
        "kind": "external",
        "path": str(tiny_model),
        "trust_remote_code": False,
        "experiment": None,
    }
    assert {"torch", "transformers", "grpoflow"} <= set(result["provenance"]["packages"])
    assert result["timing"]["problems_per_s"] > 0


def test_stopped_completions_are_empty_not_truncated(tmp_path, eos_model):
    data = write_jsonl(tmp_path / "bench.jsonl", _gsm8k_rows(3))
    result, samples = _run(tmp_path, eos_model, GSM8K_FILE, data)
    assert [(s["response"], s["response_tokens"], s["finish_reason"], s["found"]) for s in samples] == [
        ("", 0, "stop", False)
    ] * 3
    assert result["metrics"]["no_answer_rate"] == 1.0 and result["metrics"]["truncation_rate"] == 0.0
    assert all(s["reason"].startswith("no answer") for s in samples)


def test_dataset_benchmark_keeps_the_training_prompt_unless_overridden(tmp_path, eos_model):
    data = write_parquet(
        tmp_path / "test.parquet",
        verl_rows([("What is 2 + 3?", "5"), ("What is 7 - 4?", "3")], system="Put the answer in \\boxed{}."),
    )
    bench = {"dataset": "arith", "split": "test", "limit": None}
    _, samples = _run(tmp_path, eos_model, bench, data)
    assert (
        samples[1]["prompt"]
        == "<|im_start|>system\nPut the answer in \\boxed{}.<|im_end|>\n<|im_start|>user\nWhat is 7 - 4?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert [s["ground_truth"] for s in samples] == ["5", "3"]

    override = {"system": None, "template": "Solve: {question} Answer in \\boxed{}."}
    _, samples = _run(tmp_path, eos_model, {**bench, "prompt": override, "limit": 1}, data, prompt=override)
    assert [s["prompt"] for s in samples] == [
        "<|im_start|>user\nSolve: What is 2 + 3? Answer in \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
    ]


def test_chat_template_kwargs_reach_the_template(tmp_path, eos_model):
    data = write_jsonl(tmp_path / "bench.jsonl", _gsm8k_rows(1))
    _, samples = _run(
        tmp_path, eos_model, GSM8K_FILE, data, settings={**SETTINGS, "chat_template_kwargs": {"enable_thinking": False}}
    )
    assert samples[0]["prompt"].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_sampled_mode_writes_k_records_per_problem(tmp_path, tiny_model):
    data = write_jsonl(tmp_path / "bench.jsonl", _gsm8k_rows(3))
    result, samples = _run(
        tmp_path, tiny_model, GSM8K_FILE, data, settings={**SETTINGS, "preset": "standard", "samples": 4, "seed": 1}
    )
    assert len(samples) == 12 and [s["sample"] for s in samples[:4]] == [0, 1, 2, 3]
    assert result["samples_per_problem"] == 4 and result["generation"]["temperature"] == 0.7
    assert {"pass@1", "pass@2", "pass@4", "maj@4"} <= set(result["metrics"])


def test_missing_answer_column_is_one_line(tmp_path, tiny_model):
    data = write_jsonl(tmp_path / "bench.jsonl", [{"question": "What is 1 + 1?", "solution": "2"}])
    with pytest.raises(DataError) as err:
        _run(tmp_path, tiny_model, GSM8K_FILE, data)
    assert (
        str(err.value)
        == f"evaluation.benchmarks.bench file {data}: column 'answer' not found (columns: question, solution): set evaluation.benchmarks.bench.answer_key to the right column"
    )


def test_unreadable_answer_names_the_format_key(tmp_path, tiny_model):
    data = write_jsonl(tmp_path / "bench.jsonl", [{"question": "What is 1 + 1?", "answer": "two"}])
    with pytest.raises(
        DataError,
        match=r"cannot read a gsm8k answer from column 'answer' \('two'\): set evaluation.benchmarks.bench.format",
    ):
        _run(tmp_path, tiny_model, GSM8K_FILE, data)
