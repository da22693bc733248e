# The embedded demo only: a tiny Qwen3 model and an SFT run dir laid out like a real one.
# Cluster configs have no `demo:` section; their SFT run dir comes from the user.

if CFG.demo:

    rule build_tiny_model:
        input:
            corpus=parquet(CFG.demo["sft"]["dataset"], CFG.demo["sft"]["split"]),
        output:
            model=directory(DEMO_MODEL_DIR),
        log:
            "logs/build_tiny_model.log",
        conda:
            ENV_LOCAL
        params:
            spec=CFG.demo["tiny_model"],
        script:
            "../workflow/scripts/build_tiny_model.py"

    rule train_sft_demo:
        input:
            unpack(demo_sft_inputs),
        output:
            run_dir=directory(DEMO_SFT_RUN_DIR),
        log:
            "logs/train_sft_demo.log",
        conda:
            ENV_LOCAL
        threads: 2
        params:
            spec=CFG.demo["sft"],
        script:
            "../workflow/scripts/train_sft_demo.py"
