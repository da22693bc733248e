"""The train_grpo command for verl experiments: what the config maps to, and that the shell passes verl exactly
the overrides the validation composes."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from verlkit import REPO, VERL_CONFIGS, load

from grpoflow.backends.verl import commandline as vc
from grpoflow.backends.verl import overrides as ov
from grpoflow.backends.verl.train import parse_overrides
from grpoflow.backends.verl.validate import training_inputs
from grpoflow.config import deep_merge, resolve_config
from grpoflow.errors import ConfigError

OUTPUTS = {"marker": "results/E/training_complete.json", "metrics": "results/E/train_metrics.jsonl"}


def resolved(path: str, override: dict | None = None):
    return resolve_config(deep_merge(load(path), override or {}))


def composed(cfg, name: str) -> dict[str, str]:
    items = ov.build(cfg.experiment(name), name, training_inputs(cfg, name), cfg.checkpoint_dir(name))
    return {o.key: o.text for o in items}


@pytest.mark.parametrize("path", VERL_CONFIGS)
def test_every_shipped_config_composes(path):
    cfg = resolved(path)
    for name in cfg.experiments:
        cmd = vc.command(cfg, name, training_inputs(cfg, name), OUTPUTS)
        assert "python -m verl.trainer.main_ppo" in cmd and "python -m grpoflow.backends.verl.train" in cmd
        words = shlex.split(cmd.replace("\\\n", " "))
        assert words[words.index("--") + 1 : words.index("--") + 4] == ["python", "-m", "verl.trainer.main_ppo"]


def test_32b_gsm8k_recipe_values():
    o = composed(resolved("config/qwen3-32b-gsm8k.yaml"), "qwen3-32b-gsm8k")
    recipe = {
        "data.train_batch_size": "128",
        "data.max_prompt_length": "256",
        "data.max_response_length": "1024",
        "actor_rollout_ref.actor.ppo_mini_batch_size": "64",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "4",
        # Not the recipe's bf16: fp32 master weights and the CPU offload policy (the config's header says why).
        "actor_rollout_ref.actor.fsdp_config.model_dtype": "fp32",
        "actor_rollout_ref.actor.fsdp_config.offload_policy": "true",
        "actor_rollout_ref.ref.fsdp_config.model_dtype": "bf16",
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.tensor_model_parallel_size": "4",
        "actor_rollout_ref.rollout.gpu_memory_utilization": "0.8",
        "trainer.n_gpus_per_node": "8",
        "trainer.nnodes": "1",
        "trainer.val_before_train": "false",
        "trainer.resume_mode": "auto",
        "trainer.total_training_steps": "150",
        "trainer.save_freq": "25",
        "trainer.max_actor_ckpt_to_keep": "3",
        "trainer.experiment_name": "qwen3-32b-gsm8k",
        "trainer.default_local_dir": "$PWD/results/qwen3-32b-gsm8k/checkpoints",
        "data.train_files": "$PWD/results/data/gsm8k/train.parquet",
        "data.val_files": "$PWD/results/data/gsm8k/val.parquet",
        "actor_rollout_ref.rollout.n": "8",
        "actor_rollout_ref.actor.use_kl_loss": "true",
        "actor_rollout_ref.actor.kl_loss_coef": "0.001",
        "reward.custom_reward_function.name": "compute_score",
        "trainer.logger": "[console,file]",
    }
    assert {k: o.get(k) for k in recipe} == recipe
    assert o["actor_rollout_ref.model.path"] == "$(python -m grpoflow.discovery path results/qwen3-32b-gsm8k/sft.json)"
    assert not any(k.startswith(("custom_reward_function", "reward_model")) for k in o), "only keys verl 0.9.1 reads"


def test_report_to_adds_trackers_to_verl_logger():
    cfg = resolved(
        "config/qwen3-32b-gsm8k.yaml",
        {"experiments": {"qwen3-32b-gsm8k": {"grpo": {"report_to": ["wandb", "tensorboard"]}}}},
    )
    assert composed(cfg, "qwen3-32b-gsm8k")["trainer.logger"] == "[console,file,wandb,tensorboard]"


def test_fastmath_rewards_reach_verl():
    cfg = resolved("config/qwen3-32b-fastmath-rewards.yaml")
    o = composed(cfg, "qwen3-32b-fastmath-rewards")
    assert o["algorithm.adv_estimator"] == "grpoflow"  # group terms: length + per-prompt z-norm
    assert o["reward.custom_reward_function.reward_kwargs.funcs"].replace("'", "") == "[format2,cosine,length]"
    assert o["reward.custom_reward_function.reward_kwargs.normalize"] == "per_prompt"
    assert o["reward.custom_reward_function.reward_kwargs.params.cosine.max_len"] == "30000"
    assert o["reward.custom_reward_function.path"] in (
        "pkg://grpoflow.backends.verl.rewards",
        "$PWD/src/grpoflow/backends/verl/rewards.py",
    )
    assert str(REPO) not in o["reward.custom_reward_function.path"], "no checkout path baked into the command"
    assert o["actor_rollout_ref.actor.use_kl_loss"] == "false" and "actor_rollout_ref.actor.kl_loss_coef" not in o
    cmd = vc.command(cfg, "qwen3-32b-fastmath-rewards", training_inputs(cfg, "qwen3-32b-fastmath-rewards"), OUTPUTS)
    assert cmd.startswith(
        "env VERL_USE_EXTERNAL_MODULES=grpoflow.backends.verl.reward_plugin python -m grpoflow.backends.verl.train"
    )


def test_shared_grpo_section_maps_onto_verl_keys():
    cfg = resolved(
        "config/qwen3-8b-gsm8k.yaml",
        {
            "defaults": {
                "grpo": {
                    "clip_ratio_high": 0.28,
                    "lora": {"rank": 16, "alpha": 32, "target_modules": ["q_proj", "v_proj"]},
                },
                "resources": {"nodes": 2},
                "checkpoint_dir": "/shared/ckpt/run1",
            }
        },
    )
    o = composed(cfg, "qwen3-8b-gsm8k")
    assert (
        o["actor_rollout_ref.actor.clip_ratio_low"] == "0.2" and o["actor_rollout_ref.actor.clip_ratio_high"] == "0.28"
    )
    assert (
        o["actor_rollout_ref.actor.kl_loss_coef"] == "0.08"
        and o["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"] == "8"
    )
    assert (
        o["actor_rollout_ref.actor.optim.lr"] == "3e-06"
        and o["actor_rollout_ref.actor.optim.lr_warmup_steps_ratio"] == "0.1"
    )
    assert (
        o["actor_rollout_ref.actor.optim.lr_scheduler_type"] == "cosine"
        and o["actor_rollout_ref.actor.optim.clip_grad"] == "0.1"
    )
    assert (
        o["actor_rollout_ref.rollout.n"] == "2"
        and o["actor_rollout_ref.rollout.top_k"] == "50"
        and o["actor_rollout_ref.rollout.temperature"] == "0.9"
    )
    assert (
        o["actor_rollout_ref.model.lora_rank"] == "16"
        and o["actor_rollout_ref.model.target_modules"] == "[q_proj,v_proj]"
    )
    assert o["trainer.nnodes"] == "2" and o["trainer.n_gpus_per_node"] == "4"
    assert o["trainer.default_local_dir"] == "/shared/ckpt/run1", "absolute checkpoint dirs stay as given"
    assert o["data.seed"] == o["actor_rollout_ref.rollout.seed"] == "1"
    # the epoch bound never ends a run before total_training_steps
    assert o["trainer.total_epochs"] == o["trainer.total_training_steps"] == "200"


def test_no_validation_split_means_no_validation():
    cfg = resolved("config/qwen3-8b-gsm8k.yaml", {"defaults": {"data": {"val_split": None}, "verl": {"test_freq": -1}}})
    o = composed(cfg, "qwen3-8b-gsm8k")
    assert (
        o["data.val_files"] == o["data.train_files"]
        and o["trainer.test_freq"] == "-1"
        and o["trainer.val_before_train"] == "false"
    )


def test_extra_overrides_come_last_and_replace():
    cfg = resolved(
        "config/qwen3-8b-gsm8k.yaml",
        {
            "defaults": {
                "verl": {
                    "extra_overrides": [
                        "data.truncation=left",
                        "actor_rollout_ref.rollout.max_num_seqs=512",
                        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
                    ]
                }
            }
        },
    )
    items = ov.build(cfg.experiment("qwen3-8b-gsm8k"), "qwen3-8b-gsm8k", training_inputs(cfg, "qwen3-8b-gsm8k"), "ckpt")
    assert [o.hydra for o in items[-3:]] == [
        "data.truncation=left",
        "actor_rollout_ref.rollout.max_num_seqs=512",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    ]
    assert sum(o.key == "data.truncation" for o in items) == 1


@pytest.mark.parametrize(
    "extra, message",
    [
        ("trainer.total_training_steps=10", "derives from grpo.total_steps: set grpo.total_steps instead"),
        ("data.train_batch_size=64", "derives from grpo.prompts_per_step"),
        ("+trainer.nnodes=4", "derives from resources.nodes"),
        ("custom_reward_function.path=/x/r.py", "silently ignores: use reward.custom_reward_function.path"),
        ("reward_model.reward_manager=dapo", "silently ignores: use reward.reward_manager.name"),
        ("not an override", "is not a Hydra override"),
    ],
)
def test_extra_overrides_that_would_fight_or_be_ignored_fail_at_config_load(extra, message):
    raw = deep_merge(load("config/qwen3-8b-gsm8k.yaml"), {"defaults": {"verl": {"extra_overrides": [extra]}}})
    with pytest.raises(ConfigError, match=message) as err:
        resolve_config(raw)
    assert "\n" not in str(err.value)


def test_command_only_changes_with_training_settings():
    base = resolved("config/qwen3-32b-gsm8k.yaml")
    inputs = training_inputs(base, "qwen3-32b-gsm8k")
    ref = vc.command(base, "qwen3-32b-gsm8k", inputs, OUTPUTS)
    same = resolved(
        "config/qwen3-32b-gsm8k.yaml",
        {
            "defaults": {
                "merge_step": 150,
                "upload": {"repo_id": "me/x"},
                "resources": {"runtime": 60, "cpus_per_task": 16},
            }
        },
    )
    assert vc.command(same, "qwen3-32b-gsm8k", inputs, OUTPUTS) == ref, "merge/upload/wall time do not retrain"
    other = resolved("config/qwen3-32b-gsm8k.yaml", {"defaults": {"grpo": {"learning_rate": 2e-6}}})
    assert vc.command(other, "qwen3-32b-gsm8k", inputs, OUTPUTS) != ref
    assert "--resume-across-changes" not in ref
    opted = resolved("config/qwen3-32b-gsm8k.yaml", {"defaults": {"resume_across_changes": True}})
    wrapper = shlex.split(vc.command(opted, "qwen3-32b-gsm8k", inputs, OUTPUTS).split(" -- ")[0])
    assert wrapper[-1] == "--resume-across-changes", "the opt-in reaches the wrapper, not verl"


def test_the_shell_passes_verl_exactly_the_validated_overrides(tmp_path):
    """Run the composed verl command line through bash (verl replaced by printf at the very end) and compare the
    words verl would get with what `grpoflow.backends.verl.validate` composes against verl's schema."""
    cfg = resolved("config/qwen3-32b-fastmath-rewards.yaml")
    name = "qwen3-32b-fastmath-rewards"
    inputs = training_inputs(cfg, name)
    model = tmp_path / "sft model"  # a space: quoting must survive
    model.mkdir()
    (tmp_path / "results" / name).mkdir(parents=True)
    (tmp_path / inputs["sft"]).write_text(json.dumps({"path": str(model)}))
    cmd = vc.command(cfg, name, inputs, OUTPUTS)
    verl_part = cmd.split(" -- \\\n", 1)[1].replace("python -m verl.trainer.main_ppo", "printf '%s\\0'", 1)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO / "src"),
    }
    out = subprocess.run(
        ["bash", "-c", verl_part], cwd=tmp_path, capture_output=True, text=True, env=env, check=True
    ).stdout
    words = out.split("\0")[:-1]
    expected = vc.trainer_argv(cfg, name, inputs, str(model), str(tmp_path))[3:]
    got = {k: v for k, v in parse_overrides(words).items()}
    want = parse_overrides(expected)
    assert got == want
    assert got["actor_rollout_ref.model.path"] == str(model)
    assert got["trainer.default_local_dir"] == f"{tmp_path}/results/{name}/checkpoints"


def test_dry_run_prints_the_verl_command_and_sbatch_resources(tmp_path):
    from grpoflow_testing import make_workdir, snakemake

    wd, repo = make_workdir(tmp_path), REPO
    proc = snakemake(
        [
            "results/qwen3-32b-gsm8k/training_complete.json",
            "-n",
            "-p",
            "--profile",
            str(repo / "profiles/slurm"),
            "--configfile",
            "config/qwen3-32b-gsm8k.yaml",
        ],
        wd,
    )
    # The GPU-memory estimate and what a time limit costs, one line on stderr when the config loads.
    summary = next(ln for ln in proc.stderr.splitlines() if ln.startswith("grpoflow: train qwen3-32b-gsm8k with verl."))
    assert "GPU memory per GPU" in summary and "margin +13.9 GiB, fits" in summary and "loses up to 25 steps" in summary
    out = proc.stdout
    block = out[out.index("rule train_grpo:") :]
    assert (
        "nodes=1, gpu=8" in block
        and "cpus_per_task=160" in block
        and "mem_mb=900000" in block
        and "runtime=2880" in block
    )
    # No cluster_env: Snakemake's own interpreter, by absolute path (grpoflow.deployment).
    assert (
        re.search(r" /\S+/python[\d.]* -m verl\.trainer\.main_ppo", block)
        and "actor_rollout_ref.rollout.tensor_model_parallel_size=4" in block
    )
    two = tmp_path / "two-nodes.yaml"
    two.write_text(
        json.dumps(deep_merge(load("config/qwen3-8b-gsm8k.yaml"), {"defaults": {"resources": {"nodes": 2}}}))
    )
    out = snakemake(
        [
            "results/qwen3-8b-gsm8k/training_complete.json",
            "-n",
            "-p",
            "--profile",
            str(repo / "profiles/slurm"),
            "--configfile",
            str(two),
        ],
        wd,
    ).stdout
    block = out[out.index("rule train_grpo:") :]
    assert (
        "nodes=2, gres=gpu:4, mpi=srun, tasks_per_node=2" in block
        and "cpus_per_task=16" in block
        and " gpu=" not in block
    )
    assert "trainer.nnodes=2" in block


def test_an_import_error_of_the_reward_module_stops_the_command_at_once(monkeypatch):
    """An import error of grpoflow.backends.verl.rewards fails the command's composition (the DAG build), not verl's first
    step on the cluster, as the old guarded import did by leaving the reward overrides out."""
    from grpoflow.backends import training_command

    cfg = resolved(VERL_CONFIGS[0])
    name = next(iter(cfg.experiments))
    import grpoflow.backends.verl
    import grpoflow.rewards

    for module in ("commandline", "overrides"):  # imported afresh, as in a new Snakemake process
        monkeypatch.delitem(sys.modules, f"grpoflow.backends.verl.{module}", raising=False)
        monkeypatch.delattr(grpoflow.backends.verl, module, raising=False)
    monkeypatch.delitem(sys.modules, "grpoflow.backends.verl")  # the backend package too
    monkeypatch.delattr(grpoflow.backends, "verl")
    monkeypatch.delitem(sys.modules, "grpoflow.backends.registry", raising=False)  # and its registry line
    monkeypatch.delattr(grpoflow.backends, "registry", raising=False)
    monkeypatch.delattr(grpoflow.rewards, "verl", raising=False)
    monkeypatch.setitem(sys.modules, "grpoflow.backends.verl.rewards", None)  # any import of it raises ImportError
    with pytest.raises(ImportError, match="grpoflow.backends.verl.rewards"):
        training_command(cfg, name, training_inputs(cfg, name), OUTPUTS)
