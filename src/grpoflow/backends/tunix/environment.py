"""What the Tunix backend's jobs import, found in the Tunix environment's interpreter before anything loads
(grpoflow.envcheck.Check): its training job Tunix and JAX, its merge Tunix's Qwen3 and Orbax, its generator Tunix and
JAX.
"""

from __future__ import annotations

from grpoflow.envcheck import HOW_TO_PICK_TUNIX, Check

TUNIX = ("tunix", "google-tunix==0.1.7")
JAX = ("jax", "jax")
ORBAX = ("orbax.checkpoint", "orbax-checkpoint")

TRAIN = Check("train_grpo (backend tunix)", ((*TUNIX, "backend: tunix"), (*JAX, "backend: tunix")), HOW_TO_PICK_TUNIX)
MERGE = Check(
    "merge_checkpoint (backend tunix)",
    ((*TUNIX, "Tunix's Qwen3 and checkpoint manager"), (*ORBAX, "Tunix's checkpoints")),
    HOW_TO_PICK_TUNIX,
)
GENERATE = Check(
    "evaluate (backend tunix)",
    ((*TUNIX, "evaluation.backend: tunix"), (*JAX, "evaluation.backend: tunix")),
    HOW_TO_PICK_TUNIX,
)
