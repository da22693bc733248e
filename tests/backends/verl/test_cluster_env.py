"""requirements/cluster.lock pins every top-level requirement of requirements/cluster.in (verl[vllm]==0.9.1 with the
vLLM/torch it declares); tests/test_envs.py checks that envs/cluster.yaml carries the same pins."""

from __future__ import annotations

import re

from verlkit import REPO


def lock_pins() -> dict[str, str]:
    lines = [
        ln.strip()
        for ln in (REPO / "requirements/cluster.lock").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    pins = dict(ln.split("==", 1) for ln in lines)
    assert len(pins) == len(lines)
    return {re.sub(r"[-_.]+", "-", k).lower(): v for k, v in pins.items()}


def test_lock_pins_every_requirement_and_the_verl_stack():
    pins = lock_pins()
    for line in (REPO / "requirements/cluster.in").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = re.sub(r"\[.*\]", "", line).partition("==")
            key = re.sub(r"[-_.]+", "-", name.strip()).lower()
            assert key in pins, name
            assert not version or pins[key] == version, (name, pins[key], version)
    assert pins["verl"] == "0.9.1" and pins["vllm"] == "0.24.0" and pins["torch"] == "2.11.0"
    assert pins["antlr4-python3-runtime"].startswith("4.9."), "hydra-core 1.3 (verl's config) pins antlr 4.9"
    assert "transferqueue" in pins, "verl 0.9.1's default v1 trainer imports transfer_queue"
    assert "snakemake-executor-plugin-slurm" not in pins, (
        "the submitting environment's plugin conflicts with vLLM's numpy"
    )
