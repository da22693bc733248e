"""Fixtures for the fault tests: an untrained tiny model to start GRPO from (built in seconds, no SFT needed)."""

from __future__ import annotations

import pytest
from faultkit import TINY_SPEC, fault_config


@pytest.fixture(scope="session")
def fault_start_model(tmp_path_factory) -> str:
    """A tiny Qwen3 model + tokenizer (grpoflow.demo.tiny) built from the arithmetic set by the library calls of
    download_data and convert_to_parquet."""
    from grpoflow.config import resolve_config
    from grpoflow.data.convert import convert_split
    from grpoflow.data.download import download_dataset
    from grpoflow.demo.tiny import build_tiny_model

    root = tmp_path_factory.mktemp("fault-model")
    spec = resolve_config(fault_config("unused/start", total_steps=1, save_freq=1, runtime=1)).datasets["arith"]
    manifest = root / "raw" / "manifest.json"
    download_dataset("arith", spec, str(manifest))
    convert_split("arith", spec, str(manifest), "train", str(root / "train.parquet"), str(root / "train.summary.json"))
    build_tiny_model(TINY_SPEC, str(root / "train.parquet"), str(root / "model"))
    return str(root / "model")
