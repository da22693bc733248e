"""Rule evaluate: one model on one benchmark -> results/{model}/eval/{benchmark}.json + .samples.jsonl."""

from grpoflow.evaluation.run import evaluate
from grpoflow.workflow import run_job

run_job(
    snakemake,  # noqa: F821 (injected by the script directive)
    evaluate,
    model_name=snakemake.wildcards.model,  # noqa: F821
    model=snakemake.params.model,  # noqa: F821
    benchmark_name=snakemake.wildcards.benchmark,  # noqa: F821
    benchmark=snakemake.params.benchmark,  # noqa: F821
    prompt=snakemake.params.benchmark_prompt,  # noqa: F821
    settings=snakemake.params.settings,  # noqa: F821
    inputs=dict(snakemake.input.items()),  # noqa: F821
    metrics_path=snakemake.output.metrics,  # noqa: F821
    samples_path=snakemake.output.samples,  # noqa: F821
    threads=snakemake.threads,  # noqa: F821
)
