"""upload_to_hub against a stand-in Hub on loopback: disabled, dry run, missing token, upload, idempotency."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from hubkit import experiment_config, hub, no_token, run, token, with_token  # noqa: F401 (fixtures)

from grpoflow.errors import GrpoflowError
from grpoflow.hub import upload_experiment


def _upload(experiment_config, run, hub=None, **upload):
    settings = {**experiment_config["upload"], **upload}
    return upload_experiment("r16", settings, experiment_config, endpoint=hub.url if hub else None, **run)


def _record(run) -> dict:
    return json.loads(Path(run["record_path"]).read_text())


def test_disabled_upload_sends_nothing_and_says_so(experiment_config, run, hub, no_token):
    _upload(experiment_config, run, hub, enabled=False)
    record = _record(run)
    assert record["sent"] is False and record["enabled"] is False
    assert "upload disabled: set experiments.r16.upload.enabled: true" in record["reason"]
    assert hub.requests == []


def test_dry_run_lists_the_files_and_sends_nothing(experiment_config, run, hub, no_token, caplog):
    caplog.set_level(logging.INFO)
    _upload(experiment_config, run, hub, dry_run=True)
    record = _record(run)
    assert hub.requests == []
    assert record["sent"] is False and record["dry_run"] is True and record["token_found"] is False
    assert [f["path"] for f in record["files"]] == [
        "config.json",
        "model.safetensors",
        "sub/extra.txt",
        "tokenizer.json",
        "README.md",
    ]
    assert record["files"][1]["size"] == 2048 and len(record["files"][1]["sha256"]) == 64
    assert record["total_bytes"] == sum(f["size"] for f in record["files"])
    assert record["model_card"].startswith("---\nbase_model: Qwen/Qwen3-0.6B\n")
    assert "would upload 5 files" in caplog.text and "sub/extra.txt" in caplog.text


def test_missing_token_is_a_clear_error_before_any_request(experiment_config, run, hub, no_token):
    with pytest.raises(GrpoflowError) as err:
        _upload(experiment_config, run, hub)
    assert (
        str(err.value)
        == "no Hugging Face token for uploading r16 to grpoflow-test/r16: set HF_TOKEN or run `hf auth login` on the machine that runs upload_to_hub (nothing was uploaded)"
    )
    assert hub.requests == [] and not Path(run["record_path"]).exists()


def test_upload_is_complete_and_idempotent(experiment_config, run, hub, with_token, caplog, capsys):
    caplog.set_level(logging.DEBUG)
    first = _upload(experiment_config, run, hub)
    repo = hub.repos["grpoflow-test/r16"]
    assert repo.private is True
    files = repo.files("main")
    model = Path(run["model_dir"])
    for name in ("config.json", "model.safetensors", "tokenizer.json", "sub/extra.txt"):
        assert files[name] == (model / name).read_bytes()
    card = files["README.md"].decode()
    assert (
        card.startswith("---\nbase_model: Qwen/Qwen3-0.6B\n") and len(files["README.md"]) == first["files"][-1]["size"]
    )
    assert "| arith | 50.0% | 90.0% | 60.0% | 5.0% | 2.0% | 30.5 | 200 | greedy, max 48 tokens |" in card
    from huggingface_hub import ModelCard

    results = ModelCard(card).data.eval_results  # the Hub's evaluation results (model-index) say the same
    assert [(r.dataset_name, r.metric_type, r.metric_value) for r in results] == [("arith", "accuracy", 0.5)]
    assert "- grpoflow commit: `deadbeef`" in card and "node17" not in card
    assert "wandb-secret-value" not in card and "WANDB_PROJECT: <redacted>" in card
    assert "The LoRA adapter (rank 16) is merged into the weights" in card
    assert first["sent"] and first["changed"] and first["commit"] == hub.head("grpoflow-test/r16")
    assert all(r["authorized"] for r in hub.requests)
    commits = hub.n_commits("grpoflow-test/r16")

    # Same content again: no new commit, and the record says nothing changed.
    second = _upload(experiment_config, run, hub)
    assert hub.n_commits("grpoflow-test/r16") == commits
    assert second["changed"] is False and second["commit"] == first["commit"]

    # One changed file: one new commit.
    (model / "tokenizer.json").write_text('{"version": "1.1"}')
    third = _upload(experiment_config, run, hub)
    assert third["changed"] and hub.n_commits("grpoflow-test/r16") == commits + 1
    assert hub.repos["grpoflow-test/r16"].files("main")["tokenizer.json"] == b'{"version": "1.1"}'

    token = with_token
    out = capsys.readouterr()
    assert (
        token not in caplog.text
        and token not in out.out + out.err
        and token not in Path(run["record_path"]).read_text()
    )


def test_revision_uploads_to_a_branch(experiment_config, run, hub, with_token):
    _upload(experiment_config, run, hub, revision="grpo-v1", private=False)
    repo = hub.repos["grpoflow-test/r16"]
    assert repo.private is False
    assert "README.md" in repo.files("grpo-v1") and "README.md" not in repo.files("main")
    assert _record(run)["revision"] == "grpo-v1"


def test_rejected_token_is_one_line_without_the_token(experiment_config, run, hub, no_token, monkeypatch):
    wrong = "hf_" + "x" * 34
    monkeypatch.setenv("HF_TOKEN", wrong)
    with pytest.raises(GrpoflowError) as err:
        _upload(experiment_config, run, hub)
    message = str(err.value)
    assert message.startswith("upload of r16 to grpoflow-test/r16@main failed: ") and "\n" not in message
    assert wrong not in message and hub.token not in message
    assert not Path(run["record_path"]).exists()


def test_card_config_hides_credentials():
    from grpoflow.hub import _public_config

    shown = _public_config(
        {
            "trl": {"extra_args": {"hub_token": "t", "report_to": ["wandb"]}},
            "verl": {"env": {"NCCL_DEBUG": "INFO", "WANDB_API_KEY": "k"}},
            "upload": {"repo_id": "a/b"},
            "grpo": {"seed": 1},
        }
    )
    assert shown == {
        "trl": {"extra_args": {"hub_token": "<redacted>", "report_to": ["wandb"]}},
        "verl": {"env": {"NCCL_DEBUG": "<redacted>", "WANDB_API_KEY": "<redacted>"}},
        "grpo": {"seed": 1},
    }


def test_model_card_follows_hub_conventions(caplog):
    """license, language, base_model, datasets (Hub ids), model-index with each benchmark's Hub id, revision,
    split and metric name (avg@n for sampled ones), and the training prompt."""
    from huggingface_hub import ModelCard

    from grpoflow.config import resolve_config
    from grpoflow.hub import card_sources, model_card
    from grpoflow.schema.benchmarks import BUILTIN

    cfg = resolve_config(
        {
            "datasets": {
                "gsm8k": {
                    "source": "hub",
                    "hub": {"repo_id": "openai/gsm8k", "config": "main", "revision": "abc123"},
                    "validation": {"size": 10},
                    "prompt": {"system": "Think step by step.", "template": "Q: {question}"},
                }
            },
            "experiments": {
                "r16": {
                    "backend": "trl",
                    "data": {"dataset": "gsm8k"},
                    "sft": {"model": "Qwen/Qwen3-0.6B"},
                    "grpo": {"total_steps": 3},
                    "upload": {"enabled": True, "repo_id": "org/r16", "license": "apache-2.0"},
                }
            },
            "evaluation": {"benchmarks": {"gsm8k_test": {"dataset": "gsm8k"}, "aime24": {"builtin": "aime2024"}}},
        }
    )
    evals = [
        {
            "benchmark": "gsm8k_test",
            "n_problems": 1319,
            "samples_per_problem": 1,
            "metrics": {
                "accuracy": 0.71,
                "format_accuracy": 1.0,
                "partial_accuracy": 0.8,
                "no_answer_rate": 0.0,
                "truncation_rate": 0.0,
                "mean_response_tokens": 200.0,
            },
            "generation": {"greedy": True, "max_new_tokens": 1024},
        },
        {
            "benchmark": "aime24",
            "n_problems": 30,
            "samples_per_problem": 16,
            "metrics": {
                "accuracy": 0.1,
                "format_accuracy": 1.0,
                "partial_accuracy": 0.1,
                "no_answer_rate": 0.0,
                "truncation_rate": 0.0,
                "mean_response_tokens": 900.0,
            },
            "generation": {
                "greedy": False,
                "preset": "standard",
                "temperature": 0.6,
                "samples": 16,
                "max_new_tokens": 4096,
            },
        },
    ]
    marker = {"final_step": 3, "planned_steps": 3}
    card = model_card("r16", cfg.experiment("r16"), marker, evals, "org/r16", card_sources(cfg, "r16"))
    data = ModelCard(card).data
    assert (data.license, data.language, data.base_model, data.datasets) == (
        "apache-2.0",
        ["en"],
        "Qwen/Qwen3-0.6B",
        ["openai/gsm8k"],
    )
    got = {
        (
            r.dataset_type,
            r.dataset_revision,
            r.dataset_split,
            r.dataset_config,
            r.metric_type,
            r.metric_name,
            r.metric_value,
        )
        for r in data.eval_results
    }
    aime = BUILTIN["aime2024"]["dataset"]["hub"]
    # The Hub's split names, not grpoflow's: AIME 2024's problems are the Hub repo's only split, `train`, which
    # grpoflow evaluates as its benchmark's `test` split (lighteval's aime24 task reads evaluation_splits=["train"]).
    assert aime["files"] == {"test": "data/train-00000-of-00001.parquet"}
    assert got == {
        ("openai/gsm8k", "abc123", "test", "main", "accuracy", "accuracy", 0.71),
        (aime["repo_id"], aime["revision"], "train", None, "pass@1", "avg@16", 0.1),
    }
    assert "## Training prompt" in card and "Think step by step." in card and "Q: {question}" in card
    assert "standard (T 0.6, avg@16), max 4096 tokens" in card
    # Without a license the card says none, and the log asks for one.
    exp = {**cfg.experiment("r16"), "upload": {**cfg.experiment("r16")["upload"], "license": None}}
    assert ModelCard(model_card("r16", exp, marker, evals, "org/r16")).data.license is None
    assert "set upload.license" in caplog.text
