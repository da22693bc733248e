"""config/README.md, the catalog beside the configs (snakemake-workflows' layout): every shipped config with one line
of what it is, and every key a config may set (key, type, default, description), generated from the schema by
``python -m grpoflow.catalog`` (grpoflow.catalog). Checked the way docs/backends.md's settings table is
(tests/backends/test_registry.py): the file is what the generator prints."""

from __future__ import annotations

import re
import subprocess
import sys

from grpoflow_testing import REPO

from grpoflow.catalog import readme
from grpoflow.schema import load_schema

README = REPO / "config" / "README.md"


def test_the_readme_is_what_the_schema_says():
    assert README.read_text(encoding="utf-8") == readme(REPO / "config"), (
        "config/README.md is stale: run `python -m grpoflow.catalog > config/README.md`"
    )


def test_the_command_prints_it():
    out = subprocess.run(
        [sys.executable, "-m", "grpoflow.catalog", str(REPO / "config")], capture_output=True, text=True, check=True
    ).stdout
    assert out == readme(REPO / "config")


def test_every_key_and_every_config_is_in_it():
    text = README.read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `([^`]+)` \|", text, re.M))

    def names(node):
        if isinstance(node, dict):
            yield from (node.get("properties") or {})
            for value in node.values():
                yield from names(value)
        elif isinstance(node, list):
            for value in node:
                yield from names(value)

    missing = {n for n in names(load_schema()) if not any(r == n or r.endswith("." + n) for r in rows)}
    assert not missing, f"keys of the schema without a row in config/README.md: {sorted(missing)}"
    for config in sorted((REPO / "config").glob("*.yaml")):
        assert f"[`{config.name}`]({config.name})" in text
