"""What XLA keeps for Tunix's GRPO update, measured on CPU, against grpoflow.backends.tunix.memory's constants; and
Tunix 0.1.7's flash attention against its plain attention (trainer path and sampler prefill).

Run in the Tunix environment (no TPU needed; ~4 minutes on two loaded cores):

    JAX_PLATFORMS=cpu .venv-tunix/bin/python benchmarks/tunix_memory.py

1. XLA's buffer assignment (``compiled.memory_analysis().temp_size_in_bytes``) of Tunix's own GRPO loss and its
   gradient (``tunix.rl.algo_core.grpo_loss_fn`` under ``jax.value_and_grad``, as ``PeftTrainer._train_step`` runs
   it) for Tunix's Qwen3 at Qwen3-8B's widths, fp32 weights, bf16 activations, one sequence, from abstract shapes
   (nothing is allocated). The per-layer cost is the difference between 4 and 2 layers; its growth with the
   sequence length splits into a per-token part and a per-attention-score part. The logits' bytes per element come
   from two vocabulary sizes of a narrow model. XLA:CPU schedules recomputation early, so remat shows no saving
   there (printed too): the estimate's remat terms are not checked here.
2. Flash attention (Pallas splash kernel, run in interpret mode on CPU) against plain attention on a random 2-layer
   Qwen3: Tunix's training path (``compute_per_token_logps``, which passes the prompts' non-pad mask as segment ids)
   agrees; its sampler's prefill does not once prompts are left-padded (it passes no segment ids), and agrees when
   they are not.
"""

from __future__ import annotations

import functools
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402
from tunix.models.qwen3 import model as qm  # noqa: E402
from tunix.rl import algo_core, common  # noqa: E402
from tunix.rl.grpo import grpo_learner  # noqa: E402

from grpoflow.backends.tunix import memory  # noqa: E402
from grpoflow.backends.verl.memory import PRESETS  # noqa: E402

MIB = 2**20


def update_temp_bytes(cfg, prompt: int, response: int) -> int:
    """XLA's temporary bytes for Tunix's GRPO loss + gradient of one sequence (abstract shapes only)."""
    graphdef, state = nnx.split(nnx.eval_shape(lambda: qm.Qwen3(cfg, rngs=nnx.Rngs(0))))
    algo = grpo_learner.GRPOConfig(num_generations=2, beta=0.08, epsilon=0.2)
    algo.temperature = 0.9
    shape = jax.ShapeDtypeStruct
    example = common.TrainExample(
        prompt_ids=shape((1, prompt), jnp.int32),
        prompt_mask=shape((1, prompt), jnp.int32),
        completion_ids=shape((1, response), jnp.int32),
        completion_mask=shape((1, response), jnp.int32),
        advantages=shape((1,), jnp.float32),
        ref_per_token_logps=shape((1, response), jnp.float32),
        old_per_token_logps=None,
    )

    def step(state, example):
        def loss(state):
            return algo_core.grpo_loss_fn(nnx.merge(graphdef, state), example, algo, pad_id=0, eos_id=1)[0]

        return jax.value_and_grad(loss)(state)

    return jax.jit(step).lower(state, example).compile().memory_analysis().temp_size_in_bytes


def qwen3_8b(layers: int, vocab: int = 1024, remat: str = "NONE", dtype=jnp.bfloat16):
    cfg = qm.ModelConfig.qwen3_8b()
    cfg.num_layers, cfg.vocab_size, cfg.remat_config = layers, vocab, qm.RematConfig[remat]
    cfg.dtype, cfg.param_dtype = dtype, jnp.float32
    return cfg


def per_layer(prompt: int, response: int, remat: str = "NONE", dtype=jnp.bfloat16) -> float:
    return (
        update_temp_bytes(qwen3_8b(4, remat=remat, dtype=dtype), prompt, response)
        - update_temp_bytes(qwen3_8b(2, remat=remat, dtype=dtype), prompt, response)
    ) / 2


def activations() -> None:
    arch = PRESETS["qwen3-8b"]
    (t1, t2), h = (512, 1280), arch.num_attention_heads
    print("Qwen3-8B widths, fp32 weights, one sequence, XLA:CPU temp bytes per decoder layer (4 layers - 2 layers):")
    for dtype, c in ((jnp.bfloat16, 2), (jnp.float32, 4)):
        short, long_ = per_layer(256, 256, dtype=dtype), per_layer(256, 1024, dtype=dtype)
        hand = memory.per_token_layer_bytes(arch, c)
        # per layer = constant + hand·T + per_score·heads·T² (the per-token part is the hand count)
        per_score = ((long_ - hand * t2) - (short - hand * t1)) / (h * (t2**2 - t1**2))
        constant = short - hand * t1 - per_score * h * t1**2
        print(
            f"  {jnp.dtype(dtype).name} activations: T = {t1}: {short / MIB:.1f} MiB, T = {t2}: {long_ / MIB:.1f} MiB;"
        )
        print(f"    with {hand} B per token (memory.per_token_layer_bytes): {per_score:.1f} B per attention score")
        print(
            f"    (memory.ATTENTION_SCORE_BYTES[{c}] = {memory.ATTENTION_SCORE_BYTES[c]}), {constant / MIB:.0f} MiB per layer"
        )
        print("    that does not grow with T")
    decoder = per_layer(256, 1024, "DECODER")
    print(f"  remat decoder, T = {t2}: {decoder / MIB:.1f} MiB per layer (XLA:CPU does not save by remat)")
    narrow = dict(num_layers=1, embed_dim=256, hidden_dim=512, num_heads=4, head_dim=64, num_kv_heads=2)
    temps = {}
    for vocab in (32768, 65536):
        cfg = qm.ModelConfig(vocab_size=vocab, rope_theta=1e6, norm_eps=1e-6, **narrow)
        cfg.dtype, cfg.param_dtype = jnp.bfloat16, jnp.float32
        temps[vocab] = update_temp_bytes(cfg, 256, 1024)
    per_logit = (temps[65536] - temps[32768]) / (32768 * 1280)
    print(f"logits: {per_logit:.2f} B per element of [sequence, prompt + response, vocab] in the update")
    print(f"  (memory: LOGIT_BYTES_TRAIN + compute bytes = {memory.LOGIT_BYTES_TRAIN + 2})")


def flash_attention() -> None:
    qm.splash.make_splash_mha = functools.partial(qm.splash.make_splash_mha, interpret=True)
    from tunix.generate import sampler as sampler_lib

    def build(flash: bool):
        cfg = qm.ModelConfig(num_layers=2, vocab_size=300, embed_dim=128, hidden_dim=256, num_heads=2, head_dim=128,
                             num_kv_heads=1, rope_theta=10000, norm_eps=1e-6, use_flash_attention=flash,
                             flash_attention_block_size=128)  # fmt: skip
        model = qm.Qwen3(cfg, rngs=nnx.Rngs(0))
        leaves, tree = jax.tree.flatten(nnx.state(model, nnx.Param))
        keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))
        nnx.update(model, jax.tree.unflatten(tree, [jax.random.normal(k, x.shape) * 0.2 for k, x in zip(keys, leaves)]))
        return model

    class Ids:  # what Tunix's TokenizerAdapter needs; the prompts are token ids
        def encode(self, text, **_):
            return list(text)

        def decode(self, ids, **_):
            return " ".join(map(str, ids))

        def bos_id(self):
            return None

        def eos_id(self):
            return 1

        def pad_id(self):
            return 0

    rng = np.random.default_rng(0)
    mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    with mesh:  # Tunix's kernels read the legacy mesh context (pxla.thread_resources), not jax.set_mesh
        plain, flash = build(False), build(True)
        prompt = np.zeros((2, 128), np.int32)
        prompt[0, 100:], prompt[1, 60:] = rng.integers(3, 300, 28), rng.integers(3, 300, 68)
        completion = rng.integers(3, 300, (2, 128)).astype(np.int32)
        logps = [
            common.compute_per_token_logps(
                *nnx.split(m), prompt_tokens=prompt, completion_tokens=completion, pad_id=0, eos_id=1
            )
            for m in (plain, flash)
        ]
        print(
            f"flash attention, training path (left-padded prompts): max |Δ log-prob| {float(jnp.abs(logps[0] - logps[1]).max()):.1e}"
        )
        for label, prompts in (
            ("left-padded prompts", [list(prompt[0, 100:]), list(prompt[1, 60:])]),
            ("unpadded prompts", [list(rng.integers(3, 300, 128))] * 2),
        ):
            outs = []
            for model in (plain, flash):
                sampler = sampler_lib.Sampler(model, Ids(), sampler_lib.CacheConfig(160, 2, 1, 128))
                sampler.tokenize = lambda ids: np.asarray(ids, np.int32)
                out = sampler(prompts, max_generation_steps=16, max_prompt_length=128, eos_tokens=[1])
                outs.append([list(map(int, t)) for t in out.tokens])
            print(
                f"flash attention, sampler prefill, {label}: greedy tokens {'equal' if outs[0] == outs[1] else 'DIFFER'}"
            )


if __name__ == "__main__":
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}")
    activations()
    flash_attention()
