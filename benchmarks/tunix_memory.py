"""What XLA keeps for Tunix's GRPO update, measured on CPU, against grpoflow.backends.tunix.memory's constants; and
Tunix 0.1.7's flash attention against its plain attention (trainer path and sampler prefill).

Run in the Tunix environment (no TPU needed; ~4 minutes on two loaded cores):

    JAX_PLATFORMS=cpu .venv-tunix/bin/python benchmarks/tunix_memory.py               # parts 1 and 2
    JAX_PLATFORMS=cpu .venv-tunix/bin/python benchmarks/tunix_memory.py --train-step  # part 3 only (~1 minute)

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
3. ``--train-step``: XLA's buffer assignment of Tunix's whole train step for recipe 003 (its resolved config:
   fp32 weights and AdamW moments, bf16 activations, decoder remat, 1 prompt × 2 completions; grpoflow's optimizer
   from ``backends/tunix/runner._optimizer``: clip_by_global_norm + adamw under inject_hyperparams, no MultiSteps
   since grpoflow sets no micro-batch): ``PeftTrainer._train_step`` itself (GRPO loss + gradient, global norm,
   ``nnx.Optimizer.update``) under ``nnx.jit(..., donate_argnames=("optimizer",))`` as
   ``PeftTrainer.jit_train_and_eval_step`` jits it, at Qwen3-8B's widths and full vocabulary, 2 and 4 layers, on
   one device and on four CPU devices with the recipe's v5p-8 mesh (fsdp 1 × tp 4, every state placed as Tunix's
   loader places the weights; the SPMD-partitioned program's sizes are per device), for 16 + 16 tokens (the states
   alone) and the recipe's 256 + 1,024. Only the optimizer is donated: the model's weights are not, so the new
   weights get output buffers of their own. What must be resident at once is arguments + outputs - aliased +
   temporaries; it is compared with the terms of the estimate's optimizer-step and update phases that the step
   holds (the reference and the runtime reserve lie outside it), per layer and at 36 layers. XLA:CPU is not
   XLA:TPU (its fusion, scheduling and buffer assignment differ; it does not honour remat, see 1).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import os
import sys
import types
from dataclasses import asdict
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Part 3 also compiles for recipe 003's mesh on its v5p-8 (fsdp 1 × tp 4): four CPU devices, set before JAX starts.
TRAIN_STEP_DEVICES = 4
if "--train-step" in sys.argv:
    os.environ["XLA_FLAGS"] = (
        f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={TRAIN_STEP_DEVICES}"
    )

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import yaml  # noqa: E402
from flax import nnx  # noqa: E402
from tunix.models.qwen3 import model as qm  # noqa: E402
from tunix.rl import algo_core, common  # noqa: E402
from tunix.rl.grpo import grpo_learner  # noqa: E402
from tunix.sft import peft_trainer  # noqa: E402

from grpoflow.backends.tunix import memory  # noqa: E402
from grpoflow.backends.tunix.runner import _optimizer, algo_config  # noqa: E402
from grpoflow.backends.verl.memory import GIB, PRESETS  # noqa: E402
from grpoflow.config import resolve_config  # noqa: E402

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


RECIPE = Path(__file__).resolve().parents[1] / "config" / "qwen3-8b-gsm8k-tunix.yaml"
RECIPE_NAME = "qwen3-8b-gsm8k-tunix"


def train_step_sizes(exp: dict, cfg, prompt: int, response: int, mesh=None) -> dict[str, int]:
    """memory_analysis() of Tunix's whole train step (loss, gradient, optimizer update) for ``exp``'s optimizer and
    GRPO settings, from abstract shapes: argument, output, alias and temp bytes, the peak (per device when ``mesh``
    shards it as Tunix's model sharding does) and the weights' count (whole)."""
    grpo, tunix = exp["grpo"], exp["tunix"]
    tx = _optimizer(grpo, tunix)

    def build():
        model = qm.Qwen3(cfg, rngs=nnx.Rngs(0))
        return model, nnx.Optimizer(model, tx, wrt=nnx.Param)  # as PeftTrainer.__init__ builds it (no LoRA)

    model, optimizer = nnx.eval_shape(build)
    if mesh is not None:
        # Every state placed as Tunix's loader places the weights (safetensors_loader: nnx.get_named_sharding of the
        # abstract model); AdamW's moments carry their weights' sharding, as after PeftTrainer._shard_optimizer.
        for node in (model, optimizer):
            state = nnx.state(node)
            placed = jax.tree.map(
                lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                state,
                nnx.get_named_sharding(state, mesh),
            )
            nnx.update(node, placed)
    algo = algo_config(grpo, tunix)  # the job's own (grpoflow.backends.tunix.runner)
    algo.temperature = grpo["temperature"]  # as GRPOLearner.__init__ sets it from the rollout config
    # Stands in for the actor's rl.trainer.Trainer instance: the four attributes PeftTrainer._train_step reads, as
    # GRPOLearner.__init__ sets them (with_loss_fn(..., has_aux=True), with_gen_model_input_fn) for a full fine-tune;
    # the step itself is Tunix's own.
    trainer = types.SimpleNamespace(
        loss_fn=lambda model, train_example, algo_config: algo_core.grpo_loss_fn(
            model, train_example, algo_config=algo_config, pad_id=0, eos_id=1
        ),
        gen_model_input_fn=lambda x: {"train_example": x, "algo_config": algo},
        _lora_enabled=False,
        _has_aux=True,
    )

    def train_step(model, optimizer, inputs):
        return peft_trainer.PeftTrainer._train_step(trainer, model, optimizer, inputs)

    n, shape = grpo["prompts_per_step"] * grpo["num_generations"], jax.ShapeDtypeStruct
    example = common.TrainExample(
        prompt_ids=shape((n, prompt), jnp.int32),
        prompt_mask=shape((n, prompt), jnp.int32),
        completion_ids=shape((n, response), jnp.int32),
        completion_mask=shape((n, response), jnp.int32),
        advantages=shape((n,), jnp.float32),
        ref_per_token_logps=shape((n, response), jnp.float32),
        old_per_token_logps=None,
    )
    jitted = nnx.jit(train_step, donate_argnames=("optimizer",))  # PeftTrainer.jit_train_and_eval_step's jit
    # Tunix's model code constrains activations through the legacy mesh context, as in flash_attention() below.
    with mesh if mesh is not None else contextlib.nullcontext():
        m = jitted.lower(model, optimizer, example).compile().memory_analysis()
    sizes = {
        "args": m.argument_size_in_bytes,
        "out": m.output_size_in_bytes,
        "alias": m.alias_size_in_bytes,
        "temp": m.temp_size_in_bytes,
    }
    sizes["peak"] = sizes["args"] + sizes["out"] - sizes["alias"] + sizes["temp"]
    sizes["weights"] = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    return sizes


# The estimate's terms that lie outside the train step's program: the reference model, the runtime reserve, vLLM.
OUTSIDE_THE_STEP = ("reference", "runtime", "vLLM (util × HBM)")


def estimate_held(exp: dict, tpu, mesh: dict, layers: int, phase: str, tokens: tuple[int, int], remat: str) -> dict:
    """The terms (bytes per chip) of the estimate's ``phase`` that the train step holds, for Qwen3-8B with
    ``layers`` layers on ``tpu`` with ``mesh``, sequences of ``tokens`` (prompt, response) and ``remat``."""
    one = copy.deepcopy(exp)
    arch = asdict(PRESETS["qwen3-8b"])
    arch.pop("name")
    one["architecture"] = {**arch, "num_layers": layers}
    one["tunix"].update(mesh=mesh, remat=remat)
    one["grpo"].update(max_prompt_length=tokens[0], max_response_length=tokens[1])
    terms = next(p for p in memory.estimate(RECIPE_NAME, one, tpu).phases if p.name == phase).terms
    return {k: v * GIB for k, v in terms.items() if k not in OUTSIDE_THE_STEP and v}


def train_step() -> None:
    exp = resolve_config(yaml.safe_load(RECIPE.read_text())).experiment(RECIPE_NAME)
    tunix, grpo = exp["tunix"], exp["grpo"]
    dtypes = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
    tpu = memory.TPUS[tunix["tpu"]]
    fsdp, tp = memory.mesh_shape(tunix, tpu.chips)
    assert jax.device_count() == tpu.chips == fsdp * tp, (jax.device_count(), tpu)

    def cfg(layers: int):
        c = qm.ModelConfig.qwen3_8b()
        c.num_layers, c.remat_config = layers, qm.RematConfig[tunix["remat"].upper()]
        c.dtype, c.param_dtype = dtypes[tunix["compute_dtype"]], dtypes[tunix["param_dtype"]]
        return c

    n, layers = grpo["prompts_per_step"] * grpo["num_generations"], PRESETS["qwen3-8b"].num_layers
    print(
        f"Tunix's whole train step for recipe 003 (param {tunix['param_dtype']}, compute {tunix['compute_dtype']}, "
        f"remat {tunix['remat']}, {n} sequences; the optimizer donated, the model not), Qwen3-8B widths, XLA:CPU; "
        "peak = args + out - alias + temp, per device; B per weight = per device / the device's share of the weights:"
    )
    axes = (jax.sharding.AxisType.Auto,) * 2
    runs = (
        ("one device", None, memory.Tpu("one device", 1, 10_000), {"fsdp": 1, "tp": 1}),
        (
            f"{tpu.chips} devices, recipe 003's {tpu.name} mesh fsdp {fsdp} × tp {tp}",
            jax.make_mesh((fsdp, tp), ("fsdp", "tp"), axis_types=axes),
            tpu,
            tunix["mesh"],
        ),
    )
    for label, mesh, chip, mesh_cfg in runs:
        share = 1 if mesh is None else mesh.size
        for tokens in ((16, 16), (grpo["max_prompt_length"], grpo["max_response_length"])):
            two, four = (train_step_sizes(exp, cfg(k), *tokens, mesh=mesh) for k in (2, 4))
            layer = {k: (four[k] - two[k]) / 2 for k in two}
            fixed = {k: two[k] - 2 * layer[k] for k in two}
            print(f"  {label}, {tokens[0]} + {tokens[1]} tokens:")
            for name, d in (("2 layers", two), ("4 layers", four), ("per layer", layer), ("fixed part", fixed)):
                per = ", ".join(
                    f"{k} {d[k] * share / d['weights']:.2f}" for k in ("args", "out", "alias", "temp", "peak")
                )
                print(
                    f"    {name}: args {d['args'] / GIB:.2f} GiB, out {d['out'] / GIB:.2f}, alias "
                    f"{d['alias'] / GIB:.2f}, temp {d['temp'] / GIB:.2f}, peak {d['peak'] / GIB:.3f}; "
                    f"{d['weights'] / 1e6:.1f} M weights: {per} B per weight"
                )
            measured = fixed["peak"] + layers * layer["peak"]
            # XLA:CPU keeps every layer's activations whatever the remat (see activations()): the update phase is
            # compared as the estimate counts it without remat.
            for phase, remat in (("optimizer step", tunix["remat"]), ("update", "none")):
                held = {k: estimate_held(exp, chip, mesh_cfg, k, phase, tokens, remat) for k in (2, 4, layers)}
                est_layer = (sum(held[4].values()) - sum(held[2].values())) / 2
                estimated = sum(held[layers].values())
                terms = " + ".join(f"{k} {v / GIB:.2f}" for k, v in held[layers].items())
                print(
                    f"    estimate's {phase} (remat {remat}): per layer {est_layer / GIB:.3f} GiB, XLA:CPU "
                    f"{(layer['peak'] - est_layer) / est_layer:+.1%}; {layers} layers + embeddings: {terms} = "
                    f"{estimated / GIB:.2f} GiB, XLA:CPU {measured / GIB:.2f} GiB "
                    f"({(measured - estimated) / estimated:+.1%})"
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-step", action="store_true", help="part 3 only: Tunix's whole train step")
    args = parser.parse_args()
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}")
    if args.train_step:
        train_step()
    else:
        activations()
        flash_attention()
