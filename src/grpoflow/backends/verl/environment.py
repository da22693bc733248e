"""What verl's jobs import, found in their interpreter before anything starts (grpoflow.envcheck): the merge verl's
model merger; the training job what ``main_ppo`` imports with the experiment's overrides: verl, TransferQueue (verl's
default ``trainer.use_v1``), vLLM (its default rollout) and flash-attn (its default attention).
"""

from __future__ import annotations

from grpoflow.envcheck import VLLM, Check

VERL = ("verl", "verl==0.9.1")

TRANSFER_QUEUE = ("transfer_queue", "TransferQueue (verl[vllm])")
FLASH_ATTN = ("flash_attn", "flash-attn")
JOB = "train_grpo (backend verl)"
# verl's model merger, in the cluster interpreter.
MERGE = Check("merge_checkpoint (backend verl)", ((*VERL, "verl's model merger"),))


def training_needs(overrides: dict[str, str]) -> list[tuple[str, str, str]]:
    """What ``python -m verl.trainer.main_ppo`` with these overrides imports: (module, package, why)."""
    needs = [(*VERL, "the trainer")]
    if overrides.get("trainer.use_v1", "true").lower() == "true":
        needs.append((*TRANSFER_QUEUE, "verl's default trainer.use_v1=true"))
    rollout = overrides.get("actor_rollout_ref.rollout.name", "vllm")
    if rollout == "vllm":
        needs.append((*VLLM, "actor_rollout_ref.rollout.name=vllm"))
    attn = overrides.get("actor_rollout_ref.model.override_config.attn_implementation", "flash_attention_2")
    if attn == "flash_attention_2":
        needs.append((*FLASH_ATTN, "attn_implementation flash_attention_2, verl's default"))
    return needs
