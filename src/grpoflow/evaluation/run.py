"""The `evaluate` job: one model on one benchmark → results/{model}/eval/{benchmark}.json + .samples.jsonl.

Metrics JSON (one object)::

    model, benchmark, n_problems, samples_per_problem, n_completions,
    metrics:          accuracy, accuracy_stderr, format_accuracy, partial_accuracy, no_answer_rate,
                      truncation_rate, mean_response_tokens, median_response_tokens (+ pass@k, maj@k if k > 1)
    answer_sources:   {extraction rule: completions} (boxed, answer tag, '####', phrase, last number, none)
    model_source:     {name, kind, path, trust_remote_code, experiment}
    benchmark_source: {name, kind, path, sha256, limit, dataset/split or prompt_key/answer_key/format}
    prompt:           the benchmark's prompt override, or the dataset's prompt its Parquet was rendered with
    answer_format:    what format accuracy checked (grpoflow.rewards.format_ok arguments)
    generation:       {backend, preset, temperature, top_p, top_k, samples, greedy, max_new_tokens, seed,
                       batch_size, chat_template_kwargs, stop_token_ids, device, dtype, ...}
    timing:           {load_and_generate_s, generate_s, problems_per_s, completions_per_s, tokens_per_s}
    provenance:       grpoflow.provenance (config hash of the evaluation inputs, package versions, git commit)

Samples JSONL, one line per completion, in benchmark order::

    index, id, sample, prompt (the rendered chat text), ground_truth, response, response_tokens,
    finish_reason, truncated, extracted, found, source, correct, partial, format_ok, reason
    (+ meta: the benchmark's `breakdown` columns, when it has one)

The report pairs models problem by problem from these files (``grpoflow.report.statistics``), so every
backend must write them whole: one record per completion, every problem with the same number of samples.

Generation backends
-------------------
grpoflow.evaluation.backends' table maps ``evaluation.backend`` to a module imported only when chosen. A backend
module provides::

    generate(source: ModelSource, tokenizer, prompt_ids: list[list[int]], gen: Generation,
             stop_ids: list[int], *, threads: int | None = None, vllm_cfg: dict | None = None, **_)
        -> (completions: list[list[Completion]], info: dict)

- ``prompt_ids``: the prompts as token ids, rendered and tokenized here with the model's chat template (the
  backend never renders prompts, so every backend sees the same tokens);
- ``gen``: the resolved decoding (``Generation``: greedy when ``temperature == 0``, ``samples`` completions per
  prompt, ``max_new_tokens``, ``seed``, ``top_p``/``top_k`` with -1 = off);
- return ``completions[i]``: exactly ``gen.samples`` ``Completion``s for prompt i, in prompt order, made with
  ``grpoflow.generation.completion_from_ids`` (cut at the first stop id, decoded with
  ``skip_special_tokens``, ``finish_reason`` "length" when ``max_new_tokens`` was reached);
- ``info``: ``generate_s`` (seconds spent generating; popped for ``timing``) plus anything worth recording
  under ``generation`` (device, dtype, engine settings, versions).

Scoring, metrics, both output files and their format are this module's, whatever the backend.
"""

from __future__ import annotations

import importlib
import logging
import time
from dataclasses import dataclass

from grpoflow.errors import DataError
from grpoflow.evaluation.backends import evaluation_backend
from grpoflow.evaluation.benchmarks import Problem, benchmark_data_path, benchmark_source, load_benchmark
from grpoflow.evaluation.metrics import aggregate, score_completion
from grpoflow.evaluation.settings import BenchmarkRun, Generation
from grpoflow.generation import (
    Completion,
    ModelSource,
    encode_prompts,
    load_tokenizer,
    render_prompts,
    resolve_model,
    stop_token_ids,
)
from grpoflow.io import atomic_write_json, atomic_write_jsonl
from grpoflow.provenance import provenance

log = logging.getLogger(__name__)

# Above this fraction of completions cut at max_new_tokens, the job (and the report) warns.
TRUNCATION_WARNING = 0.05


def evaluate(
    model_name: str,
    model: dict,
    benchmark_name: str,
    benchmark: dict,
    prompt: dict | None,
    run: dict,
    inputs: dict,
    metrics_path: str,
    samples_path: str,
    threads: int | None = None,
) -> dict:
    """Evaluate ``model`` (an entry of the resolved config's ``models``) on ``benchmark``; write both files.
    ``run``: the benchmark's plan as config load resolved it (``WorkflowConfig.benchmark_runs``, ``as_json``):
    decoded here, never resolved again."""
    run = BenchmarkRun.from_json(run)
    source = resolve_model(model_name, model, inputs)
    data_path = benchmark_data_path(benchmark_name, benchmark, inputs)
    problems = load_benchmark(benchmark_name, benchmark, data_path)
    if not problems:
        raise DataError(f"benchmark {benchmark_name} ({data_path}) has no problems")
    log.info(
        "evaluating %s (%s) on %s: %d problems, %s, backend %s",
        model_name,
        source.path,
        benchmark_name,
        len(problems),
        _describe(run.generation),
        run.backend,
    )
    generated = _generate(source, problems, run, threads)
    records, summary = _score(problems, generated, run.answer_format)
    result = {
        "model": model_name,
        "benchmark": benchmark_name,
        **summary,
        "model_source": source.as_dict(),
        "benchmark_source": benchmark_source(benchmark_name, benchmark, data_path),
        "prompt": prompt,
        "answer_format": run.answer_format,
        "generation": {
            "backend": run.backend,
            **run.generation.as_dict(),
            "chat_template_kwargs": run.chat_template_kwargs,
            "stop_token_ids": generated.stops,
            **generated.info,
        },
        "timing": _timing(generated, len(problems), records),
        "provenance": provenance({"model": model, "benchmark": benchmark, "prompt": prompt, "settings": run.settings}),
    }
    atomic_write_jsonl(samples_path, records)
    atomic_write_json(metrics_path, result)
    _log_result(model_name, benchmark_name, result, run.generation)
    return result


@dataclass
class _Generated:
    """What generation produced: the rendered prompts, each prompt's completions, the stop ids, the backend's
    info (without ``generate_s``) and the seconds spent loading + generating and generating alone."""

    texts: list[str]
    completions: list[list[Completion]]
    stops: list[int]
    info: dict
    total_s: float
    generate_s: float


def _generate(source: ModelSource, problems: list[Problem], run: BenchmarkRun, threads: int | None) -> _Generated:
    """Render and tokenize the prompts with the model's chat template, then generate with the run's backend."""
    t0 = time.perf_counter()
    tokenizer = load_tokenizer(source)
    texts = render_prompts(tokenizer, [p.messages for p in problems], run.chat_template_kwargs)
    prompt_ids = encode_prompts(tokenizer, texts)
    stops = stop_token_ids(tokenizer, source)
    backend = importlib.import_module(evaluation_backend(run.backend).module)
    completions, info = backend.generate(
        source, tokenizer, prompt_ids, run.generation, stops, threads=threads, vllm_cfg=run.vllm
    )
    total_s = time.perf_counter() - t0
    gen_s = info.pop("generate_s")
    return _Generated(texts, completions, stops, info, total_s, gen_s)


def _score(problems: list[Problem], generated: _Generated, answer_format: dict) -> tuple[list[dict], dict]:
    """Score every completion: (the samples file's records, in benchmark order; the aggregated metrics)."""
    scored, records = [], []
    for problem, text, outs in zip(problems, generated.texts, generated.completions):
        per = []
        for k, c in enumerate(outs):
            s = {
                **score_completion(c, problem.ground_truth, answer_format),
                "response_tokens": c.n_tokens,
                "truncated": c.truncated,
            }
            per.append(s)
            records.append(_record(problem, k, text, c, s))
        scored.append(per)
    return records, aggregate(scored)


def _record(problem: Problem, sample: int, prompt: str, c: Completion, s: dict) -> dict:
    """One line of the samples file (module docstring)."""
    return {
        "index": problem.index,
        "id": problem.id,
        "sample": sample,
        "prompt": prompt,
        "ground_truth": problem.ground_truth,
        "response": c.text,
        "response_tokens": c.n_tokens,
        "finish_reason": c.finish_reason,
        "truncated": c.truncated,
        "extracted": s["extracted"],
        "found": s["found"],
        "source": s["source"],
        "correct": s["correct"],
        "partial": s["partial"],
        "format_ok": s["format_ok"],
        "reason": s["reason"],
        **({"meta": problem.meta} if problem.meta else {}),
    }


def _timing(generated: _Generated, n_problems: int, records: list[dict]) -> dict:
    gen_s = generated.generate_s
    n_tokens = sum(r["response_tokens"] for r in records)
    return {
        "load_and_generate_s": round(generated.total_s, 3),
        "generate_s": round(gen_s, 3),
        "problems_per_s": round(n_problems / gen_s, 3) if gen_s > 0 else None,
        "completions_per_s": round(len(records) / gen_s, 3) if gen_s > 0 else None,
        "tokens_per_s": round(n_tokens / gen_s, 1) if gen_s > 0 else None,
    }


def _log_result(model_name: str, benchmark_name: str, result: dict, gen: Generation) -> None:
    m = result["metrics"]
    if m["truncation_rate"] > TRUNCATION_WARNING:
        log.warning(
            "%s on %s: %.1f%% of completions hit max_new_tokens (%d): accuracy measures the token limit too; raise max_new_tokens",
            model_name,
            benchmark_name,
            100 * m["truncation_rate"],
            gen.max_new_tokens,
        )
    log.info(
        "%s on %s: accuracy %.4f ± %.4f, format %.4f, partial %.4f, no answer %.4f, truncated %.4f, mean tokens %.1f (%.2f problems/s)",
        model_name,
        benchmark_name,
        m["accuracy"],
        m["accuracy_stderr"],
        m["format_accuracy"],
        m["partial_accuracy"],
        m["no_answer_rate"],
        m["truncation_rate"],
        m["mean_response_tokens"],
        result["timing"]["problems_per_s"] or 0.0,
    )


def _describe(gen: Generation) -> str:
    if gen.greedy:
        return f"greedy, max_new_tokens {gen.max_new_tokens}"
    return f"{gen.preset} sampling (T {gen.temperature}, top_p {gen.top_p}, top_k {gen.top_k}), k={gen.samples}, max_new_tokens {gen.max_new_tokens}"
