"""Rule merge_checkpoint (not implemented yet: issue #5)."""

from grpoflow.workflow import not_implemented

not_implemented(snakemake, issue=5)  # noqa: F821 (snakemake is injected by the script directive)
