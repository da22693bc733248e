"""The built-in benchmarks (grpoflow.schema.benchmarks) fetched for real through huggingface_hub from the
stand-in Hub server (tests/hub/fakehub.py) at their pinned revisions, converted as test-only datasets, and read
offline afterwards; OlympiadBench's list answers graded right. The rows served are stand-ins written here in
each repo's layout and columns (no benchmark data is shipped)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub"))
from fakehub import FakeHub  # noqa: E402

from grpoflow import rewards  # noqa: E402
from grpoflow.config import resolve_config  # noqa: E402
from grpoflow.data.convert import answer_list_ground_truth, convert_split  # noqa: E402
from grpoflow.data.download import download_dataset  # noqa: E402
from grpoflow.errors import ConfigError, DataError  # noqa: E402
from grpoflow.schema.benchmarks import BUILTIN  # noqa: E402

MATH500_ROWS = [
    {
        "problem": "What is $1+1$?",
        "solution": "...",
        "answer": "2",
        "subject": "Prealgebra",
        "level": 1,
        "unique_id": "test/prealgebra/1.json",
    },
    {
        "problem": "Simplify $\\sqrt{8}$.",
        "solution": "...",
        "answer": "2\\sqrt{2}",
        "subject": "Algebra",
        "level": 3,
        "unique_id": "test/algebra/7.json",
    },
    {
        "problem": "Solve $x^2=9$ for $x>0$.",
        "solution": "...",
        "answer": "3",
        "subject": "Algebra",
        "level": 2,
        "unique_id": "test/algebra/9.json",
    },
]


def jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def parquet(rows: list[dict]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    return buf.getvalue()


def serve(hub: FakeHub, name: str, files: dict[str, bytes]) -> str:
    """Serve ``files`` as built-in benchmark ``name``'s repo at the revision the registry pins."""
    spec = BUILTIN[name]["dataset"]["hub"]
    return hub.add_dataset(spec["repo_id"], files, commit=spec["revision"])


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    import huggingface_hub.constants as c

    cache = tmp_path / "hf" / "hub"
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", False)
    return cache


def builtin_config(**benchmarks) -> object:
    return resolve_config({"evaluation": {"models": {"m": {"path": "org/model"}}, "benchmarks": benchmarks}})


def test_math500_downloads_at_its_pinned_revision_and_converts_as_a_test_only_dataset(tmp_path, hf_cache):
    cfg = builtin_config(math500={"builtin": "math500"})
    assert cfg.dataset_splits("math500") == ["test"]  # MATH-500 has no train split: no KeyError 'train'
    assert cfg.evaluation["benchmarks"]["math500"]["breakdown"] == ["subject", "level"]
    manifest_path = tmp_path / "resources" / "data" / "math500" / "manifest.json"
    with FakeHub("unused") as hub:
        commit = serve(hub, "math500", {"test.jsonl": jsonl(MATH500_ROWS), "README.md": b"card"})
        manifest = download_dataset("math500", cfg.datasets["math500"], str(manifest_path), endpoint=hub.url)
        fetched = [r["path"] for r in hub.requests]
    assert commit == "ff5b20257d8185524591543f8ff5993951537bb8"
    assert manifest["origin"]["resolved_commit"] == commit and manifest["origin"]["repo_id"] == "HuggingFaceH4/MATH-500"
    assert manifest["origin"]["hub_files"] == {"test": ["test.jsonl"]} and manifest["files"]["test"]["rows"] == 3
    assert all("README.md" not in p for p in fetched)  # only the pinned file is fetched

    out = tmp_path / "results" / "data" / "math500" / "test.parquet"
    convert_split("math500", cfg.datasets["math500"], str(manifest_path), "test", str(out), str(tmp_path / "s.json"))
    rows = pq.read_table(out).to_pylist()
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["2", "2\\sqrt{2}", "3"]
    assert rows[1]["extra_info"]["id"] == "test/algebra/7.json"
    assert json.loads(rows[1]["extra_info"]["original"])["subject"] == "Algebra"
    assert rows[0]["prompt"][-1]["content"].endswith("put your final answer within \\boxed{}.")

    # Offline afterwards: with the Hub gone, a rerun is served from the HF cache at the pinned commit.
    again = download_dataset("math500", cfg.datasets["math500"], str(tmp_path / "again" / "manifest.json"))
    assert again["files"] == manifest["files"]


def test_a_repo_found_by_split_name_downloads_through_snapshot_download(tmp_path, hf_cache):
    cfg = builtin_config(aime25={"builtin": "aime2025"})
    rows = [{"problem": f"Problem {i}", "answer": str(100 + i), "id": i} for i in range(3)]
    with FakeHub("unused") as hub:
        serve(hub, "aime2025", {"data/test-00000-of-00001.parquet": parquet(rows), "other/train.jsonl": b"{}\n"})
        manifest = download_dataset(
            "aime2025", cfg.datasets["aime2025"], str(tmp_path / "m" / "manifest.json"), endpoint=hub.url
        )
    assert manifest["origin"]["hub_files"] == {"test": ["data/test-00000-of-00001.parquet"]}
    assert manifest["origin"]["resolved_commit"] == BUILTIN["aime2025"]["dataset"]["hub"]["revision"]
    assert cfg.evaluation["benchmarks"]["aime25"]["samples"] == 16  # recommended avg@16


def test_a_missing_pinned_file_is_one_line_naming_repo_and_revision(tmp_path, hf_cache):
    cfg = builtin_config(math500={"builtin": "math500"})
    with FakeHub("unused") as hub:
        serve(hub, "math500", {"other.jsonl": b"{}\n"})
        with pytest.raises(DataError, match=r"datasets.math500.hub: the Hub refused dataset 'HuggingFaceH4/MATH-500'"):
            download_dataset("math500", cfg.datasets["math500"], str(tmp_path / "manifest.json"), endpoint=hub.url)


@pytest.mark.parametrize(
    "final_answer,truth,completion",
    [
        (["$\\frac{1}{2}$"], "\\frac{1}{2}", "So the final answer is $\\boxed{\\frac12}$."),
        (["$2$", "$-3$"], "2, -3", "The solutions are $\\boxed{-3}$ and $\\boxed{2}$."),
        (["$(-\\infty, 2)$"], "(-\\infty, 2)", "\\boxed{(-\\infty,2)}"),
    ],
)
def test_olympiadbench_list_answers_are_graded_right(tmp_path, final_answer, truth, completion):
    assert answer_list_ground_truth(final_answer) == truth
    assert rewards.verify(completion, truth).correct
    assert not rewards.verify("\\boxed{7}", truth).correct
    # Through conversion, as download_data and convert_to_parquet read the Parquet file.
    cfg = builtin_config(olymp={"builtin": "olympiadbench"})
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "test.parquet").write_bytes(parquet([{"id": 1, "question": "q?", "final_answer": final_answer}]))
    spec = {**cfg.datasets["olympiadbench"], "source": "local", "local": {"test": str(raw / "test.parquet")}}
    download_dataset("olympiadbench", spec, str(tmp_path / "d" / "manifest.json"))
    convert_split(
        "olympiadbench",
        spec,
        str(tmp_path / "d" / "manifest.json"),
        "test",
        str(tmp_path / "t.parquet"),
        str(tmp_path / "s.json"),
    )
    assert pq.read_table(tmp_path / "t.parquet").to_pylist()[0]["reward_model"]["ground_truth"] == truth


def test_a_local_copy_replaces_the_download(tmp_path):
    copy = tmp_path / "math500.jsonl"
    copy.write_bytes(jsonl(MATH500_ROWS))
    local = {
        "source": "local",
        "local": {"test": str(copy)},
        "format": "plain",
        "prompt_key": "problem",
        "response_key": "answer",
    }
    cfg = resolve_config(
        {
            "datasets": {"math500": local},
            "evaluation": {"models": {"m": {"path": "org/m"}}, "benchmarks": {"math500": {"builtin": "math500"}}},
        }
    )
    assert (
        cfg.datasets["math500"]["source"] == "local" and cfg.evaluation["benchmarks"]["math500"]["dataset"] == "math500"
    )


def test_test_only_datasets_cannot_train_or_carve():
    bench = {"source": "local", "local": {"test": "t.jsonl"}}
    with pytest.raises(
        ConfigError, match=r"datasets.b.validation carves a split out of train, but the source has no train split"
    ):
        resolve_config({"datasets": {"b": {**bench, "validation": {"size": 5}}}})
    with pytest.raises(ConfigError, match=r"data.train_split = 'train': dataset 'b' has splits test"):
        resolve_config(
            {
                "datasets": {"b": bench},
                "experiments": {"e": {"data": {"dataset": "b"}, "sft": {"model": "o/m"}, "grpo": {"total_steps": 1}}},
                "evaluation": {"benchmarks": {"b": {"dataset": "b"}}},
            }
        )
