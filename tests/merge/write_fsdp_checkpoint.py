"""Write a genuine verl FSDP2 actor checkpoint on CPU, as verl's trainer does, for the merge tests.

    torchrun --nproc_per_node 2 write_fsdp_checkpoint.py HF_DIR STEP=CKPT_ROOT [STEP=CKPT_ROOT ...] [--lora]

Loads HF_DIR, optionally wraps it with a PEFT LoRA adapter (non-zero B so the merge has an effect), shards it
with FSDP2 (``fully_shard`` per decoder layer and the root) over a gloo mesh. Then, for each STEP in ascending
order, it takes one real optimizer step (so the saved weights are not the base's, and differ from step to step)
and saves with verl's own ``FSDPCheckpointManager`` to ``CKPT_ROOT/global_step_STEP/actor`` (per-rank shards,
fsdp_config.json, huggingface/, lora_train_meta.json), then, like the trainer, the dataloader state
(``global_step_STEP/data.pt``, a torchdata StatefulDataLoader's state_dict) and
``latest_checkpointed_iteration.txt``. Rank 0 also writes ``CKPT_ROOT/reference.pt``: the full state dict
gathered with verl's ``get_fsdp_full_state_dict`` after that step, in bfloat16 (what the merged model must
equal), plus the LoRA scaling. One process group writes every root: starting torchrun is most of the cost.
"""

import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM, AutoTokenizer


def main() -> None:
    hf_dir = sys.argv[1]
    roots = dict(sorted((int(a.split("=", 1)[0]), a.split("=", 1)[1]) for a in sys.argv[2:] if "=" in a))
    lora = "--lora" in sys.argv[2:]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("fsdp",))
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32)
    scaling = None
    if lora:
        from peft import LoraConfig, TaskType, get_peft_model

        config = LoraConfig(task_type=TaskType.CAUSAL_LM, r=4, lora_alpha=8, target_modules="all-linear", bias="none")
        model = get_peft_model(model, config)
        for name, param in model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(param, std=0.05)
        scaling = config.lora_alpha / config.r
    layers = model.base_model.model.model.layers if lora else model.model.layers
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)

    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)

    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
    from verl.utils.fsdp_utils import get_fsdp_full_state_dict

    manager = FSDPCheckpointManager(
        model=model,
        optimizer=optimizer,
        lr_scheduler=scheduler,
        processing_class=tokenizer,
        checkpoint_config={
            "save_contents": ["model", "optimizer", "extra"],
            "load_contents": ["model", "optimizer", "extra"],
        },
    )
    for step, root in roots.items():
        ids = torch.randint(0, len(tokenizer), (2, 12), generator=torch.Generator().manual_seed(rank * 1000 + step))
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        manager.save_checkpoint(local_path=os.path.join(root, f"global_step_{step}", "actor"), global_step=step)
        full = get_fsdp_full_state_dict(model, offload_to_cpu=True, rank0_only=True)
        if rank == 0:
            reference = {k: v.detach().to(torch.bfloat16).clone() for k, v in full.items()}
            torch.save({"state_dict": reference, "lora_scaling": scaling}, os.path.join(root, "reference.pt"))
            from torchdata.stateful_dataloader import StatefulDataLoader

            loader = StatefulDataLoader(list(range(16)), batch_size=2, shuffle=True)
            for _ in zip(range(step), loader):  # one batch per step, as the trainer consumes them
                pass
            torch.save(loader.state_dict(), os.path.join(root, f"global_step_{step}", "data.pt"))
            with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as fh:
                fh.write(str(step))
        dist.barrier()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Every file is written and closed: skip the interpreter's teardown. In one suite run (torch 2.13, 2 gloo ranks)
    # a rank aborted after its last save, most likely there ("terminate called without an active exception",
    # SIGABRT: a C++ thread still joinable when the process ends); torchrun then failed the whole write, and with
    # it the 13 tests using these checkpoints. Not reproduced in 15 runs of this script alone.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
