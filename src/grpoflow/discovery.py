"""Find the checkpoint GRPO starts from (`discover_sft_checkpoint`).

Accepted: an explicit Hugging Face model dir or Hub id (`sft.model`), or an SFT run dir (`sft.run_dir`) as
verl's and TRL's trainers write them::

    run_dir/latest_checkpointed_iteration.txt     (verl; preferred when present)
    run_dir/global_step_N/<hf_subdir>/            (verl SFT: huggingface/, or e.g. huggingface_fast_math_r1/)
    run_dir/global_step_N/actor/<hf_subdir>/      (verl RL checkpoints)
    run_dir/checkpoint-N/                         (TRL / HF Trainer: the HF model itself)

Steps are compared as numbers (global_step_1000 > global_step_900). The chosen dir must hold a config, weights
and a tokenizer. Usage from a shell: ``python -m grpoflow.discovery path results/E/sft.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from pathlib import Path

from grpoflow.errors import DataError
from grpoflow.hubid import HUB_ID
from grpoflow.io import atomic_write_json, read_json

log = logging.getLogger(__name__)

STEP_DIR = re.compile(r"^(?:global_step_|checkpoint-)(\d+)$")
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def check_hf_dir(path: Path) -> dict:
    """What an HF model dir holds; raises DataError naming what is missing."""
    missing = []
    if not (path / "config.json").is_file():
        missing.append("config.json")
    weights = [f for f in WEIGHT_FILES if (path / f).is_file()] or sorted(
        p.name for p in path.glob("model-*.safetensors")
    )
    if not weights:
        missing.append("weights (model.safetensors or pytorch_model.bin)")
    tokenizer = [f for f in TOKENIZER_FILES if (path / f).is_file()]
    if not tokenizer:
        missing.append("a tokenizer (tokenizer.json or tokenizer.model)")
    if missing:
        raise DataError(f"{path}: not a complete Hugging Face model: missing {', '.join(missing)}")
    return {"weights": weights, "tokenizer": tokenizer}


def check_remote_code(path: Path, trusted: bool, key: str) -> None:
    """A model dir whose config.json maps its classes to Python files shipped with it (``auto_map``) runs that
    code when loaded; refuse it unless ``key`` (a per-model trust_remote_code setting) is true."""
    try:
        auto_map = json.loads((path / "config.json").read_text(encoding="utf-8")).get("auto_map")
    except (OSError, ValueError, AttributeError):
        return  # check_hf_dir or the loader reports a missing or unreadable config.json
    if auto_map and not trusted:
        raise DataError(
            f"{path} ships its own Python code (config.json auto_map: {', '.join(sorted(auto_map))}), which is only run when allowed: "
            f"set {key}: true if you trust that code"
        )


def checkpoint_steps(run_dir: str | Path, pattern: re.Pattern = STEP_DIR) -> dict[int, Path]:
    """Step dirs of a run by step number (numeric order, not lexical); {} when ``run_dir`` does not exist."""
    root = Path(run_dir)
    if not root.is_dir():
        return {}
    steps = {}
    for child in root.iterdir():
        m = pattern.match(child.name)
        if m and child.is_dir():
            steps[int(m.group(1))] = child
    return steps


def _hf_candidates(ckpt: Path, hf_subdir: str) -> list[Path]:
    return [ckpt / hf_subdir, ckpt / "actor" / hf_subdir, ckpt]


def discover(spec: dict, hub_manifest: str | None = None) -> dict:
    """``spec`` is an experiment's `sft` section. Returns the record written to sft.json. ``hub_manifest``: the
    download_model manifest of a Hub-id ``model`` (then the local snapshot is the start model)."""
    if spec.get("model") and hub_manifest:
        return _hub_snapshot(spec, hub_manifest)
    if spec.get("model"):
        return _explicit_model(spec["model"], spec.get("trust_remote_code", False))
    run_dir = Path(spec["run_dir"])
    hf_subdir = spec.get("hf_subdir") or "huggingface"
    if not run_dir.is_dir():
        raise DataError(
            f"sft.run_dir {str(run_dir)!r} does not exist: point it at your SFT run dir (relative paths are relative to {os.getcwd()})"
        )
    steps = checkpoint_steps(run_dir)
    marker = run_dir / "latest_checkpointed_iteration.txt"
    wanted = spec.get("step", "latest")
    if wanted != "latest":
        if wanted not in steps:
            raise DataError(
                f"sft.step = {wanted}: {run_dir} has no global_step_{wanted} or checkpoint-{wanted} (steps: {sorted(steps) or 'none'})"
            )
        step, how = wanted, f"sft.step = {wanted}"
    elif marker.is_file():
        text = marker.read_text().strip()
        if not text.isdigit() or int(text) not in steps:
            raise DataError(
                f"{marker} says {text!r}, but {run_dir} has no such step dir (steps: {sorted(steps) or 'none'}): fix or delete the file, or set sft.step"
            )
        step, how = int(text), "latest_checkpointed_iteration.txt"
    elif steps:
        step, how = max(steps), "highest step dir"
    else:
        raise DataError(
            f"sft.run_dir {str(run_dir)!r} holds no checkpoint: looked for latest_checkpointed_iteration.txt, global_step_N/ and checkpoint-N/ dirs; point sft.run_dir at the run's output dir or set sft.model to an HF model dir"
        )
    ckpt = steps[step]
    looked = []
    for cand in _hf_candidates(ckpt, hf_subdir):
        looked.append(str(cand))
        if cand.is_dir() and (cand / "config.json").is_file():
            files = check_hf_dir(cand)
            check_remote_code(cand, spec.get("trust_remote_code", False), "sft.trust_remote_code")
            log.info("SFT checkpoint: %s (step %d, found by %s)", cand, step, how)
            return {
                "path": str(cand.resolve()),
                "step": step,
                "found_by": how,
                "run_dir": str(run_dir.resolve()),
                "checkpoint": str(ckpt.resolve()),
                "hf_subdir": hf_subdir,
                "files": files,
                "hub_id": None,
            }
    raise DataError(
        f"step {step} of {run_dir} ({how}) has no Hugging Face model: looked in {', '.join(looked)}; set sft.hf_subdir to the sub-folder holding it (e.g. huggingface_fast_math_r1)"
    )


def _hub_snapshot(spec: dict, manifest: str) -> dict:
    from grpoflow.models import snapshot_of

    path = Path(snapshot_of(manifest))
    record = read_json(manifest)
    files = check_hf_dir(path)
    check_remote_code(path, spec.get("trust_remote_code", False), "sft.trust_remote_code")
    log.info("SFT model %s@%s: the local snapshot %s (download_model)", record["repo_id"], record["commit"], path)
    return {
        "path": str(path),
        "step": None,
        "found_by": f"sft.model (Hub id, fetched by download_model at commit {record['commit']})",
        "run_dir": None,
        "checkpoint": None,
        "hf_subdir": None,
        "files": files,
        "hub_id": record["repo_id"],
        "hub_commit": record["commit"],
    }


def _explicit_model(model: str, trusted: bool) -> dict:
    path = Path(model)
    if path.exists():
        files = check_hf_dir(path)
        check_remote_code(path, trusted, "sft.trust_remote_code")
        return {
            "path": str(path.resolve()),
            "step": None,
            "found_by": "sft.model (local dir)",
            "run_dir": None,
            "checkpoint": None,
            "hf_subdir": None,
            "files": files,
            "hub_id": None,
        }
    if HUB_ID.match(model) and not model.startswith(("./", "../", "/")):
        # A Hub id: trainers load it themselves (compute nodes need the Hub or a shared, warm HF_HOME).
        log.info("SFT model is Hub id %s: it is loaded by the trainer from the Hub or the HF cache", model)
        return {
            "path": model,
            "step": None,
            "found_by": "sft.model (Hub id)",
            "run_dir": None,
            "checkpoint": None,
            "hf_subdir": None,
            "files": None,
            "hub_id": model,
        }
    raise DataError(f"sft.model {model!r} is neither an existing directory nor a Hub id (org/name): fix the path")


def discover_to_file(spec: dict, out_path: str, hub_manifest: str | None = None) -> dict:
    record = discover(spec, hub_manifest)
    atomic_write_json(out_path, record)
    return record


def model_path(sft_json: str) -> str:
    if not os.path.isfile(sft_json):
        raise DataError(f"{sft_json} not found: run `snakemake {sft_json}` (rule discover_sft_checkpoint) first")
    return read_json(sft_json)["path"]


def main(argv: list[str] | None = None) -> int:
    from grpoflow.joblog import guarded

    parser = argparse.ArgumentParser(prog="python -m grpoflow.discovery", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_path = sub.add_parser("path", help="print the model path recorded in an sft.json")
    p_path.add_argument("sft_json")
    p_find = sub.add_parser("find", help="discover the checkpoint of an SFT run dir and print its record")
    p_find.add_argument("run_dir")
    p_find.add_argument("--hf-subdir", default="huggingface")
    args = parser.parse_args(argv)
    if args.cmd == "path":
        print(guarded(model_path, args.sft_json, what="grpoflow.discovery path"))
    else:
        record = guarded(
            discover,
            {"run_dir": args.run_dir, "hf_subdir": args.hf_subdir, "step": "latest"},
            what="grpoflow.discovery find",
        )
        print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
