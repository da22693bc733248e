"""Fixtures for upload tests: a stand-in Hub on loopback, a merged-model-like dir, a finished run's files.

Imported by the test modules by name (not a conftest.py: modules named `conftest` in several test folders
shadow each other in sys.modules)."""

from __future__ import annotations

import json
import secrets

import pytest
from fakehub import FakeHub

from grpoflow.config import resolve_config


@pytest.fixture
def token() -> str:
    return "hf_" + secrets.token_hex(17)


@pytest.fixture
def hub(token):
    with FakeHub(token) as server:
        yield server


@pytest.fixture
def no_token(monkeypatch, tmp_path):
    """No token anywhere: neither HF_TOKEN nor the HF cache's token file."""
    import huggingface_hub.constants

    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))


@pytest.fixture
def with_token(no_token, monkeypatch, token):
    monkeypatch.setenv("HF_TOKEN", token)
    return token


@pytest.fixture
def experiment_config():
    raw = {
        "datasets": {"arith": {"source": "synthetic", "synthetic": {}, "validation": {"size": 20}}},
        "experiments": {
            "r16": {
                "backend": "verl",
                "data": {"dataset": "arith"},
                "sft": {"model": "Qwen/Qwen3-0.6B"},
                "grpo": {"total_steps": 3, "lora": {"rank": 16}, "prompts_per_step": 8, "num_generations": 4},
                "verl": {
                    "env": {"WANDB_PROJECT": "wandb-secret-value"},
                    "rollout": {"tensor_model_parallel_size": 1},
                    "ppo_mini_batch_size": 8,
                },
                "resources": {"gpus_per_node": 1},
                "upload": {"enabled": True, "repo_id": "grpoflow-test/r16"},
            }
        },
        "evaluation": {"benchmarks": {"arith": {"dataset": "arith"}}},
    }
    return resolve_config(raw).experiment("r16")


@pytest.fixture
def run(tmp_path) -> dict:
    """The inputs upload_to_hub gets: a model dir (small stand-in files), the completion marker, evaluations."""
    model = tmp_path / "results" / "r16" / "model"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}))
    (model / "model.safetensors").write_bytes(bytes(range(256)) * 8)
    (model / "tokenizer.json").write_text('{"version": "1.0"}')
    (model / "sub" / "extra.txt").write_text("nested files keep their path")
    (model / "README.md").write_text("stale card from the merger: replaced by the generated one")
    marker = tmp_path / "results" / "r16" / "training_complete.json"
    marker.write_text(
        json.dumps(
            {
                "experiment": "r16",
                "backend": "verl",
                "planned_steps": 3,
                "final_step": 3,
                "metrics_summary": {"reward": 0.61, "accuracy": 0.58},
                "provenance": {
                    "config_hash": "0123456789abcdef",
                    "git_commit": "deadbeef",
                    "packages": {"verl": "0.9.1"},
                    "python": "3.11",
                    "host": "node17",
                    "time": "2026-11-22T07:00:00+00:00",
                },
            }
        )
    )
    ev = tmp_path / "results" / "r16" / "eval" / "arith.json"
    ev.parent.mkdir(parents=True)
    ev.write_text(
        json.dumps(
            {
                "model": "r16",
                "benchmark": "arith",
                "n_problems": 200,
                "metrics": {
                    "accuracy": 0.5,
                    "format_accuracy": 0.9,
                    "partial_accuracy": 0.6,
                    "no_answer_rate": 0.05,
                    "truncation_rate": 0.02,
                    "mean_response_tokens": 30.5,
                },
                "generation": {
                    "greedy": True,
                    "preset": "greedy",
                    "temperature": 0.0,
                    "samples": 1,
                    "max_new_tokens": 48,
                },
            }
        )
    )
    return {
        "model_dir": str(model),
        "marker_path": str(marker),
        "evaluations": [str(ev)],
        "record_path": str(tmp_path / "results" / "r16" / "upload.json"),
    }
