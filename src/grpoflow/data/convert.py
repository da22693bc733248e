"""`convert_to_parquet`: one split of a dataset in verl's RL Parquet format.

Row layout (what verl's own GSM8K preprocessing writes, plus the fields we need to trace a sample back)::

    data_source  "grpoflow/<dataset>" (configurable)       ability  "math"
    prompt       [{"role": "system", ...}?, {"role": "user", "content": template with {question}}]
    reward_model {"style": "rule", "ground_truth": "72"}
    extra_info   {"split", "index" (row in the source file), "id", "question", "answer", "original" (JSON)}

Splits carved from train (`validation:`, `test:`) use a seeded shuffle of the source rows, so every job that
needs a split computes the same partition independently and the result is identical on every machine.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
from collections import Counter

from grpoflow.data.readers import read_records, require_columns
from grpoflow.errors import DataError
from grpoflow.io import atomic_path, atomic_write_json, read_json, sha256_file

log = logging.getLogger(__name__)

_HASHES = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


# ---- ground truth ---------------------------------------------------------------------------------------------


def gsm8k_ground_truth(answer: str) -> str | None:
    """The number after the last '####', thousands commas removed ('1,000' -> '1000')."""
    if "####" not in answer:
        return None
    tail = answer.rsplit("####", 1)[1].strip()
    return tail.replace(",", "") or None


def boxed_ground_truth(solution: str) -> str | None:
    """The final boxed answer of a worked solution (the answer convention's rule a)."""
    from grpoflow.rewards import extract_boxed_answer

    return extract_boxed_answer(solution)


_MATH_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


def _strip_math_delimiters(text: str) -> str:
    text = text.strip()
    for left, right in _MATH_DELIMITERS:
        if len(text) > len(left) + len(right) and text.startswith(left) and text.endswith(right):
            return text[len(left) : -len(right)].strip()
    return text


def answer_list_ground_truth(value) -> str | None:
    """A list of final answers (OlympiadBench's ``final_answer``: one LaTeX string in ``$...$`` per answer of the
    problem): one answer as itself, several as one comma-separated list, which the verifier compares as the
    list of all solutions. A plain string is read as a one-element list."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    parts = [_strip_math_delimiters(str(v)) for v in items if v is not None and str(v).strip()]
    return ", ".join(p for p in parts if p) or None


def _plain(value) -> str | None:
    return str(value).strip() or None


GROUND_TRUTH = {
    "gsm8k": lambda v: gsm8k_ground_truth(str(v)),
    "boxed": lambda v: boxed_ground_truth(str(v)),
    "plain": _plain,
    "answer_list": answer_list_ground_truth,
}


# ---- splits -------------------------------------------------------------------------------------------------


def _carve(indices: list[int], carve: dict, total: int) -> tuple[list[int], list[int]]:
    """Split ``indices`` into (kept, carved) with a seeded shuffle; both keep source order."""
    size = carve["size"] if "size" in carve else max(1, round(carve["fraction"] * total))
    if size >= len(indices):
        raise DataError(f"cannot carve {size} rows out of {len(indices)}: lower the size/fraction")
    shuffled = list(indices)
    random.Random(carve["seed"]).shuffle(shuffled)
    carved = set(shuffled[:size])
    return [i for i in indices if i not in carved], sorted(carved)


def split_indices(spec: dict, source_sizes: dict[str, int]) -> dict[str, tuple[str, list[int]]]:
    """For each split: (the source file it is read from, the row indices in that file)."""
    out = {s: (s, list(range(n))) for s, n in source_sizes.items()}
    if "train" not in out:  # a test-only dataset (a benchmark): nothing to carve from
        return out
    train = out["train"][1]
    for split in ("test", "val"):  # test first: the validation carve never eats held-out test rows
        carve = spec.get("validation" if split == "val" else "test")
        if carve:
            train, carved = _carve(train, carve, source_sizes["train"])
            out[split] = ("train", carved)
    out["train"] = ("train", train)
    return out


# ---- conversion ---------------------------------------------------------------------------------------------


def _prompt_messages(prompt_cfg: dict, question: str) -> list[dict]:
    messages = []
    if prompt_cfg.get("system"):
        messages.append({"role": "system", "content": prompt_cfg["system"]})
    # str.replace, not str.format: templates often contain LaTeX braces such as \boxed{}.
    messages.append({"role": "user", "content": prompt_cfg["template"].replace("{question}", question)})
    return messages


def _check_unique_ids(rows: list[dict], id_key: str, label: str) -> None:
    seen: dict = {}
    for i, row in enumerate(rows):
        key = row.get(id_key)
        if key in seen:
            raise DataError(
                f"{label}: duplicate id {key!r} in column {id_key!r} (rows {seen[key] + 1} and {i + 1}): ids must be unique; fix the data or set id_key: null"
            )
        seen[key] = i


def build_rows(
    name: str, spec: dict, split: str, source_rows: list[dict], indices: list[int], label: str
) -> tuple[list[dict], Counter]:
    pkey, rkey, fmt = spec["prompt_key"], spec["response_key"], spec["format"]
    extract = GROUND_TRUTH[fmt]
    dropped: Counter = Counter()
    rows = []
    for i in indices:
        src = source_rows[i]
        question, response = src.get(pkey), src.get(rkey)
        if not isinstance(question, str) or not question.strip():
            dropped["empty_prompt"] += 1
            continue
        if response is None or (isinstance(response, str) and not response.strip()):
            dropped["empty_response"] += 1
            continue
        truth = extract(response)
        if truth is None:
            if fmt == "gsm8k":
                raise DataError(
                    f"{label}: row {i + 1}: column {rkey!r} has no '#### <answer>' line: set datasets.{name}.format to boxed or plain if answers are written differently"
                )
            dropped["no_boxed_answer" if fmt == "boxed" else "empty_answer"] += 1
            continue
        rows.append(
            {
                "data_source": spec["data_source"],
                "prompt": _prompt_messages(spec["prompt"], question),
                "ability": spec["ability"],
                "reward_model": {"style": "rule", "ground_truth": truth},
                "extra_info": {
                    "split": split,
                    "index": i,
                    **({"id": str(src.get(spec["id_key"]))} if spec.get("id_key") else {}),
                    "question": question,
                    "answer": str(response),
                    "original": json.dumps(src, ensure_ascii=False, default=str),
                },
            }
        )
        if spec.get("max_rows") and len(rows) >= spec["max_rows"]:
            break
    return rows, dropped


def convert_split(name: str, spec: dict, manifest_path: str, split: str, parquet_path: str, summary_path: str) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    manifest = read_json(manifest_path)
    folder = os.path.dirname(manifest_path)
    sizes = {s: f["rows"] for s, f in manifest["files"].items()}
    plan = split_indices(spec, sizes)
    if split not in plan:
        raise DataError(
            f"datasets.{name}: no {split!r} split (have {', '.join(sorted(plan))}); add datasets.{name}.{'validation' if split == 'val' else 'test'}: {{fraction: 0.05}} to carve one from train"
        )
    source_split, indices = plan[split]
    entry = manifest["files"][source_split]
    raw_path = os.path.join(folder, entry["path"])
    if sha256_file(raw_path) != entry["sha256"]:
        raise DataError(f"{raw_path} changed after download_data recorded it: rerun with `snakemake -R download_data`")
    label = f"datasets.{name} {source_split} file {raw_path}"
    source_rows = read_records(raw_path, what=f"datasets.{name}")
    require_columns(
        source_rows,
        {spec["prompt_key"]: f"datasets.{name}.prompt_key", spec["response_key"]: f"datasets.{name}.response_key"},
        label,
    )
    if spec.get("id_key"):
        require_columns(source_rows, {spec["id_key"]: f"datasets.{name}.id_key"}, label)
        _check_unique_ids(source_rows, spec["id_key"], label)
    rows, dropped = build_rows(name, spec, split, source_rows, indices, label)
    if not rows:
        raise DataError(
            f"datasets.{name}: split {split!r} is empty after conversion (dropped: {dict(dropped) or 'none'}): check prompt_key/response_key/format"
        )
    for reason, count in sorted(dropped.items()):
        log.warning("%s/%s: dropped %d rows: %s", name, split, count, reason)
    with atomic_path(parquet_path) as tmp:
        pq.write_table(pa.Table.from_pylist(rows), tmp)
    summary = {
        "dataset": name,
        "split": split,
        "rows": len(rows),
        "dropped": dict(dropped),
        "source_file": entry["path"],
        "source_sha256": entry["sha256"],
        "source_rows": len(indices),
        "format": spec["format"],
        "data_source": spec["data_source"],
        "parquet_sha256": sha256_file(parquet_path),
    }
    atomic_write_json(summary_path, summary)
    log.info("%s/%s: wrote %d rows to %s", name, split, len(rows), parquet_path)
    return summary
