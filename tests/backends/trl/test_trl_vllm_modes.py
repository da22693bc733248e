"""TRL's vLLM modes where they are cheap to check: colocate on the CPU (accepted, in the vLLM CPU environment's
plane), server mode on GPUs (the layout checks, the command that starts the server, the trainer's client
settings), the dtype vLLM generates in (chosen, on the CPU and on GPUs), and the weight-sync check's switch. What
runs for real is in test_trl_vllm_colocate.py (colocate steps through the DAG) and test_trl_vllm_server.py (a
server started the way the job starts it, answering TRL's client)."""

from __future__ import annotations

import json
import shlex

import pytest
from trainkit import resolved

from grpoflow.backends.trl import BACKEND as TRL
from grpoflow.backends.trl.commandline import command, processes, training_spec, vllm_dtype
from grpoflow.backends.trl.runner import grpo_config_kwargs
from grpoflow.backends.trl.vllm_engine import engine_kwargs
from grpoflow.backends.trl.vllm_server import GROUP_PORT_VAR, SERVER_URL_VAR, client_settings, split_gpus
from grpoflow.errors import ConfigError, GrpoflowError
from grpoflow.planes import LOCAL, VLLM_CPU

EXP = "tiny-arith-seed1"
INS = {"train": "t.parquet", "sft": "results/tiny-arith-seed1/sft.json"}
OUTS = {"marker": "m.json", "metrics": "x.jsonl"}
# A full fine-tune of Qwen3-0.6B on one 4-GPU node.
GPU = {"trl": {"use_cpu": False}, "resources": {"gpus_per_node": 4, "mem_mb": 200000}, "architecture": "qwen3-0.6b"}
SERVER = {**GPU, "trl": {"use_cpu": False, "vllm": {"mode": "server"}}}
# One training process and the server on a 2-GPU node, as a config overlay.
SERVER_OVERLAY = {
    "defaults": {
        "trl": {"use_cpu": False, "processes": 1, "vllm": {"mode": "server", "check_weight_sync": True}},
        "architecture": "qwen3-0.6b",
        "resources": {"gpus_per_node": 2, "mem_mb": 100000},
        "grpo": {"prompts_per_step": 4},
    }
}


def cpu(default_config, **trl):
    return resolved(default_config, {"defaults": {"trl": trl}})


def gpu(default_config, base=GPU, **override):
    from grpoflow.config import deep_merge

    return resolved(default_config, {"defaults": deep_merge(json.loads(json.dumps(base)), override)})


def test_colocate_on_the_cpu_runs_in_the_vllm_environment_in_float32(default_config):
    exp = cpu(default_config, vllm={"mode": "colocate"}).experiment(EXP)
    assert TRL.plane(exp) == VLLM_CPU and processes(exp) == 1
    assert [m for m, _, _ in TRL.environment(exp, "train_grpo")] == ["torch", "trl", "vllm"]
    assert [m for m, _, _ in TRL.environment(exp, "merge_checkpoint")] == ["torch"]
    assert vllm_dtype(exp) == "float32"
    plain = cpu(default_config).experiment(EXP)
    assert TRL.plane(plain) == LOCAL and TRL.environment(plain, "train_grpo") is None


def test_the_dtype_vllm_generates_in_is_chosen_and_reaches_the_engine(default_config):
    """auto: float32 on the CPU, bfloat16 on GPUs; a set dtype wins. The engine's arguments are the runner's
    (vllm_engine.engine_kwargs, given to TRL's LLM): on the CPU also eager (no inductor compile)."""
    on_cpu = training_spec(cpu(default_config, vllm={"mode": "colocate"}), EXP, INS, OUTS)
    on_gpu = training_spec(gpu(default_config), EXP, INS, OUTS)
    assert engine_kwargs(on_cpu["trl"]) == {"dtype": "float32", "enforce_eager": True}
    assert engine_kwargs(on_gpu["trl"]) == {"dtype": "bfloat16"}
    fp32 = training_spec(gpu(default_config, trl={"vllm": {"dtype": "float32"}}), EXP, INS, OUTS)
    assert engine_kwargs(fp32["trl"]) == {"dtype": "float32"}


def test_the_new_vllm_keys_at_their_default_leave_a_finished_runs_command_unchanged(default_config):
    """trl.vllm.dtype auto, check_weight_sync false and server_gpus are not in the spec: a run trained before they
    existed is not rerun (Snakemake's params trigger) for settings that train the same weights."""
    spec = training_spec(gpu(default_config), EXP, INS, OUTS)
    assert set(spec["trl"]["vllm"]) == {
        "mode",
        "gpu_memory_utilization",
        "tensor_parallel_size",
        "importance_sampling_correction",
    }
    set_ = training_spec(
        gpu(default_config, trl={"vllm": {"dtype": "float32", "check_weight_sync": True}}), EXP, INS, OUTS
    )
    assert set_["trl"]["vllm"]["dtype"] == "float32" and set_["trl"]["vllm"]["check_weight_sync"] is True


@pytest.mark.parametrize(
    "base, override, message",
    [
        (None, {"trl": {"vllm": {"mode": "server"}}}, "trl.vllm.mode = server with trl.use_cpu true"),
        (SERVER, {"trl": {"processes": 4}}, "trl.processes = 4 and trl.vllm.server_gpus = 1 need 5 GPUs"),
        (
            SERVER,
            {"trl": {"processes": 1, "vllm": {"server_gpus": 3, "tensor_parallel_size": 2}}},
            "trl.vllm.tensor_parallel_size = 2 does not divide trl.vllm.server_gpus = 3",
        ),
        (
            SERVER,
            {"trl": {"processes": 2, "vllm": {"check_weight_sync": True, "server_gpus": 2}}},
            "trl.vllm.check_weight_sync = true with trl.vllm.mode = server",
        ),
        (None, {"trl": {"vllm": {"check_weight_sync": True}}}, "with trl.vllm.mode = none"),
        (GPU, {"trl": {"vllm": {"check_weight_sync": True, "tensor_parallel_size": 2}}}, "tensor_parallel_size 1"),
    ],
)
def test_a_bad_vllm_layout_is_refused_in_one_line_naming_the_key(default_config, base, override, message):
    with pytest.raises(ConfigError) as err:
        if base is None:
            resolved(default_config, {"defaults": override})
        else:
            gpu(default_config, base, **override)
    text = str(err.value)
    assert "\n" not in text and text.startswith("config error: experiments.") and message in text, text


def test_server_mode_gives_the_server_its_gpus_and_the_trainer_the_rest(default_config):
    cfg = gpu(
        default_config,
        SERVER,
        trl={"vllm": {"server_gpus": 2, "tensor_parallel_size": 2}},
        grpo={"prompts_per_step": 16},
    )
    exp = cfg.experiment(EXP)
    assert processes(exp) == 2
    cmd = command(cfg, EXP, INS, OUTS)
    assert cmd.startswith("{ ") and cmd.endswith("; }")
    argv = shlex.split(cmd[2:-3])
    check = argv.index("&&")
    assert argv[:check] == ["python", "-m", "grpoflow.envcheck", "train-trl-gpu", "server"]
    wrapper = argv[check + 1 :]
    split = wrapper.index("--")
    own = wrapper[:split]
    assert own[:3] == ["python", "-m", "grpoflow.backends.trl.vllm_server"]
    options = dict(zip(own[3::2], own[4::2]))
    assert options == {
        "--sft": INS["sft"],
        "--server-gpus": "2",
        "--gpus-per-node": "4",
        "--tensor-parallel-size": "2",
        "--gpu-memory-utilization": "0.3",
        "--dtype": "bfloat16",
        "--max-model-len": str(exp["grpo"]["max_prompt_length"] + exp["grpo"]["max_response_length"]),
    }
    target = wrapper[split + 1 :]
    assert target[:5] == ["python", "-m", "grpoflow.backends.trl.launch", "--nproc-per-node", "2"]
    assert json.loads(target[-1])["trl"]["vllm"]["mode"] == "server"


def test_the_trainer_finds_the_server_the_wrapper_started(default_config, monkeypatch):
    spec = training_spec(gpu(default_config, SERVER, trl={"processes": 2}), EXP, INS, OUTS)
    monkeypatch.delenv(SERVER_URL_VAR, raising=False)
    with pytest.raises(GrpoflowError, match="no vLLM server was started for this run"):
        grpo_config_kwargs(spec)
    monkeypatch.setenv(SERVER_URL_VAR, "http://127.0.0.1:41234")
    monkeypatch.setenv(GROUP_PORT_VAR, "41235")
    k = grpo_config_kwargs(spec)
    assert (k["use_vllm"], k["vllm_mode"], k["vllm_server_base_url"], k["vllm_group_port"]) == (
        True,
        "server",
        "http://127.0.0.1:41234",
        41235,
    )
    assert "vllm_gpu_memory_utilization" not in k, "the server's own settings are the wrapper's"
    assert client_settings()["vllm_server_base_url"] == "http://127.0.0.1:41234"


def test_the_gpus_the_job_sees_are_split_between_server_and_trainer():
    assert split_gpus(1, 4, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}) == ("4", "5,6,7")
    assert split_gpus(2, 4, {}) == ("0,1", "2,3")
    with pytest.raises(GrpoflowError, match="leaving none to train on"):
        split_gpus(2, 2, {"CUDA_VISIBLE_DEVICES": "0,1"})


def test_the_weight_sync_check_compares_fused_and_padded_weights_and_names_a_difference():
    """grpoflow.backends.trl.vllm_engine.compare_weights over a stand-in for vLLM's model (a torch module with
    vLLM's layout: q/k/v stacked into qkv_proj in packed_modules_mapping order, the embedding padded to 64 rows, one
    float32 and one bfloat16 copy), against the tensors TRL's sync sends (the trainer's names and shapes). The real
    engine is compared in test_trl_vllm_colocate.py's run."""
    import torch

    from grpoflow.backends.trl.weight_sync import compare_weights

    torch.manual_seed(0)
    sent = {
        "model.embed_tokens.weight": torch.randn(50, 8),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(8, 8),
        "model.layers.0.self_attn.k_proj.weight": torch.randn(4, 8),
        "model.layers.0.self_attn.v_proj.weight": torch.randn(4, 8),
        "model.norm.weight": torch.randn(8),
    }

    class VllmLike(torch.nn.Module):
        packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}

        def __init__(self, dtype):
            super().__init__()
            embed = torch.zeros(64, 8)
            embed[:50] = sent["model.embed_tokens.weight"]
            qkv = torch.cat([sent[f"model.layers.0.self_attn.{p}_proj.weight"] for p in "qkv"])
            self.params = {
                "model.embed_tokens.weight": embed,
                "model.layers.0.self_attn.qkv_proj.weight": qkv,
                "model.norm.weight": sent["model.norm.weight"].clone(),
            }
            for name, value in self.params.items():
                self.register_parameter(name.replace(".", "_"), torch.nn.Parameter(value.to(dtype)))

        def named_parameters(self, *args, **kwargs):
            return [(name, getattr(self, name.replace(".", "_"))) for name in self.params]

    for dtype in (torch.float32, torch.bfloat16):
        model = VllmLike(dtype)
        assert compare_weights(sent.items(), model) == (0.0, ""), "equal after the cast to vLLM's dtype"
        with torch.no_grad():
            model.model_layers_0_self_attn_qkv_proj_weight[9, 3] += 1.0  # a row of k_proj
        worst, where = compare_weights(sent.items(), model)
        assert worst >= 0.99 and where == "model.layers.0.self_attn.qkv_proj.weight"
    with pytest.raises(GrpoflowError, match="the trainer sent no weights for vLLM's model.norm.weight"):
        compare_weights([(k, v) for k, v in sent.items() if k != "model.norm.weight"], VllmLike(torch.float32))


def test_the_weight_sync_check_is_accepted_on_one_engine(default_config):
    gpu(default_config, trl={"vllm": {"check_weight_sync": True}})
    gpu(default_config, SERVER, trl={"processes": 2, "vllm": {"check_weight_sync": True}})
    cpu(default_config, vllm={"mode": "colocate", "check_weight_sync": True})


def test_the_cluster_profile_runs_server_mode_in_the_cluster_interpreter(tmp_path):
    """`snakemake -n -p --profile profiles/slurm` with trl.vllm.mode server on a 2-GPU node: the job asks SLURM for
    both GPUs and runs the environment check, then the server wrapper, then the trainer, in cluster_env's python."""
    import yaml
    from grpoflow_testing import REPO, make_workdir, snakemake

    wd = make_workdir(tmp_path)
    py = "/shared/envs/grpoflow-cluster/bin/python"
    overlay = tmp_path / "server.yaml"
    overlay.write_text(yaml.safe_dump({**SERVER_OVERLAY, "cluster_env": {"python": py}}))
    out = snakemake(
        [f"results/{EXP}/training_complete.json", "-n", "-p", "--profile", str(REPO / "profiles/slurm")]
        + ["--configfile", str(REPO / "config/config.yaml"), str(overlay)],
        wd,
    ).stdout
    train = out[out.index("rule train_grpo") :]
    assert "gpu=2," in train[: train.index("\n\n")]
    wrapper = (
        f"{py} -m grpoflow.backends.trl.vllm_server --sft results/{EXP}/sft.json --server-gpus 1 --gpus-per-node 2"
    )
    expected = f"{{ {py} -m grpoflow.envcheck train-trl-gpu server && {wrapper} "
    assert expected in out and f"--dtype bfloat16 --max-model-len 56 -- {py} -m grpoflow.backends.trl.train" in out
