"""grpoflow: GRPO reinforcement learning of math-reasoning LLMs as a reproducible Snakemake workflow.

All logic lives in this package; the Snakemake rules and ``workflow/scripts`` only call into it.
"""

__version__ = "0.1.0"
