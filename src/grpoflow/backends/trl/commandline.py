"""The TRL backend of `train_grpo`: the command the rule runs and its config check (the entry point is train.py).

``command(cfg, experiment, inputs, outputs)`` is composed when Snakemake builds the DAG::

    python -m grpoflow.backends.trl.train --spec '{"experiment": ..., "grpo": {...}, ...}'

The spec holds everything that determines the trained weights and nothing else (no evaluation, upload or
resource settings), so changing any of it, and only it, reruns training. The training itself is
``grpoflow.backends.trl.runner.run_training`` (TRL ``GRPOTrainer``); this module stays free of torch/TRL imports
because the Snakefile imports it on every dry-run.
"""

from __future__ import annotations

import shlex

from grpoflow.backends.trl import sampling
from grpoflow.errors import ConfigError
from grpoflow.training import ResolvedConfig, common

# trl.vllm keys that came after runs were trained, at the value that trains as before: left out of the spec at that
# value, so a finished run's command is unchanged (Snakemake's params trigger would rerun it, its merge and evaluation,
# for nothing: grpoflow.training.common.training_spec does the same for ``health``). server_gpus is the server
# wrapper's (the command's), and changes only how many processes share a step, never the weights.
VLLM_KEYS_AT_DEFAULT = {"dtype": "auto", "check_weight_sync": False}
VLLM_KEYS_NOT_IN_SPEC = ("server_gpus",)
ENTRY = "grpoflow.backends.trl.train"  # train_grpo's entry point, named in finished runs' commands


def training_spec(cfg: ResolvedConfig, experiment: str, inputs: dict, outputs: dict) -> dict:
    exp = cfg.experiment(experiment)
    spec = common.training_spec(cfg, experiment, inputs, outputs, trust_remote_code=exp["sft"]["trust_remote_code"])
    # The runner trains with what the config resolves to (processes, vLLM mode), not the nulls that stand for them;
    # trl.vllm.dtype's auto is resolved by the runner (vllm_dtype), from the spec's use_cpu.
    vllm = {**exp["trl"]["vllm"], "mode": vllm_mode(exp)}
    for key, default in VLLM_KEYS_AT_DEFAULT.items():
        if vllm[key] == default:
            del vllm[key]
    for key in VLLM_KEYS_NOT_IN_SPEC:
        del vllm[key]
    spec["trl"] = {**exp["trl"], "processes": processes(exp), "vllm": vllm}
    return spec


def launcher(spec: dict) -> str:
    """torchrun for several processes, through grpoflow.backends.trl.launch (one host, a free rendezvous port; each
    rank gets the job's threads / processes; after SIGTERM the ranks get trl.shutdown_timeout seconds before
    SIGKILL, on any torch version); nothing for one."""
    n = spec["trl"]["processes"]
    if n == 1:
        return ""
    return (
        f"python -m grpoflow.backends.trl.launch --nproc-per-node {n} "
        f"--shutdown-timeout {spec['trl']['shutdown_timeout']} -- "
    )


def server_wrapper(exp: dict, inputs: dict) -> str:
    """``python -m grpoflow.backends.trl.vllm_server ... -- `` for trl.vllm.mode server (it starts the server on
    trl.vllm.server_gpus GPUs, then the training command on the rest); nothing in the other modes."""
    if vllm_mode(exp) != "server":
        return ""
    vllm, grpo = exp["trl"]["vllm"], exp["grpo"]
    trust = " --trust-remote-code" if exp["sft"]["trust_remote_code"] else ""
    return (
        f"python -m grpoflow.backends.trl.vllm_server --sft {shlex.quote(inputs['sft'])} "
        f"--server-gpus {vllm['server_gpus']} --gpus-per-node {exp['resources']['gpus_per_node']} "
        f"--tensor-parallel-size {vllm['tensor_parallel_size']} --gpu-memory-utilization {vllm['gpu_memory_utilization']} "
        f"--dtype {vllm_dtype(exp)} --max-model-len {grpo['max_prompt_length'] + grpo['max_response_length']}{trust} -- "
    )


def command(cfg: ResolvedConfig, experiment: str, inputs: dict, outputs: dict) -> str:
    """``python -m grpoflow.backends.trl.train --spec JSON``, under torchrun for several processes, and under the
    vLLM server's wrapper in server mode. On GPUs with several processes or a server the environment check runs
    once first (each rank checks again, in milliseconds): in a wrong environment the job log ends with the check's
    one line instead of torchrun's or the server's failure report. The group's braces keep the rule's redirection
    on both commands."""
    from grpoflow.backends.trl.gpu_env import command_args

    spec = training_spec(cfg, experiment, inputs, outputs)
    cmd = common.spec_command(ENTRY, spec)
    prefix = launcher(spec)
    if prefix:
        cmd = prefix + cmd.removeprefix("python ")
    server = server_wrapper(cfg.experiment(experiment), inputs)
    if not prefix and not server:
        return cmd
    cmd = server + cmd
    if spec["trl"]["use_cpu"]:
        return cmd
    return f"{{ python -m grpoflow.envcheck {command_args(spec)} && {cmd}; }}"


def vllm_mode(exp: dict) -> str:
    """trl.vllm.mode resolved: colocate on GPUs, none on the CPU, unless set."""
    mode = exp["trl"]["vllm"]["mode"]
    return mode if mode is not None else ("none" if exp["trl"]["use_cpu"] else "colocate")


def vllm_dtype(exp: dict) -> str:
    """trl.vllm.dtype resolved (``exp``: an experiment, or a spec: both have ``trl``): float32 on the CPU, bfloat16
    on GPUs, unless set. On the CPU the trainer runs
    float32 and the CPU build's bfloat16 is not token-exact against it (8 of 8 greedy sequences equal in float32, 4 of
    8 in bfloat16: issue 39); on GPUs the trainer computes in bf16 autocast over fp32 masters, and vLLM's own
    ``auto`` would downcast a float32 checkpoint to bfloat16 anyway (or float16 on a GPU without bf16)."""
    dtype = exp["trl"]["vllm"].get("dtype", "auto")
    if dtype != "auto":
        return dtype
    return "float32" if exp["trl"]["use_cpu"] else "bfloat16"


def server_gpus(exp: dict) -> int:
    """GPUs the vLLM server takes: trl.vllm.server_gpus in server mode, none otherwise."""
    return exp["trl"]["vllm"]["server_gpus"] if vllm_mode(exp) == "server" else 0


def processes(exp: dict) -> int:
    """trl.processes resolved: 1 on the CPU; on GPUs the node's GPUs less those of the vLLM server."""
    n = exp["trl"]["processes"]
    if n is not None:
        return n
    return 1 if exp["trl"]["use_cpu"] else max(exp["resources"]["gpus_per_node"] - server_gpus(exp), 1)


def micro_batch(exp: dict) -> int:
    """Completions per forward/backward micro-batch of one process (TRL per_device_train_batch_size)."""
    grpo = exp["grpo"]
    per_process = grpo["prompts_per_step"] * grpo["num_generations"] // processes(exp)
    return exp["trl"]["completions_per_device_batch"] or per_process


def check_trl_experiment(name: str, exp: dict, cfg=None) -> None:
    """What TRL (or torchrun, or vLLM) would only reject after the job queued and loaded the model, or never:
    batch arithmetic across processes, the vLLM layout, GPUs present, bf16 master weights, GPU memory."""
    grpo, trl, res = exp["grpo"], exp["trl"], exp["resources"]
    G, completions = grpo["num_generations"], grpo["prompts_per_step"] * grpo["num_generations"]
    where = f"config error: experiments.{name}"

    def fail(msg: str) -> None:
        raise ConfigError(f"{where}.{msg}")

    if G < 2:
        fail(f"grpo.num_generations = {G}: GRPO compares completions within a prompt's group, so it needs at least 2")
    gpu = not trl["use_cpu"]
    mode, n = vllm_mode(exp), processes(exp)
    if res["nodes"] > 1:
        fail(
            f"resources.nodes = {res['nodes']}: the TRL backend trains on one node (torchrun on one host); use nodes: 1, or backend: verl for several nodes"
        )
    if gpu and res["gpus_per_node"] < 1:
        fail(
            "resources.gpus_per_node = 0 with trl.use_cpu false: TRL on GPUs needs the node's GPUs; set gpus_per_node, or trl.use_cpu: true"
        )
    if gpu and n > res["gpus_per_node"]:
        fail(
            f"trl.processes = {n} exceeds resources.gpus_per_node = {res['gpus_per_node']}: one training process per GPU; lower trl.processes or raise gpus_per_node"
        )
    _check_vllm_layout(exp, mode, n, fail)
    if completions % n:
        fail(
            f"trl.processes = {n} does not divide the {completions} completions of a step (grpo.prompts_per_step × num_generations = {grpo['prompts_per_step']} × {G}): each process takes an equal share; use a divisor of {completions} or change the batch"
        )
    if grpo["prompts_per_step"] % n:
        # TRL's RepeatSampler lists each prompt G times in a row and every process takes the next
        # per_device_train_batch_size × steps_per_generation (= completions / n) of them: with a share that is not
        # whole groups a prompt's completions land on two processes, and a reward computed over the group (length,
        # z-norm) sees parts of it.
        fail(
            f"trl.processes = {n} does not divide grpo.prompts_per_step = {grpo['prompts_per_step']}: each process takes {completions // n} consecutive completions of a step, not a whole number of groups of grpo.num_generations = {G}, so a prompt's group would be split across processes; use a trl.processes that divides prompts_per_step (or change prompts_per_step)"
        )
    per_process = completions // n
    micro = trl["completions_per_device_batch"]
    if micro is not None and per_process % micro:
        fail(
            f"trl.completions_per_device_batch = {micro} does not divide the {per_process} completions each of the {n} process(es) takes per step (grpo.prompts_per_step × num_generations / trl.processes = {grpo['prompts_per_step']} × {G} / {n}): use a divisor of {per_process}"
        )
    sampling.check(exp, fail, uses_vllm=mode != "none")
    if gpu:
        _check_numerics(exp, fail)
        _check_gpu_memory(name, exp, fail)


def _check_vllm_layout(exp: dict, mode: str, n: int, fail) -> None:
    """Where vLLM runs: colocate on GPUs or the CPU, server on GPUs of its own beside the training processes."""
    vllm, res = exp["trl"]["vllm"], exp["resources"]
    tp, gpu = vllm["tensor_parallel_size"], not exp["trl"]["use_cpu"]
    if mode == "server" and not gpu:
        fail(
            "trl.vllm.mode = server with trl.use_cpu true: TRL syncs the trained weights into the server over NCCL, which needs GPUs; use trl.vllm.mode: colocate (or none) on the CPU"
        )
    if mode == "server" and n + vllm["server_gpus"] > res["gpus_per_node"]:
        fail(
            f"trl.processes = {n} and trl.vllm.server_gpus = {vllm['server_gpus']} need {n + vllm['server_gpus']} GPUs but resources.gpus_per_node = {res['gpus_per_node']}: the server and the training processes each take their own GPUs; lower one, or raise gpus_per_node"
        )
    if mode == "server" and vllm["server_gpus"] % tp:
        fail(
            f"trl.vllm.tensor_parallel_size = {tp} does not divide trl.vllm.server_gpus = {vllm['server_gpus']}: the server runs engines of tensor_parallel_size GPUs each; use a divisor of {vllm['server_gpus']}"
        )
    if mode == "colocate" and n % tp:
        fail(
            f"trl.vllm.tensor_parallel_size = {tp} does not divide trl.processes = {n}: TRL groups the processes into vLLM engines of tensor_parallel_size GPUs each; use a divisor of {n}"
        )
    engines = vllm["server_gpus"] // tp if mode == "server" else 1
    if vllm["check_weight_sync"] and (mode == "none" or tp != 1 or engines != 1):
        fail(
            f"trl.vllm.check_weight_sync = true with trl.vllm.mode = {mode}, tensor_parallel_size = {tp}: the check compares whole weights of one engine (a colocated one, or a server of one GPU), so it needs mode colocate or server, tensor_parallel_size 1 and server_gpus 1; set it false"
        )


def _check_numerics(exp: dict, fail) -> None:
    if exp["trl"]["param_dtype"] == "bfloat16" and not exp["grpo"]["lora"]["rank"]:
        if not exp["checks"]["allow_bf16_master_weights"]:
            from grpoflow.training.memory import TYPICAL_WEIGHT, bf16_half_spacing

            fail(
                f"trl.param_dtype = bfloat16 for a full fine-tune: AdamW would step bf16 master weights, where an update below half bf16's spacing "
                f"(|w| {TYPICAL_WEIGHT}: {bf16_half_spacing(TYPICAL_WEIGHT):.1e}; grpo.learning_rate = {exp['grpo']['learning_rate']:g}) rounds away; "
                "use trl.param_dtype: auto (fp32 masters under bf16 autocast), or set checks.allow_bf16_master_weights: true"
            )


def memory_estimate(name: str, exp: dict):
    from grpoflow.backends.trl.memory import estimate

    return estimate(name, exp, processes(exp), micro_batch(exp), vllm_mode(exp))


def _check_gpu_memory(name: str, exp: dict, fail) -> None:
    b = memory_estimate(name, exp)
    if b is None or not exp["checks"]["gpu_memory"]:
        return
    if not b.fits:
        fail(
            f"resources.gpu_mem_gb = {exp['resources']['gpu_mem_gb']:g}: {b.refusal()}; use a smaller trl.completions_per_device_batch, a lower trl.vllm.gpu_memory_utilization (now "
            f"{exp['trl']['vllm']['gpu_memory_utilization']}), LoRA, or checks.gpu_memory: false if you know better"
        )


def summary(name: str, exp: dict) -> str:
    """What `snakemake -n` shows for a TRL experiment on GPUs: the launch and the GPU-memory estimate."""
    from grpoflow.training.memory import fit_text

    fit = fit_text(memory_estimate(name, exp))
    server = f" on {server_gpus(exp)} GPU(s) of its own" if server_gpus(exp) else ""
    return f"train {name} with TRL on {processes(exp)} GPU process(es), vLLM {vllm_mode(exp)}{server} in {vllm_dtype(exp)}. {fit}"
