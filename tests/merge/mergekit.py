"""Builders for the merge tests (and the verl wrapper tests): a tiny Qwen3 SFT start, genuine verl FSDP2
checkpoints written from it under torchrun (gloo, 2 ranks) by verl's own checkpoint manager, genuine TRL
checkpoints from grpoflow's TRL backend. A plain module (conftest.py names clash across test folders)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from grpoflow_testing import TINY_SPEC as BASE_TINY_SPEC

HERE = Path(__file__).resolve().parent
TINY_SPEC = {**BASE_TINY_SPEC, "vocab_size": 300}


def build_tiny_base(root: Path, default_config: dict) -> str:
    """A tiny Qwen3 model dir (weights, tokenizer with chat template, generation_config) built by grpoflow.demo.tiny
    from the shipped GSM8K sample, converted by the real data pipeline."""
    from grpoflow.config import resolve_config
    from grpoflow.data.convert import convert_split
    from grpoflow.data.download import download_dataset
    from grpoflow.demo.tiny import build_tiny_model

    cwd = os.getcwd()
    os.chdir(Path(__file__).resolve().parents[2])  # the dataset's local paths are relative to the repo
    try:
        spec = resolve_config(default_config).datasets["gsm8k_sample"]
        manifest = root / "raw" / "manifest.json"
        download_dataset("gsm8k_sample", spec, str(manifest))
        convert_split(
            "gsm8k_sample", spec, str(manifest), "train", str(root / "train.parquet"), str(root / "train.summary.json")
        )
    finally:
        os.chdir(cwd)
    out = root / "model"
    build_tiny_model(TINY_SPEC, str(root / "train.parquet"), str(out))
    return str(out)


def write_checkpoints(base: str, roots: dict[int, Path], lora: bool) -> dict[int, Path]:
    """Genuine verl FSDP2 checkpoints of ``base``: for each step, ``roots[step]`` holds ``global_step_<step>`` (one
    more optimizer step each), ``reference.pt`` and ``latest_checkpointed_iteration.txt``, all written by one
    torchrun (2 gloo ranks)."""
    torchrun = Path(sys.executable).parent / "torchrun"
    with socket.socket() as sock:  # a free port for the rendezvous (other test runs may use torchrun too)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [
        str(torchrun),
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(port),
        str(HERE / "write_fsdp_checkpoint.py"),
        base,
        *(f"{step}={root}" for step, root in roots.items()),
    ] + (["--lora"] if lora else [])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, f"torchrun checkpoint writer failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return dict(roots)


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def trl_config(base: str, lora_rank: int) -> dict:
    """The config of the TRL run train_trl trains (experiment ``t``, 2 steps on synthetic arithmetic)."""
    return {
        "datasets": {
            "arith": {"source": "synthetic", "synthetic": {"train_size": 40, "test_size": 8}, "validation": {"size": 8}}
        },
        "defaults": {
            "backend": "trl",
            "data": {"dataset": "arith", "val_split": None},
            "sft": {"model": base},
            "grpo": {
                "total_steps": 2,
                "save_freq": 2,
                "prompts_per_step": 2,
                "num_generations": 2,
                "max_prompt_length": 96,
                "max_response_length": 6,
                "learning_rate": 1e-2,
                "lora": {"rank": lora_rank, "alpha": 2 * max(lora_rank, 1)},
            },
            "resources": {"gpus_per_node": 0},
        },
        "experiments": {"t": {}},
        "evaluation": {"benchmarks": {"a": {"dataset": "arith", "split": "test"}}},
    }


def train_trl(base: str, root: Path, lora_rank: int) -> Path:
    """A genuine TRL checkpoint: grpoflow's TRL backend (GRPOTrainer) trains the tiny model for 2 steps."""
    import copy
    import json

    from grpoflow.backends.trl.commandline import training_spec
    from grpoflow.config import resolve_config
    from grpoflow.discovery import discover_to_file

    raw = trl_config(base, lora_rank)
    cfg = resolve_config(copy.deepcopy(raw))
    root.mkdir(parents=True)
    sft = root / "sft.json"
    discover_to_file({"model": base}, str(sft))
    # The prompts: the tiny base's own training rows (its tokenizer knows them).
    train = Path(base).parent / "train.parquet"
    spec = training_spec(
        cfg,
        "t",
        {"train": str(train), "sft": str(sft)},
        {"marker": str(root / "training_complete.json"), "metrics": str(root / "train_metrics.jsonl")},
    )
    spec["checkpoint_dir"] = str(root / "checkpoints")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [sys.executable, "-m", "grpoflow.backends.trl.train", "--spec", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, f"TRL training failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return root


def load_merged(model_dir: Path) -> dict:
    from safetensors.torch import load_file

    state = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        state.update(load_file(f))
    return state
