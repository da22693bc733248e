"""Rule build_tiny_model: the demo's tiny Qwen3 model and locally trained tokenizer (nothing downloaded)."""

from grpoflow.demo.tiny import build_tiny_model
from grpoflow.workflow import run_job

run_job(
    snakemake,  # noqa: F821 (injected by the script directive)
    build_tiny_model,
    spec=snakemake.params.spec,  # noqa: F821
    corpus_parquet=snakemake.input.corpus,  # noqa: F821
    out_dir=snakemake.output.model,  # noqa: F821
)
