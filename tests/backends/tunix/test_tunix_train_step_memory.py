"""Recipe 003's Tunix train step as XLA compiles it (CPU), against the TPU memory estimate's optimizer-step phase.

Recipe 003's config, resolved as a job resolves it with a one-layer narrow Qwen3 declared (``architecture``) on a
one-chip TPU, gives the estimate; the Tunix environment compiles Tunix's own ``PeftTrainer._train_step`` (GRPO loss,
gradient, ``nnx.Optimizer.update`` with the optimizer grpoflow's runner builds) under the jit Tunix gives it
(``nnx.jit(..., donate_argnames=("optimizer",))``) for the same model and config, from abstract shapes
(``benchmarks/tunix_memory.py --train-step``'s function; its Qwen3-8B figures are in docs/backends.md). XLA holds the
fp32 weights and AdamW's two moments as arguments (12 B per weight), updates the moments in place (8 B aliased) and
writes the new weights to buffers of their own (4 B: the model is not donated); the whole step's peak is what the
estimate's actor + AdamW + gradient + step-temporary terms count (20 B per weight) within 5 %. ~10 s.
"""

from __future__ import annotations

import copy
import json

import pytest
from grpoflow_testing import load_shipped
from tunixkit import run_tunix

from grpoflow.backends.tunix import memory
from grpoflow.backends.verl.memory import architecture
from grpoflow.config import resolve_config

RECIPE = "config/qwen3-8b-gsm8k-tunix.yaml"
NAME = "qwen3-8b-gsm8k-tunix"
# One decoder layer, narrow, a small vocabulary, short sequences: the weights (8.1 M) outweigh the activations, as
# they do at Qwen3-8B's sizes in the optimizer step.
TINY = {
    "name": "tiny-qwen3",
    "hidden_size": 512,
    "num_layers": 1,
    "num_attention_heads": 4,
    "num_kv_heads": 2,
    "head_dim": 128,
    "intermediate_size": 2048,
    "vocab_size": 4096,
    "tie_word_embeddings": False,
}
# The estimate's terms that lie outside the train step's program.
OUTSIDE_THE_STEP = ("reference", "runtime", "vLLM (util × HBM)")

COMPILE = """
import json, sys
sys.path.insert(0, "benchmarks")
import jax.numpy as jnp
from tunix.models.qwen3 import model as qm
from tunix_memory import train_step_sizes
exp, a = json.loads(sys.argv[1]), json.loads(sys.argv[2])
cfg = qm.ModelConfig(num_layers=a["num_layers"], vocab_size=a["vocab_size"], embed_dim=a["hidden_size"],
                     hidden_dim=a["intermediate_size"], num_heads=a["num_attention_heads"], head_dim=a["head_dim"],
                     num_kv_heads=a["num_kv_heads"], rope_theta=1e6, norm_eps=1e-6)
dtypes = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
cfg.dtype, cfg.param_dtype = dtypes[exp["tunix"]["compute_dtype"]], dtypes[exp["tunix"]["param_dtype"]]
cfg.remat_config = qm.RematConfig[exp["tunix"]["remat"].upper()]
print(json.dumps(train_step_sizes(exp, cfg, exp["grpo"]["max_prompt_length"], exp["grpo"]["max_response_length"])))
"""


def test_the_compiled_train_step_holds_what_the_estimates_optimizer_step_counts():
    raw = copy.deepcopy(load_shipped(RECIPE))
    raw["defaults"]["architecture"] = {k: v for k, v in TINY.items() if k != "name"}
    raw["defaults"]["tunix"].update(tpu="v5e-1", mesh={"fsdp": -1, "tp": 1})
    raw["defaults"]["grpo"].update(max_prompt_length=16, max_response_length=16)
    exp = resolve_config(raw).experiment(NAME)
    b = memory.estimate(NAME, exp)
    assert b.mesh == (1, 1)
    step = next(p for p in b.phases if p.name == "optimizer step")
    held = {k: v * 2**30 for k, v in step.terms.items() if k not in OUTSIDE_THE_STEP and v}
    assert set(held) == {"actor params", "AdamW state", "grads", "step temp"}

    proc = run_tunix(["-c", COMPILE, json.dumps({"grpo": exp["grpo"], "tunix": exp["tunix"]}), json.dumps(TINY)])
    xla = json.loads(proc.stdout.strip().splitlines()[-1])
    weights = xla["weights"]
    arch = architecture(exp)[0]
    assert weights == arch.params  # the estimate counts the weights Tunix's Qwen3 has
    # Per fp32 weight (a few bytes over for the step count, the inputs, the loss and its metrics):
    assert xla["args"] / weights == pytest.approx(12, abs=0.01)  # weights + AdamW's two moments
    assert xla["alias"] / weights == pytest.approx(8, abs=0.01)  # the donated moments, updated in place
    assert (xla["out"] - xla["alias"]) / weights == pytest.approx(4, abs=0.01)  # new weights: the model is not donated
    assert xla["peak"] == pytest.approx(sum(held.values()), rel=0.05)
