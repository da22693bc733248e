# The cross-experiment report and the optional Hub upload.


rule report:
    input:
        evaluations=CFG.eval_targets(),
        # The paired statistics read every problem's verdict from the per-sample files.
        samples=[samples_path(p) for p in CFG.eval_targets()],
        training=[f"results/{e}/train_metrics.jsonl" for e in CFG.experiments],
    output:
        summary=report(
            "results/report/summary.md",
            caption="../workflow/report/summary.rst",
            category="Summary",
        ),
        table=report(
            "results/report/summary.csv",
            caption="../workflow/report/summary.rst",
            category="Summary",
        ),
        comparisons=report(
            "results/report/comparisons.csv",
            caption="../workflow/report/comparisons.rst",
            category="Summary",
        ),
        plots=report(
            directory("results/report/plots"),
            patterns=["{name}.png"],
            caption="../workflow/report/plots.rst",
            category="Plots",
        ),
    log:
        "logs/report.log",
    localrule: True
    conda:
        ENV_LOCAL
    params:
        experiments=lambda wc: {e: report_experiment_summary(e) for e in CFG.experiments},
        models=lambda wc: CFG.models,
        benchmarks=lambda wc: list(CFG.evaluation["benchmarks"]),
        settings=lambda wc: CFG.report,
        seed_groups=lambda wc: report_seed_groups(),
        rewards=lambda wc: {e: report_experiment_rewards(e) for e in CFG.experiments},
    script:
        "../workflow/scripts/report.py"


rule upload_to_hub:
    input:
        model="results/{experiment}/model",
        marker="results/{experiment}/training_complete.json",
        # The model card's metrics table; only when uploading, so that with upload off an evaluation-only change
        # reruns evaluate + report and nothing else (switching upload on then reruns just this job).
        evaluations=lambda wc: (
            [f"results/{wc.experiment}/eval/{b}.json" for b in CFG.benchmarks()]
            if exp(wc)["upload"]["enabled"]
            else []
        ),
    output:
        record="results/{experiment}/upload.json",
    log:
        "logs/upload_to_hub/{experiment}.log",
    localrule: True  # needs internet, which compute nodes often lack
    conda:
        ENV_LOCAL
    params:
        upload=lambda wc: exp(wc)["upload"],
        experiment=lambda wc: exp(wc),
        # Only when uploading: with upload off, adding a benchmark must not rerun upload_to_hub.
        card=lambda wc: (upload_card_sources(wc.experiment) if exp(wc)["upload"]["enabled"] else {}),
    script:
        "../workflow/scripts/upload_to_hub.py"
