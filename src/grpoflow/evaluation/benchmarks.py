"""Benchmarks as lists of problems: chat messages to ask + the ground truth to verify against.

Two sources (``evaluation.benchmarks.<name>``; a ``builtin`` benchmark is a dataset benchmark once the config
is resolved, ``grpoflow.schema.benchmarks``):

- ``dataset`` + ``split``: the converted verl Parquet (``results/data/{dataset}/{split}.parquet``), whose
  ``prompt`` messages are exactly what training used. A benchmark ``prompt`` override re-renders them from
  ``extra_info.question``.
- ``path``: a JSONL/JSON/Parquet file with a question column (``prompt_key``) and an answer column
  (``answer_key``, read per ``format``). The question is rendered with the benchmark's ``prompt`` (default: the
  question alone as the user message); a column that already holds chat messages is used as is.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from grpoflow.data.convert import GROUND_TRUTH
from grpoflow.data.convert import _prompt_messages as prompt_messages
from grpoflow.data.readers import read_records, require_columns
from grpoflow.errors import DataError
from grpoflow.io import sha256_file

DEFAULT_PROMPT = {"system": None, "template": "{question}"}


@dataclass(frozen=True)
class Problem:
    index: int  # position in the benchmark (0-based, after `limit`)
    id: str | None
    messages: list[dict]
    ground_truth: str
    meta: dict = field(default_factory=dict)  # the benchmark's `breakdown` columns of the source row


def load_benchmark(name: str, spec: dict, path: str) -> list[Problem]:
    """The problems of benchmark ``name`` (config ``spec``) read from ``path``."""
    where = f"evaluation.benchmarks.{name}"
    rows = read_records(path, what=where)
    if "dataset" in spec:
        problems = _from_dataset(rows, where, path, spec.get("prompt"), spec.get("breakdown") or [])
    else:
        problems = _from_file(rows, where, path, spec, spec.get("prompt"))
    if spec["limit"]:
        problems = problems[: spec["limit"]]
    return problems


def benchmark_source(name: str, spec: dict, path: str) -> dict:
    """What the metrics JSON records about where the problems came from."""
    src = {"name": name, "path": path, "sha256": sha256_file(path), "limit": spec["limit"]}
    if "dataset" in spec:
        src.update(kind="dataset", dataset=spec["dataset"], split=spec["split"])
    else:
        src.update(
            kind="file",
            prompt_key=spec["prompt_key"],
            answer_key=spec["answer_key"],
            format=spec["format"],
        )
    return src


def _from_dataset(
    rows: list[dict], where: str, path: str, override: dict | None, breakdown: list[str]
) -> list[Problem]:
    label = f"{where} ({path})"
    require_columns(
        rows,
        {"prompt": f"{where}.dataset (a converted split)", "reward_model": f"{where}.dataset (a converted split)"},
        label,
    )
    problems = []
    for i, row in enumerate(rows):
        extra = row.get("extra_info") or {}
        truth = (row.get("reward_model") or {}).get("ground_truth")
        if truth is None:
            raise DataError(
                f"{label}: row {i + 1} has no reward_model.ground_truth: reconvert the dataset (snakemake -R convert_to_parquet)"
            )
        if override:
            question = extra.get("question")
            if not isinstance(question, str):
                raise DataError(
                    f"{label}: row {i + 1} has no extra_info.question to re-render with {where}.prompt: reconvert the dataset or drop the override"
                )
            messages = prompt_messages(override, question)
        else:
            messages = [{"role": m["role"], "content": m["content"]} for m in row["prompt"]]
        original = _original(extra) if breakdown else {}
        problems.append(
            Problem(
                index=i,
                id=_id(extra.get("id"), extra.get("index")),
                messages=messages,
                ground_truth=str(truth),
                meta={k: original.get(k) for k in breakdown},
            )
        )
    return problems


def _original(extra: dict) -> dict:
    """The source row convert_to_parquet kept (``extra_info.original``, JSON)."""
    try:
        original = json.loads(extra.get("original") or "{}")
    except (TypeError, ValueError):
        return {}
    return original if isinstance(original, dict) else {}


def _from_file(rows: list[dict], where: str, path: str, spec: dict, prompt: dict | None) -> list[Problem]:
    label = f"{where} file {path}"
    pkey, akey, fmt = spec["prompt_key"], spec["answer_key"], spec["format"]
    require_columns(rows, {pkey: f"{where}.prompt_key", akey: f"{where}.answer_key"}, label)
    extract = GROUND_TRUTH[fmt]
    prompt = prompt or DEFAULT_PROMPT
    problems = []
    for i, row in enumerate(rows):
        question, answer = row.get(pkey), row.get(akey)
        if answer is None or not str(answer).strip():
            raise DataError(f"{label}: row {i + 1} has an empty {akey!r}: every benchmark problem needs an answer")
        truth = extract(answer)
        if truth is None:
            raise DataError(
                f"{label}: row {i + 1}: cannot read a {fmt} answer from column {akey!r} ({str(answer)[:40]!r}): set {where}.format (plain, gsm8k, boxed or answer_list)"
            )
        if isinstance(question, list) and all(isinstance(m, dict) and "role" in m for m in question):
            messages = [{"role": m["role"], "content": m["content"]} for m in question]
        elif isinstance(question, str) and question.strip():
            messages = prompt_messages(prompt, question)
        else:
            raise DataError(
                f"{label}: row {i + 1}: column {pkey!r} is neither a question string nor a list of chat messages"
            )
        meta = {k: row.get(k) for k in spec.get("breakdown") or []}
        problems.append(Problem(index=i, id=_id(row.get("id"), None), messages=messages, ground_truth=truth, meta=meta))
    return problems


def _id(value, fallback) -> str | None:
    if value is not None:
        return str(value)
    return None if fallback is None else str(fallback)


def benchmark_data_path(name: str, spec: dict, inputs: dict) -> str:
    """The file a benchmark is read from: the job's `data` input (a converted split or the benchmark file),
    else the configured path."""
    path = inputs.get("data") or spec.get("path")
    if not path or not os.path.exists(path):
        raise DataError(
            f"benchmark file {path} not found: check evaluation.benchmarks.{name}.path (relative paths are from the workflow directory)"
        )
    return path
