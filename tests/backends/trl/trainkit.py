"""Helpers shared by the training tests (constants, config resolution, JSONL reading)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

from grpoflow_testing import SMALL_ARITH, TINY_SPEC  # noqa: F401  (re-exported for the training tests)

from grpoflow.config import deep_merge, resolve_config

BIN = Path(sys.executable).parent  # the venv's bin: `python` in a training command is this interpreter


def resolved(raw: dict, override: dict | None = None):
    return resolve_config(deep_merge(copy.deepcopy(raw), override or {}))


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


# The vLLM CPU attention refuses head_dim 16 (TINY_SPEC's); 32 works, as in the demo model.
VLLM_TINY_SPEC = {**TINY_SPEC, "num_attention_heads": 2, "num_key_value_heads": 1}


def vllm_env() -> dict:
    """This process's environment, with this checkout's grpoflow first on the path (as the jobs Snakemake starts from
    the tests get it) and vLLM kept off the network."""
    import os

    src = Path(__file__).resolve().parents[3] / "src"
    path = os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
