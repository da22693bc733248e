"""Fixtures shared by every test folder (helpers live in grpoflow_testing.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from grpoflow_testing import REPO, load_yaml, make_workdir


@pytest.fixture
def workdir(tmp_path) -> Path:
    return make_workdir(tmp_path)


@pytest.fixture(scope="session")
def default_config() -> dict:
    return load_yaml(REPO / "config" / "config.yaml")
