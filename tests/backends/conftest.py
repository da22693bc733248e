"""Fixtures shared by every backend's tests: a small arithmetic Parquet made by the real data pipeline, a tiny
model built from a config, and an sft.json naming it."""

from __future__ import annotations

import copy

import pytest
from grpoflow_testing import SMALL_ARITH, TINY_SPEC

from grpoflow.config import deep_merge, resolve_config
from grpoflow.data.convert import convert_split
from grpoflow.data.download import download_dataset


@pytest.fixture(scope="session")
def small_cfg(default_config):
    return resolve_config(deep_merge(copy.deepcopy(default_config), SMALL_ARITH))


@pytest.fixture(scope="session")
def arith_parquet(tmp_path_factory, small_cfg) -> dict[str, str]:
    """{split: path} of the arith dataset, written by download_data + convert_to_parquet's library calls."""
    root = tmp_path_factory.mktemp("arith")
    spec = small_cfg.datasets["arith"]
    manifest = root / "raw" / "manifest.json"
    download_dataset("arith", spec, str(manifest))
    out = {}
    for split in small_cfg.dataset_splits("arith"):
        out[split] = str(root / f"{split}.parquet")
        convert_split("arith", spec, str(manifest), split, out[split], str(root / f"{split}.summary.json"))
    return out


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, arith_parquet) -> str:
    from grpoflow.demo.tiny import build_tiny_model

    out = tmp_path_factory.mktemp("tiny") / "model"
    build_tiny_model(TINY_SPEC, arith_parquet["train"], str(out))
    return str(out)


@pytest.fixture(scope="session")
def tiny_sft_json(tmp_path_factory, tiny_model) -> str:
    """An sft.json naming the tiny model, as discover_sft_checkpoint writes it for `sft.model`."""
    from grpoflow.discovery import discover_to_file

    path = tmp_path_factory.mktemp("sft") / "sft.json"
    discover_to_file({"model": tiny_model}, str(path))
    return str(path)
