"""The bias grpoflow's truncated-sampling refusal guards against, measured on real log-probs
(grpoflow.backends.trl.commandline._check_importance_sampling, TRL issue 6789).

TRL 1.16 starts vLLM with ``logprobs_mode="processed_logprobs"`` (trl/generation/vllm_generation.py:361): the
sampled token's log-prob after temperature *and* the top-p/top-k mask, renormalised over the kept tokens. The
trainer's log-probs (TRL's fused LM head, ``log_softmax(logits / temperature)``) are over the whole vocabulary. TRL's
importance-sampling weight is ``exp(trainer − vLLM)`` per token (summed over the completion in its default
``sequence_mask`` mode). Untruncated, the two agree and the weight is ~1; truncated, each token's weight is the
probability mass the mask kept, below 1.

This script does what a TRL colocate step does, on the same model and tokens: vLLM (the CPU build, float32, eager,
``processed_logprobs``, as grpoflow starts it) samples completions of real prompts; transformers scores the same
tokens in float32 (``log_softmax(logits / T)``); it prints, per sampling setting, the token-level ratio's mean,
standard deviation, 5th percentile and minimum, and the sequence-level ratio's mean.

    # in the vLLM CPU environment, with a demo SFT checkpoint and the arith prompts:
    python benchmarks/is_ratio_truncation.py --model resources/demo/sft-run/global_step_N/huggingface \\
        --prompts results/data/arith/val.parquet

Seconds to a couple of minutes on a 2-core machine (one engine start, a few hundred completions).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

# (label, top_p, top_k) in the order printed; top_k 0 is TRL's "no top-k".
SETTINGS = [
    ("top_p 1, top_k off", 1.0, 0),
    ("top_p 0.95", 0.95, 0),
    ("top_p 0.9", 0.9, 0),
    ("top_p 0.7", 0.7, 0),
    ("top_k 50", 1.0, 50),
    ("top_k 20", 1.0, 20),
    ("top_k 5", 1.0, 5),
]


def prompts_from(parquet: str, tokenizer, limit: int) -> list[list[int]]:
    """The RL Parquet's chat prompts rendered with the model's chat template, as TRL renders them."""
    import pyarrow.parquet as pq

    rows = pq.read_table(parquet).to_pylist()[:limit]
    return [
        tokenizer.apply_chat_template(list(r["prompt"]), add_generation_prompt=True, tokenize=True, return_dict=False)
        for r in rows
    ]


def trainer_logps(model, prompt: list[int], completion: list[int], temperature: float) -> list[float]:
    """The sampled tokens' log-probs as TRL's trainer computes them: log_softmax(logits / T) over the vocabulary."""
    import torch

    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    logps = torch.log_softmax(logits, dim=-1)
    return logps[torch.arange(len(completion)), torch.tensor(completion)].tolist()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered))))]


def measure(llm, model, prompts, args) -> list[tuple]:
    from vllm import SamplingParams

    rows = []
    for label, top_p, top_k in SETTINGS:
        params = SamplingParams(
            n=args.generations,
            temperature=args.temperature,
            top_p=top_p,
            top_k=top_k,
            max_tokens=args.max_tokens,
            logprobs=0,
            seed=args.seed,
        )
        outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        token_ratios, seq_ratios = [], []
        for prompt, out in zip(prompts, outputs):
            for sample in out.outputs:
                ids = list(sample.token_ids)
                if not ids:
                    continue
                sampled = [lp[t].logprob for lp, t in zip(sample.logprobs, ids)]
                ours = trainer_logps(model, list(prompt), ids, args.temperature)
                diffs = [a - b for a, b in zip(ours, sampled)]
                token_ratios += [math.exp(d) for d in diffs]
                seq_ratios.append(math.exp(sum(diffs)))
        rows.append(
            (
                label,
                len(seq_ratios),
                len(token_ratios),
                statistics.fmean(token_ratios),
                statistics.pstdev(token_ratios),
                percentile(token_ratios, 0.05),
                min(token_ratios),
                statistics.fmean(seq_ratios),
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a Hugging Face model dir with its tokenizer")
    parser.add_argument("--prompts", required=True, help="an RL Parquet (results/data/<dataset>/<split>.parquet)")
    parser.add_argument("--limit", type=int, default=32, help="prompts")
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt and setting")
    parser.add_argument("--temperature", type=float, default=0.7, help="the demo's grpo.temperature")
    parser.add_argument("--max-tokens", type=int, default=32, help="the demo's grpo.max_response_length")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from vllm import LLM

    torch.manual_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    prompts = prompts_from(args.prompts, tokenizer, args.limit)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    started = time.time()
    # As grpoflow starts TRL's colocated engine on the CPU (grpoflow.backends.trl.vllm_engine.engine_kwargs) and as
    # TRL sets its log-probs (vllm_generation.py:361).
    llm = LLM(
        model=args.model,
        dtype="float32",
        enforce_eager=True,
        logprobs_mode="processed_logprobs",
        max_model_len=max(len(p) for p in prompts) + args.max_tokens,
        seed=args.seed,
    )
    rows = measure(llm, model, prompts, args)
    print(
        f"\n{Path(args.model).name}: {len(prompts)} prompts x {args.generations} completions, temperature "
        f"{args.temperature:g}, <= {args.max_tokens} tokens; {time.time() - started:.0f} s\n"
    )
    print("| sampling | completions | tokens | token ratio mean | sd | 5th pct | min | sequence ratio mean |")
    print("|---|---|---|---|---|---|---|---|")
    for label, n_seq, n_tok, mean, sd, p5, low, seq in rows:
        print(f"| {label} | {n_seq} | {n_tok} | {mean:.4f} | {sd:.4f} | {p5:.4f} | {low:.4f} | {seq:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
