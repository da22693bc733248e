# grpoflow: GRPO reinforcement learning of math-reasoning LLMs, one reproducible DAG.
#
#   download_data -> convert_to_parquet -> discover_sft_checkpoint -> train_grpo -> merge_checkpoint
#     -> evaluate (SFT start and GRPO result) -> report   (+ upload_to_hub when enabled)
#
# All logic lives in the grpoflow package (src/grpoflow); rules only wire files to library calls.
# See README.md for running locally, on SLURM, and rerunning only evaluation.

from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "rules/common.smk"


rule all:
    default_target: True
    input:
        all_targets(),


include: "rules/data.smk"
include: "rules/demo.smk"
include: "rules/train.smk"
include: "rules/evaluate.smk"
include: "rules/report.smk"
