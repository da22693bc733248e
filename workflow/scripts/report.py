"""Rule report (not implemented yet: issue #6)."""

from grpoflow.workflow import not_implemented

not_implemented(snakemake, issue=6)  # noqa: F821 (snakemake is injected by the script directive)
