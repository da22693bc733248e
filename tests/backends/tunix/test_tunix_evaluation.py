"""evaluation.backend: tunix (grpoflow.backends.tunix.generate), for real on CPU JAX in the Tunix environment:

- through the DAG, on a copy of the session's shortened run (conftest.short_local_run, evaluated there with
  transformers): switching the backend reruns only the asked evaluations, in .venv-tunix, one at a time (the tpu
  resource), and the demo's SFT model gets the very completions, token counts, stop reasons and verdicts that
  transformers gave it under greedy decoding;
- sampled decoding: k completions per prompt, reproducible from the seed, different between samples and seeds.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from grpoflow_testing import LOCAL_PROFILE, SHORT_CONFIG, copy_workdir, snakemake
from tunixkit import TUNIX_PYTHON, require_tunix, run_tunix

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tunix-eval")]  # one worker builds its fixture

MODEL = "tiny-arith-sft"  # the demo's SFT model: it answers, and stops, unlike a random one
BENCHMARKS = ("arith", "gsm8k_sample")
# Everything a samples.jsonl record says about a completion (all of them but the prompt, compared separately).
RECORD = ("index", "id", "sample", "ground_truth", "response", "response_tokens", "finish_reason", "truncated",
          "extracted", "found", "source", "correct", "partial", "format_ok", "reason")  # fmt: skip


def read_samples(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def tunix_eval(short_local_run, tmp_path_factory):
    """The shortened run's copy with evaluation.backend: tunix, the SFT model re-evaluated on both benchmarks with
    two cores and one core per evaluation (so only the tpu resource keeps the two jobs apart)."""
    require_tunix()
    wd = copy_workdir(short_local_run, tmp_path_factory.mktemp("tunix-eval") / "wd")
    overlay = wd / "tunix-eval.yaml"
    overlay.write_text(yaml.safe_dump({"evaluation": {"backend": "tunix", "resources": {"cpus_per_task": 1}}}))
    targets = [f"results/{MODEL}/eval/{b}.json" for b in BENCHMARKS]
    proc = snakemake([*LOCAL_PROFILE, "--cores", "2", *targets, "--configfile", *SHORT_CONFIG[1:], str(overlay)], wd)
    return short_local_run, wd, proc.stdout + proc.stderr


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_greedy_tunix_completions_equal_the_transformers_ones(tunix_eval, benchmark):
    before, after, _ = tunix_eval
    want = read_samples(before / f"results/{MODEL}/eval/{benchmark}.samples.jsonl")
    got = read_samples(after / f"results/{MODEL}/eval/{benchmark}.samples.jsonl")
    assert [r["prompt"] for r in got] == [r["prompt"] for r in want]  # same chat rendering, in the Tunix env too
    assert [{k: r[k] for k in RECORD} for r in got] == [{k: r[k] for k in RECORD} for r in want]
    assert {r["finish_reason"] for r in got} == {"stop"} or benchmark == "gsm8k_sample"  # arith answers and stops
    old, new = (json.loads((wd / f"results/{MODEL}/eval/{benchmark}.json").read_text()) for wd in (before, after))
    assert new["metrics"] == old["metrics"] and new["answer_sources"] == old["answer_sources"]
    assert old["generation"]["backend"] == "transformers"
    gen = new["generation"]
    assert gen["backend"] == "tunix" and gen["device"] == "cpu" and gen["dtype"] == "float32"
    assert gen["stop_token_ids"] == old["generation"]["stop_token_ids"] and gen["mesh"] == {"fsdp": 1, "tp": 1}


def test_tunix_evaluations_ran_in_the_tunix_environment_one_at_a_time(tunix_eval):
    _, wd, output = tunix_eval
    for benchmark in BENCHMARKS:
        log = (wd / f"logs/evaluate/{MODEL}/{benchmark}.log").read_text()
        assert f"job interpreter: {TUNIX_PYTHON}" in log, log[:400]
        assert "environment check for evaluate (backend tunix) passed" in log
    # Snakemake's own account: each evaluate job finishes before the next one starts.
    events = re.findall(r"^(?:local)?rule evaluate:|^Finished jobid: \d+ \(Rule: evaluate\)", output, re.M)
    assert [e.startswith("Finished") for e in events] == [False, True, False, True], events


SAMPLED = """
import json, sys
from grpoflow.backends.tunix import generate as tunix_generate
from grpoflow.generation import ModelSource, encode_prompts, load_tokenizer, render_prompts, stop_token_ids
from grpoflow.evaluation.settings import generation_settings, with_defaults
source = ModelSource("m", "external", sys.argv[1])
tok = load_tokenizer(source)
questions = ["What is 12 + 35?", "What is 90 - 7?", "What is 12 + 35?"]  # batches of 2: the third has seed + 1
ids = encode_prompts(tok, render_prompts(tok, [[{"role": "user", "content": q}] for q in questions]))
gen = generation_settings(with_defaults({"preset": "liberal", "samples": 4, "max_new_tokens": 12, "batch_size": 2}))
runs = [tunix_generate.generate(source, tok, ids, gen, stop_token_ids(tok, source))[0] for _ in range(2)]
print(json.dumps([[[c.text for c in per] for per in run] for run in runs]))
"""


def test_sampled_decoding_draws_k_completions_reproducibly_from_the_seed(tunix_eval):
    before, _, _ = tunix_eval
    model = json.loads((before / f"results/{MODEL}/eval/arith.json").read_text())["model_source"]["path"]
    model = model if Path(model).is_absolute() else str(before / model)
    first, again = json.loads(run_tunix(["-c", SAMPLED, model]).stdout.splitlines()[-1])
    assert len(first) == 3 and all(len(per) == 4 for per in first)
    assert first == again  # the same seed draws the same completions
    assert first[0] != first[2]  # the same prompt in the next batch (seed + 1) draws others
    assert any(len(set(per)) > 1 for per in first)  # the samples of one prompt differ
