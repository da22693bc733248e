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
