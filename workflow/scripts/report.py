"""Rule report: results/report/summary.{md,csv}, comparisons.csv and plots/*.png from the run's own files."""

from grpoflow.report import build_report
from grpoflow.workflow import run_job

run_job(
    snakemake,  # noqa: F821 (injected by the script directive)
    build_report,
    evaluations=list(snakemake.input.evaluations),  # noqa: F821
    training=list(snakemake.input.training),  # noqa: F821
    experiments=snakemake.params.experiments,  # noqa: F821
    models=snakemake.params.models,  # noqa: F821
    benchmarks=snakemake.params.benchmarks,  # noqa: F821
    settings=snakemake.params.settings,  # noqa: F821
    summary_path=snakemake.output.summary,  # noqa: F821
    table_path=snakemake.output.table,  # noqa: F821
    plots_dir=snakemake.output.plots,  # noqa: F821
    comparisons_path=snakemake.output.comparisons,  # noqa: F821
    seed_groups=snakemake.params.seed_groups,  # noqa: F821
    rewards=snakemake.params.rewards,  # noqa: F821
)
