"""The embedded demo's own code (rules/demo.smk): a tiny Qwen3 model and tokenizer built from config
(``tiny``), and the SFT run GRPO starts from (``sft``). Nothing outside the demo and the tests uses it."""
