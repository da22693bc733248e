# grpoflow: GRPO reinforcement learning of math-reasoning LLMs, one reproducible DAG.
#
#   download_data -> convert_to_parquet -> discover_sft_checkpoint -> train_grpo -> merge_checkpoint
#     -> evaluate (SFT start and GRPO result) -> report   (+ upload_to_hub when enabled)
#
# All logic lives in the grpoflow package (src/grpoflow); rules only wire files to library calls.
# See README.md for running locally, on SLURM, and rerunning only evaluation.

import os
import sys

from snakemake.utils import min_version

min_version("9.0")

# The library is imported from this checkout, here and in every job (also inside per-rule conda envs that do
# not install it), so the code that runs is always the code you see.
_SRC = os.path.join(workflow.basedir, "src")
sys.path.insert(0, _SRC)
os.environ.update(PYTHONPATH=os.pathsep.join(p for p in (_SRC, os.environ.get("PYTHONPATH")) if p))
# PATH is left alone: each job names its interpreter explicitly (grpoflow.deployment), so what runs in a job
# never depends on what the submitter's PATH or activated venv happened to be.


# The embedded default, unless --configfile names another: Snakemake would otherwise *merge* both, and a
# cluster run would inherit the demo's experiments.
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


include: "rules/common.smk"


print_training_summaries()


onstart:
    preflight()


rule all:
    default_target: True
    input:
        all_targets(),


include: "rules/data.smk"
include: "rules/demo.smk"
include: "rules/train.smk"
include: "rules/evaluate.smk"
include: "rules/report.smk"
