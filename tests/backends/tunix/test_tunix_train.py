"""The Tunix backend for real, on CPU, in the Tunix environment: Tunix's Qwen3 agrees with transformers, a run
writes what every backend writes, a SIGTERM-interrupted run resumes to exactly the uninterrupted result, cut-off
saves and changed settings are handled, and the merge gives an HF model with the trained weights."""

from __future__ import annotations

import json
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from tunixkit import TINY_GRPO, read_jsonl, run_tunix, start_training, train

pytestmark = pytest.mark.slow

# Logits of the tiny model on one sequence, by Tunix (in the Tunix environment): the model loaded from the HF dir
# (or restored from a checkpoint step), then exported and compared tensor by tensor with what it was loaded from.
LOGITS = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
from grpoflow.backends.tunix import qwen3
model_dir, ids, out, step_dir = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
model = qwen3.load(model_dir, mesh)
if step_dir != "-":
    from tunix.sft.checkpoint_manager import CheckpointManager
    manager = CheckpointManager(str(__import__("pathlib").Path(step_dir).parent))
    manager.maybe_restore(model, step=int(__import__("pathlib").Path(step_dir).name))
    manager.close()
n = len(ids)
logits, _ = model(jnp.array([ids]), jnp.arange(n)[None], None, jnp.tril(jnp.ones((1, n, n), dtype=bool)))
np.save(out, np.asarray(logits[0]))
if step_dir == "-":
    qwen3.export(model, model_dir, sys.argv[5])
"""


def torch_logits(model_dir, ids):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def tunix_logits(model_dir, ids, tmp_path, step_dir="-", export_to=None):
    out = tmp_path / f"logits-{time.monotonic_ns()}.npy"
    args = ["-c", LOGITS, str(model_dir), json.dumps(ids), str(out), str(step_dir)]
    run_tunix(args + ([str(export_to)] if export_to else []))
    return np.load(out)


IDS = [3, 9, 17, 22, 40, 41, 5, 60, 61, 62, 7, 8]


def test_tunix_qwen3_gives_transformers_logits_and_exports_the_same_tensors(tiny_model, tmp_path):
    """The tiny model's rope_theta (1e4) is not Tunix's built-in 1e6: the logits agree only because grpoflow binds
    the checkpoint's θ (grpoflow.backends.tunix.qwen3)."""
    from safetensors.numpy import load_file

    assert json.loads((Path(tiny_model) / "config.json").read_text())["rope_parameters"]["rope_theta"] != 1e6
    exported = tmp_path / "exported"
    exported.mkdir()
    theirs = tunix_logits(tiny_model, IDS, tmp_path, export_to=exported)
    ours = torch_logits(tiny_model, IDS)
    assert np.abs(theirs - ours).max() < 1e-4
    want, got = load_file(str(Path(tiny_model) / "model.safetensors")), load_file(str(exported / "model.safetensors"))
    assert want.keys() == got.keys() and all(np.array_equal(want[k], got[k]) for k in want)


def test_run_writes_metrics_marker_progress_and_orbax_checkpoints(short_run):
    spec, log = short_run
    marker = json.loads(Path(spec["marker"]).read_text())
    assert marker["backend"] == "tunix" and marker["final_step"] == marker["planned_steps"] == 12
    assert marker["checkpoint_format"] == "orbax" and marker["final_checkpoint"].endswith("/actor/12")
    assert marker["provenance"]["packages"]
    rows = read_jsonl(spec["metrics"])
    assert [r["step"] for r in rows] == list(range(1, 13))
    for row in rows:
        keys = {"reward", "accuracy", "reward/accuracy", "reward/repetition_penalty", "response_length", "loss", "kl"}
        assert keys | {"grad_norm", "learning_rate"} <= set(row)
        assert 0.0 <= row["accuracy"] <= 1.0 and row["learning_rate"] == pytest.approx(TINY_GRPO["learning_rate"])
    assert all("time_s" in r for r in rows[1:])
    steps = sorted(int(p.name) for p in (Path(spec["checkpoint_dir"]) / "actor").iterdir())
    assert steps == [8, 12]  # save_freq 4, max_checkpoints_to_keep 2
    progress = [ln for ln in log.splitlines() if " step " in ln and "/12 (" in ln]
    assert (
        len(progress) == 12
        and "job interpreter:" in log
        and "environment check for train_grpo (backend tunix) passed" in log
    )


def test_sigterm_stops_at_a_step_with_a_checkpoint_and_the_rerun_ends_where_an_uninterrupted_run_does(
    make_spec, short_run, tmp_path
):
    spec = make_spec(tmp_path)
    proc = start_training(spec)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if " step 1/12 " in line:
            proc.send_signal(signal.SIGTERM)
            break
    rest, _ = proc.communicate(timeout=600)
    out = "".join(lines) + rest
    assert proc.returncode == 1, out[-3000:]
    assert out.rstrip().splitlines()[-1].startswith("grpoflow: error: training of tiny-tunix stopped at step")
    assert not Path(spec["marker"]).exists()
    saved = sorted(int(p.name) for p in (Path(spec["checkpoint_dir"]) / "actor").iterdir())
    # The stop lands at the next step boundary the trainer reaches (Tunix fetches a batch ahead): not the end.
    assert saved and 1 <= saved[-1] < 12, saved

    resumed = train(spec).stderr
    assert f"resuming from {spec['checkpoint_dir']}/actor/{saved[-1]}" in resumed
    # Deterministic data order and sampling seeds: the resumed run's steps are the uninterrupted run's steps.
    uninterrupted = read_jsonl(short_run[0]["metrics"])
    got = read_jsonl(spec["metrics"])
    assert [r["step"] for r in got] == list(range(1, 13))
    for a, b in zip(uninterrupted, got):
        assert b["reward"] == a["reward"] and b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-5), (a, b)


def test_cut_off_saves_are_removed_and_a_finished_run_is_not_trained_again(short_run, tmp_path):
    spec, _ = short_run
    run = tmp_path / "copy"
    shutil.copytree(Path(spec["checkpoint_dir"]).parent, run)
    copy = {
        **spec,
        "checkpoint_dir": str(run / "checkpoints"),
        "marker": str(run / "training_complete.json"),
        "metrics": str(run / "train_metrics.jsonl"),
    }
    Path(copy["marker"]).unlink()
    cut = run / "checkpoints" / "actor" / "5.orbax-checkpoint-tmp-1700000000"
    cut.mkdir()
    log = train(copy).stderr
    assert not cut.exists() and "its save was cut off" in log
    assert "nothing left to train" in log and json.loads(Path(copy["marker"]).read_text())["final_step"] == 12


def test_resuming_with_other_settings_is_refused_in_one_line(short_run, tmp_path):
    spec, _ = short_run
    run = tmp_path / "copy"
    shutil.copytree(Path(spec["checkpoint_dir"]).parent, run)
    changed = {
        **spec,
        "checkpoint_dir": str(run / "checkpoints"),
        "grpo": {**spec["grpo"], "total_steps": 16, "learning_rate": 2.0e-3},
    }
    proc = train(changed, check=False)
    last = proc.stderr.rstrip().splitlines()[-1]
    assert proc.returncode == 1 and last.startswith("grpoflow: error:") and "learning_rate" in last, last


def test_merge_exports_the_trained_weights_as_a_transformers_model(short_run, tiny_model, tmp_path):
    spec, _ = short_run
    out = tmp_path / "model"
    job = {
        "backend": "tunix",
        "checkpoint_dir": spec["checkpoint_dir"],
        "step": "last",
        "sft_json": spec["sft"],
        "marker": spec["marker"],
        "out_dir": str(out),
    }
    run_tunix(["-m", "grpoflow.workflow", "merge_checkpoint", "--kwargs", json.dumps(job)])
    record = json.loads((out / "grpoflow_merge.json").read_text())
    assert record["step"] == 12 and record["checks"]["weights"]["tensors"].startswith("names, shapes and dtypes equal")
    trained = tunix_logits(tiny_model, IDS, tmp_path, step_dir=Path(spec["checkpoint_dir"]) / "actor" / "12")
    merged = torch_logits(out, IDS)
    assert np.abs(trained - merged).max() < 1e-4
    assert np.abs(merged - torch_logits(tiny_model, IDS)).max() > 1e-3  # training changed the model


def test_lora_trains_adapters_only_and_the_merge_folds_them_in(make_spec, tiny_model, tmp_path):
    """grpo.lora through qwix: the checkpoints hold the adapters only (Tunix saves LoRA params alone), the start
    model is the frozen reference (kl_coef > 0), and the merged HF model gives the LoRA model's logits."""
    lora = {"rank": 4, "alpha": 8.0, "dropout": 0.0, "target_modules": "all-linear"}
    spec = make_spec(tmp_path, total_steps=4, save_freq=4, kl_coef=0.05, lora=lora, learning_rate=1.0e-2)
    log = train(spec).stderr
    assert "training of tiny-tunix complete" in log
    params = Path(spec["checkpoint_dir"]) / "actor" / "4" / "model_params"
    names = json.loads((params / "_METADATA").read_text())["tree_metadata"] if (params / "_METADATA").is_file() else {}
    assert names and all("lora" in key for key in names), list(names)[:5]
    out = tmp_path / "model"
    job = {"backend": "tunix", "checkpoint_dir": spec["checkpoint_dir"], "step": "last", "sft_json": spec["sft"],
           "marker": spec["marker"], "out_dir": str(out)}  # fmt: skip
    run_tunix(["-m", "grpoflow.workflow", "merge_checkpoint", "--kwargs", json.dumps(job)])
    assert json.loads((out / "grpoflow_merge.json").read_text())["lora"]["rank"] == 4
    merged, start = torch_logits(out, IDS), torch_logits(tiny_model, IDS)
    assert np.abs(merged - start).max() > 1e-4  # the adapters moved the model
    lora_logits = run_lora_logits(tiny_model, spec, lora, tmp_path)
    assert np.abs(lora_logits - merged).max() < 1e-4


LORA_LOGITS = """
import json, sys, pathlib
import jax, jax.numpy as jnp, numpy as np
from tunix.sft.checkpoint_manager import CheckpointManager
from grpoflow.backends.tunix import qwen3
model_dir, step_dir, lora, ids, out = sys.argv[1], pathlib.Path(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5]
mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
model = qwen3.with_lora(qwen3.load(model_dir, mesh), lora)
manager = CheckpointManager(str(step_dir.parent.absolute()))
manager.maybe_restore(model, step=int(step_dir.name), restore_only_lora_params=True)
manager.close()
n = len(ids)
logits, _ = model(jnp.array([ids]), jnp.arange(n)[None], None, jnp.tril(jnp.ones((1, n, n), dtype=bool)))
np.save(out, np.asarray(logits[0]))
"""


def run_lora_logits(model_dir, spec, lora, tmp_path):
    out = tmp_path / "lora-logits.npy"
    step_dir = Path(spec["checkpoint_dir"]) / "actor" / "4"
    run_tunix(["-c", LORA_LOGITS, str(model_dir), str(step_dir), json.dumps(lora), json.dumps(IDS), str(out)])
    return np.load(out)


# tunix.remat / flash_attention reach Tunix's ModelConfig; decoder and block remat give none's GRPO-loss gradient.
REMAT = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
from flax import nnx
from tunix.models.qwen3 import model as qm
from tunix.rl import algo_core, common
from tunix.rl.grpo import grpo_learner
from grpoflow.backends.tunix import qwen3
model_dir = sys.argv[1]
cfg = qwen3.hf_config(model_dir)
flash = qwen3.model_config(cfg, flash_attention=True, flash_attention_block_size=512)
assert flash.use_flash_attention and flash.flash_attention_block_size == 512
algo = grpo_learner.GRPOConfig(num_generations=2, beta=0.0, epsilon=0.2)
algo.temperature = 0.7
rng = np.random.default_rng(0)
example = common.TrainExample(
    prompt_ids=jnp.array(rng.integers(3, 40, (2, 8)), jnp.int32), prompt_mask=jnp.ones((2, 8), jnp.int32),
    completion_ids=jnp.array(rng.integers(3, 40, (2, 8)), jnp.int32), completion_mask=jnp.ones((2, 8), jnp.int32),
    advantages=jnp.array([1.0, -1.0]), ref_per_token_logps=None, old_per_token_logps=None)
mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
grads = {}
for remat in ("none", "block", "decoder"):
    model = qwen3.load(model_dir, mesh, remat=remat)
    assert model.config.remat_config == qm.RematConfig[qwen3.REMAT[remat]]
    loss = lambda m: algo_core.grpo_loss_fn(m, example, algo, pad_id=0, eos_id=1)[0]
    g = nnx.grad(loss)(model)
    grads[remat] = np.concatenate([np.ravel(x) for x in jax.tree.leaves(nnx.state(g, nnx.Param))])
print(json.dumps({k: float(np.abs(v - grads["none"]).max()) for k, v in grads.items()} | {"norm": float(np.abs(grads["none"]).max())}))
"""


def test_remat_and_flash_attention_reach_tunix_and_remat_changes_no_gradient(tiny_model):
    out = json.loads(run_tunix(["-c", REMAT, tiny_model]).stdout.splitlines()[-1])
    assert out["norm"] > 1e-3  # a gradient worth comparing
    assert out["block"] < 1e-6 and out["decoder"] < 1e-6, out
