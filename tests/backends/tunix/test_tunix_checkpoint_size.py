"""Issue 30 (disk), item 4: the size grpoflow.preflight's disk check counts for one Tunix checkpoint is what Tunix
writes. A Qwen3 of ~5.7 M parameters (random weights, fp32) is loaded as the runner loads it, given the runner's
AdamW (recipe 003's settings) as Tunix's trainer wraps it (``nnx.Optimizer(model, tx, wrt=nnx.Param)``), stepped
once, and saved by Tunix's own CheckpointManager with the call its trainer makes; the Orbax step dir is measured
(~17 s)."""

from __future__ import annotations

import json
import os
import subprocess

from grpoflow_testing import load_shipped, require
from tunixkit import require_tunix, tunix_env

from grpoflow.config import resolve_config
from grpoflow.preflight import checkpoint_bytes, existing_bytes

SAVE = """
import json, sys
import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from flax import nnx
from tunix.sft.checkpoint_manager import CheckpointManager

from grpoflow.backends.tunix import qwen3
from grpoflow.backends.tunix.runner import _optimizer

model_dir, out, grpo, tunix = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
model = qwen3.load(model_dir, mesh, tunix["param_dtype"], tunix["compute_dtype"])
optimizer = nnx.Optimizer(model, _optimizer(grpo, tunix), wrt=nnx.Param)
# One optimizer step on a language-model loss, so AdamW's moments hold what a trained run's do (zeros before it,
# which Orbax's compression shrinks to nothing).
tokens = jnp.arange(16, dtype=jnp.int32)[None] % 97
mask = jnp.tril(jnp.ones((1, 16, 16), dtype=bool))


def loss(m):
    logits, _ = m(tokens, jnp.arange(16)[None], None, mask)
    logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32))
    return -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1))


optimizer.update(model, nnx.grad(loss)(model))
manager = CheckpointManager(out, ocp.CheckpointManagerOptions(save_interval_steps=1, max_to_keep=4))
manager.save(1, model, optimizer, save_only_lora_params=False, force=True)
manager.close()
"""


def test_a_tunix_checkpoint_is_the_size_the_disk_check_counts(tmp_path):
    require_tunix()
    require("transformers")
    from transformers import Qwen3Config, Qwen3ForCausalLM

    model_dir = tmp_path / "qwen3-small"
    config = Qwen3Config(
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        vocab_size=4096,
        tie_word_embeddings=False,
        max_position_embeddings=512,
    )
    Qwen3ForCausalLM(config).save_pretrained(model_dir)

    raw = load_shipped("config/qwen3-8b-gsm8k-tunix.yaml")
    cfg = resolve_config(raw)
    exp = dict(cfg.experiment(next(iter(cfg.experiments))))
    exp["sft"] = {**exp["sft"], "model": str(model_dir)}  # the architecture from its config.json
    exp["tunix"] = {**exp["tunix"], "compute_dtype": "float32"}  # CPU
    counted, how = checkpoint_bytes(exp)
    assert how == "qwen3-small (sft.model's config.json), float32 params + AdamW state, Orbax"

    out = tmp_path / "checkpoints"
    proc = subprocess.run(
        [
            require_tunix(),
            "-c",
            SAVE,
            str(model_dir),
            str(out),
            json.dumps(exp["grpo"]),
            json.dumps(exp["tunix"]),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=tunix_env(),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    written = existing_bytes(str(out / "1"))
    assert os.path.isdir(out / "1" / "model_params") and os.path.isdir(out / "1" / "optimizer_state")
    # Orbax compresses each tensor (zstd, its default): the count (12 B a parameter, uncompressed) is an upper bound.
    # What compresses here is mostly AdamW's moments of the embedding rows no token touched (exact zeros), as in a
    # real run's unused vocabulary; fp32 weights and moments barely do. Measured: 50.6 of 62.9 MB (80 %).
    assert 0.7 * counted < written <= counted, (written, counted)
