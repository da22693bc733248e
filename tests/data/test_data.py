"""Data: every source (synthetic, shipped sample, local files, Hub cache offline, no network), conversion
to verl's RL format, deterministic splits, and one-line errors for bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from grpoflow_testing import REPO

from grpoflow.config import resolve_config
from grpoflow.data.convert import convert_split, gsm8k_ground_truth
from grpoflow.data.download import download_dataset
from grpoflow.data.synthetic import generate_arithmetic
from grpoflow.errors import ConfigError, DataError
from grpoflow.io import read_json

GSM8K_SAMPLE = REPO / "data" / "gsm8k_sample"


def dataset_spec(**overrides) -> dict:
    """A fully resolved dataset spec (defaults filled by the real config loader)."""
    raw = {
        "source": "local",
        "local": {"train": str(GSM8K_SAMPLE / "train.jsonl"), "test": str(GSM8K_SAMPLE / "test.jsonl")},
        **overrides,
    }
    return resolve_config({"datasets": {"ds": raw}}).datasets["ds"]


def prepare(tmp_path: Path, spec: dict, split: str = "train", name: str = "ds"):
    manifest = tmp_path / "raw" / "manifest.json"
    download_dataset(name, spec, str(manifest))
    out = tmp_path / f"{split}.parquet"
    summary = convert_split(name, spec, str(manifest), split, str(out), str(tmp_path / f"{split}.summary.json"))
    return pq.read_table(out).to_pylist(), summary


# ---- ground truth ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer,truth",
    [
        ("She makes 9 * 2 = $18\n#### 18", "18"),
        ("... \n#### 1,000", "1000"),
        ("#### -5", "-5"),
        ("#### 3.75", "3.75"),
        ("first #### 1 then #### 2", "2"),
        ("no marker here", None),
        ("####   ", None),
    ],
)
def test_gsm8k_ground_truth(answer, truth):
    assert gsm8k_ground_truth(answer) == truth


# ---- synthetic ------------------------------------------------------------------------------------------------


SYNTH = {
    "task": "arithmetic",
    "train_size": 300,
    "test_size": 50,
    "min_operand": 0,
    "max_operand": 30,
    "operations": ["+", "-"],
    "seed": 7,
}


def test_synthetic_is_deterministic_and_held_out():
    a, b = generate_arithmetic(SYNTH), generate_arithmetic(SYNTH)
    assert a == b
    assert len(a["train"]) == 300 and len(a["test"]) == 50
    key = lambda q: tuple(sorted(q["question"].removeprefix("What is ").rstrip("?").split(" ")))  # noqa: E731
    assert not {key(r) for r in a["train"]} & {key(r) for r in a["test"]}, (
        "a problem (in either operand order) is never in both splits"
    )
    for row in a["train"]:
        assert gsm8k_ground_truth(row["answer"]) is not None and int(gsm8k_ground_truth(row["answer"])) >= 0
    assert generate_arithmetic({**SYNTH, "seed": 8}) != a


def test_synthetic_too_large_is_a_config_error():
    with pytest.raises(ConfigError, match="exceeds the .* distinct problems"):
        generate_arithmetic({**SYNTH, "max_operand": 3, "train_size": 100}, where="datasets.x.synthetic")


# ---- conversion -----------------------------------------------------------------------------------------------


def test_shipped_gsm8k_sample_converts_to_verl_rows(tmp_path):
    spec = dataset_spec(
        prompt={"system": "You are a careful math tutor.", "template": "{question}\nPut the final answer in \\boxed{}."}
    )
    rows, summary = prepare(tmp_path, spec, "test")
    assert summary["rows"] == len(rows) == 128 and summary["dropped"] == {}
    row = rows[0]
    assert row["data_source"] == "grpoflow/ds" and row["ability"] == "math"
    assert row["prompt"][0] == {"role": "system", "content": "You are a careful math tutor."}
    assert row["prompt"][1]["role"] == "user" and row["prompt"][1]["content"].endswith("\\boxed{}.")
    first = json.loads((GSM8K_SAMPLE / "test.jsonl").read_text().splitlines()[0])
    assert row["prompt"][1]["content"].startswith(first["question"])
    assert row["reward_model"] == {
        "style": "rule",
        "ground_truth": first["answer"].rsplit("####", 1)[1].strip().replace(",", ""),
    }
    assert row["extra_info"]["split"] == "test" and row["extra_info"]["index"] == 0
    assert json.loads(row["extra_info"]["original"])["question"] == row["extra_info"]["question"]


def test_thousands_commas_removed_from_real_gsm8k(tmp_path):
    rows, _ = prepare(tmp_path, dataset_spec(), "train")
    with_commas = [r for r in rows if "," in r["extra_info"]["answer"].rsplit("####", 1)[1]]
    assert with_commas, "the sample has answers with thousands separators"
    for r in with_commas:
        assert "," not in r["reward_model"]["ground_truth"]


def test_validation_carve_is_deterministic_and_disjoint(tmp_path):
    spec = dataset_spec(validation={"fraction": 0.25, "seed": 3})
    train, _ = prepare(tmp_path / "a", spec, "train")
    val, _ = prepare(tmp_path / "b", spec, "val")
    val_again, _ = prepare(tmp_path / "c", spec, "val")
    assert [r["extra_info"]["index"] for r in val] == [r["extra_info"]["index"] for r in val_again]
    assert len(val) == 64 and len(train) == 192
    assert not {r["extra_info"]["index"] for r in train} & {r["extra_info"]["index"] for r in val}
    other, _ = prepare(tmp_path / "d", dataset_spec(validation={"fraction": 0.25, "seed": 4}), "val")
    assert [r["extra_info"]["index"] for r in other] != [r["extra_info"]["index"] for r in val]


def test_max_rows(tmp_path):
    rows, _ = prepare(tmp_path, dataset_spec(max_rows=10), "train")
    assert len(rows) == 10


def _write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def test_single_json_file_with_problem_solution_and_boxed_answers(tmp_path):
    data = [
        {"problem": "Compute $1+1$.", "solution": "We add. \\boxed{2}"},
        {"problem": "Half of one?", "solution": "It is \\boxed{\\frac{1}{2}}."},
        {"problem": "No box here.", "solution": "The answer is 3."},
    ]
    path = _write(tmp_path / "in" / "fast_math_r1_sft.json", json.dumps(data))
    spec = dataset_spec(
        local={"path": path},
        format="boxed",
        prompt_key="problem",
        response_key="solution",
        validation={"size": 1, "seed": 0},
    )
    train, summary = prepare(tmp_path, spec, "train")
    val, _ = prepare(tmp_path / "v", spec, "val")
    truths = sorted(r["reward_model"]["ground_truth"] for r in train + val)
    assert truths == ["2", "\\frac{1}{2}"], "the row without a boxed answer is dropped"
    assert summary["dropped"].get("no_boxed_answer", 0) + len(train) + len(val) >= 2


@pytest.mark.parametrize(
    "content,message",
    [
        ("", "file is empty"),
        ('{"question": "a", "answer": "#### 1"}\n{"question": "b", "answer": \n', "line 2 is not valid JSON"),
        ('{"prompt": "a", "answer": "#### 1"}\n', "column 'question' not found"),
        ('{"question": "a", "answer": "one"}\n', "row 1: column 'answer' has no '#### <answer>' line"),
    ],
)
def test_bad_local_files_give_one_line(tmp_path, content, message):
    path = _write(tmp_path / "in" / "train.jsonl", content)
    spec = dataset_spec(local={"train": path})
    with pytest.raises(DataError) as info:
        prepare(tmp_path, spec, "train")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_duplicate_ids_are_an_error(tmp_path):
    rows = [
        {"id": 1, "question": "a", "answer": "#### 1"},
        {"id": 2, "question": "b", "answer": "#### 2"},
        {"id": 1, "question": "c", "answer": "#### 3"},
    ]
    path = _write(tmp_path / "in" / "train.jsonl", "\n".join(json.dumps(r) for r in rows))
    with pytest.raises(DataError, match=r"duplicate id 1 in column 'id' \(rows 1 and 3\)"):
        prepare(tmp_path, dataset_spec(local={"train": path}, id_key="id"), "train")


def test_missing_local_file_names_the_config_key(tmp_path):
    with pytest.raises(DataError, match=r"datasets.ds.local.train: file 'nope.jsonl' not found"):
        download_dataset("ds", dataset_spec(local={"train": "nope.jsonl"}), str(tmp_path / "m.json"))


def test_parquet_input(tmp_path):
    import pyarrow as pa

    path = tmp_path / "in" / "train.parquet"
    path.parent.mkdir()
    pq.write_table(
        pa.Table.from_pylist([{"question": "q1", "answer": "#### 4"}, {"question": "q2", "answer": "#### 5"}]), path
    )
    rows, _ = prepare(tmp_path, dataset_spec(local={"train": str(path)}), "train")
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["4", "5"]


def test_raw_file_changed_after_download_is_detected(tmp_path):
    spec = dataset_spec()
    manifest = tmp_path / "raw" / "manifest.json"
    download_dataset("ds", spec, str(manifest))
    raw = tmp_path / "raw" / read_json(manifest)["files"]["train"]["path"]
    raw.write_text(raw.read_text() + '{"question": "x", "answer": "#### 1"}\n')
    with pytest.raises(DataError, match="changed after download_data"):
        convert_split("ds", spec, str(manifest), "train", str(tmp_path / "t.parquet"), str(tmp_path / "t.json"))


# ---- the Hub path, without network --------------------------------------------------------------------------


HUB = {"source": "hub", "hub": {"repo_id": "openai/gsm8k", "config": "main"}}


def test_no_network_says_which_file_to_place_where(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = resolve_config({"datasets": {"gsm8k": HUB}}).datasets["gsm8k"]
    with pytest.raises(DataError) as info:
        download_dataset("gsm8k", spec, str(tmp_path / "m.json"))
    msg = str(info.value)
    assert "openai/gsm8k" in msg and "HF_HUB_OFFLINE" in msg and "source: local" in msg and "local.train" in msg


def _fake_hub_cache(hf_home: Path, files: dict[str, str]) -> str:
    """Lay out the Hugging Face cache exactly as huggingface_hub writes it for a dataset repo."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = hf_home / "hub" / "datasets--openai--gsm8k"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    for rel, content in files.items():
        blob = repo / "blobs" / f"blob{abs(hash(rel))}"
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_text(content)
        link = repo / "snapshots" / commit / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, link.parent), link)
    return commit


def test_offline_mode_uses_the_local_hf_cache(tmp_path, monkeypatch):
    hf_home = tmp_path / "hf"
    train = (GSM8K_SAMPLE / "train.jsonl").read_text()
    test = (GSM8K_SAMPLE / "test.jsonl").read_text()
    commit = _fake_hub_cache(
        hf_home,
        {
            "main/train-00000-of-00001.jsonl": train,
            "main/test-00000-of-00001.jsonl": test,
            "socratic/train-00000-of-00001.jsonl": "{}",
        },
    )
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(hf_home / "hub"))
    spec = resolve_config({"datasets": {"gsm8k": HUB}}).datasets["gsm8k"]
    manifest = download_dataset("gsm8k", spec, str(tmp_path / "raw" / "manifest.json"))
    assert manifest["origin"]["resolved_commit"] == commit
    assert manifest["files"]["train"]["rows"] == 256 and manifest["files"]["test"]["rows"] == 128
    assert manifest["origin"]["hub_files"]["train"] == ["main/train-00000-of-00001.jsonl"]
