"""Rule train_sft_demo (not implemented yet: issue #4)."""

from grpoflow.workflow import not_implemented

not_implemented(snakemake, issue=4)  # noqa: F821 (snakemake is injected by the script directive)
