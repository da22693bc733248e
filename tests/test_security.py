"""Security properties, checked as a user runs the workflow:

- model code: no model's own Python code runs unless trust_remote_code is set for that model (an audit of every
  model load in src/grpoflow, and end to end: a model dir with `auto_map` code is refused with one line before
  anything loads it; with the per-model setting the loaders do run it);
- credentials come from the environment only: a credential in the config is refused (it would be printed with
  the training command), and the logs and outputs of a run that uploads with HF_TOKEN set never contain it
  (the SLURM pipeline test checks the same for every job of a cluster run: tests/slurm);
- reward code never executes model text, nor ground truths from data files (tests/rewards/test_safety.py covers
  the verifier; here every registered reward through both trainers' entry points).
"""

from __future__ import annotations

import ast
import json
import secrets
import sys
from pathlib import Path

import pytest
import yaml
from grpoflow_testing import LOCAL_PROFILE, REPO, SHORT_CONFIG, copy_workdir, make_workdir, snakemake

SRC = REPO / "src" / "grpoflow"


# ---- trust_remote_code ------------------------------------------------------------------------------------------


def _model_loads() -> list[tuple[str, int, ast.Call]]:
    """Every call in src/grpoflow that loads a model, tokenizer or config: *.from_pretrained(...), vllm LLM(...),
    and TRL's model_init_kwargs (GRPOTrainer loads the policy from them)."""
    calls = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name in ("from_pretrained", "LLM"):
                    calls.append((str(path.relative_to(REPO)), node.lineno, node))
    return calls


def _true_literal(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def test_no_model_load_trusts_remote_code_by_itself():
    loads = _model_loads()
    assert len(loads) >= 10  # the audit found the loads (evaluation, training, merge, demo)
    for where, line, call in loads:
        for kw in call.keywords:
            assert not (kw.arg == "trust_remote_code" and _true_literal(kw.value)), (
                f"{where}:{line} sets trust_remote_code=True"
            )
            assert kw.arg is not None or not isinstance(kw.value, ast.Dict), (
                f"{where}:{line} passes **{{...}}: audit it"
            )
    # Nowhere else either: no literal True for trust_remote_code in a dict or keyword anywhere in the package.
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    assert not (isinstance(k, ast.Constant) and k.value == "trust_remote_code" and _true_literal(v)), (
                        f"{path}:{node.lineno}"
                    )
            if isinstance(node, ast.keyword) and node.arg == "trust_remote_code":
                assert not _true_literal(node.value), f"{path}: trust_remote_code=True"


def test_trust_remote_code_defaults_to_false_in_the_schema(default_config):
    from grpoflow.config import resolve_config

    cfg = resolve_config(
        {**default_config, "evaluation": {**default_config["evaluation"], "models": {"ext": {"path": "org/model"}}}}
    )
    assert all(cfg.experiment(e)["sft"]["trust_remote_code"] is False for e in cfg.experiments)
    assert cfg.models["ext"]["trust_remote_code"] is False


def _remote_code_model(root: Path, sentinel: Path) -> Path:
    """A model dir whose config.json points transformers at Python files shipped with it, which would write
    ``sentinel`` when imported; plus a working tokenizer with a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    root.mkdir(parents=True)
    vocab = {
        t: i
        for i, t in enumerate(
            ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "[UNK]", *"abcdefghijklmnopqrstuvwxyz0123456789 +-=?\n"]
        )
    }
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template="{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    ).save_pretrained(root)
    (root / "config.json").write_text(
        json.dumps(
            {
                "model_type": "grpoflow_probe",
                "architectures": ["ProbeForCausalLM"],
                "auto_map": {
                    "AutoConfig": "configuration_probe.ProbeConfig",
                    "AutoModelForCausalLM": "modeling_probe.ProbeForCausalLM",
                },
            }
        )
    )
    payload = f"from pathlib import Path\nPath({str(sentinel)!r}).write_text('model code ran')\n"
    (root / "configuration_probe.py").write_text(
        payload
        + "from transformers import PretrainedConfig\n\n\nclass ProbeConfig(PretrainedConfig):\n    model_type = 'grpoflow_probe'\n"
    )
    (root / "modeling_probe.py").write_text(payload)
    (root / "model.safetensors").write_bytes(b"")
    return root


def _failure_line(proc) -> str:
    out = proc.stdout + proc.stderr
    lines = {ln.strip() for ln in out.splitlines() if ln.startswith("grpoflow: error: ")}
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in out, out[-3000:]
    return lines.pop()


def test_model_with_its_own_code_is_refused_unless_trusted_per_model(tmp_path):
    """GRPO from such a model, and its evaluation: one line naming the setting, before anything loads it (for
    training already in discover_sft_checkpoint, on the login node, before any job is submitted). With the
    model's own trust_remote_code: true the loaders do import its code: the setting is what guards it."""
    sentinel = tmp_path / "model-code-ran"
    model = _remote_code_model(tmp_path / "probe", sentinel)
    wd = make_workdir(tmp_path)
    (wd / "bench.jsonl").write_text((REPO / "data/gsm8k_sample/test.jsonl").read_text().splitlines()[0] + "\n")

    def run(trusted: bool, target: str):
        config = {
            "datasets": {
                "arith": {"source": "synthetic", "format": "gsm8k", "synthetic": {"train_size": 40, "test_size": 4}}
            },
            "experiments": {
                "probe": {
                    "backend": "trl",
                    "data": {"dataset": "arith", "val_split": None},
                    "sft": {"model": str(model)},
                    "grpo": {"total_steps": 1},
                    "trl": {"use_cpu": True},
                }
            },
            "evaluation": {
                "models": {"ext": {"path": str(model), "trust_remote_code": trusted}},
                "benchmarks": {
                    "mine": {"path": "bench.jsonl", "prompt_key": "question", "answer_key": "answer", "format": "gsm8k"}
                },
            },
        }
        (wd / "probe.yaml").write_text(yaml.safe_dump(config))
        return snakemake([*LOCAL_PROFILE, target, "--configfile", "probe.yaml"], wd, check=False)

    proc = run(False, "results/probe/training_complete.json")
    assert _failure_line(proc) == (
        f"grpoflow: error: {model} ships its own Python code (config.json auto_map: AutoConfig, AutoModelForCausalLM), "
        "which is only run when allowed: set sft.trust_remote_code: true if you trust that code"
    )
    assert "Error in rule discover_sft_checkpoint" in proc.stdout + proc.stderr
    line = _failure_line(run(False, "results/ext/eval/mine.json"))
    assert line.endswith(
        "which is only run when allowed: set evaluation.models.ext.trust_remote_code: true if you trust that code"
    )
    assert not sentinel.exists()

    proc = run(True, "results/ext/eval/mine.json")
    assert proc.returncode == 1  # the probe is not a working model; what matters is that its code was imported
    assert sentinel.read_text() == "model code ran"


# ---- credentials --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overlay,key",
    [
        ({"defaults": {"trl": {"extra_args": {"hub_token": "hf_xxx"}}}}, "trl.extra_args.hub_token"),
        ({"defaults": {"verl": {"env": {"WANDB_API_KEY": "k"}}}}, "verl.env.WANDB_API_KEY"),
        (
            {"defaults": {"verl": {"extra_overrides": ["+ray_kwargs.ray_init.runtime_env.env_vars.HF_TOKEN=hf_xxx"]}}},
            "verl.extra_overrides",
        ),
    ],
)
def test_credentials_in_the_config_are_refused(default_config, overlay, key):
    from grpoflow.config import deep_merge, load_config_files, resolve_config
    from grpoflow.errors import ConfigError

    base = default_config if "trl" in str(overlay) else load_config_files([str(REPO / "config/qwen3-8b-gsm8k.yaml")])
    with pytest.raises(ConfigError) as err:
        resolve_config(deep_merge(json.loads(json.dumps(base)), overlay))
    assert (
        f".{key}" in str(err.value)
        and "is a credential" in str(err.value)
        and "export it in the shell that runs snakemake" in str(err.value)
    )


def test_harmless_names_that_contain_token_are_accepted():
    from grpoflow.credentials import is_credential_name

    assert not any(
        map(
            is_credential_name,
            [
                "TOKENIZERS_PARALLELISM",
                "NCCL_DEBUG",
                "WANDB_PROJECT",
                "VLLM_USE_V1",
                "push_to_hub",
                # verl and TRL settings (the first one once failed CI: a false credential)
                "response_key",
                "prompt_key",
                "reward_fn_key",
                "ppo_max_token_len_per_gpu",
                "log_prob_max_token_len_per_gpu",
                "pad_token",
                "eos_token",
                "max_tokens",
            ],
        )
    )
    assert all(
        map(
            is_credential_name,
            [
                "HF_TOKEN",
                "HUGGING_FACE_HUB_TOKEN",
                "WANDB_API_KEY",
                "AWS_SECRET_ACCESS_KEY",
                "hub_token",
                "token",
                "access_token",
                "WANDB_KEY_SECRET",
                "db_password",
                "OPENAI_API_KEY",
            ],
        )
    )


def files_containing(root: Path, secret: str) -> list[str]:
    """Every file under ``root`` (logs, outputs, Snakemake's own records) that contains ``secret``."""
    needle = secret.encode()
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink() and needle in p.read_bytes()
    )


@pytest.mark.slow
def test_upload_run_with_hf_token_logs_and_writes_no_token(short_local_run, tmp_path):
    """The upload job, end to end against the stand-in Hub: once accepted (the token is used), once rejected (the
    error names the failure, not the token). Neither the logs, nor Snakemake's records, nor any output hold it."""
    sys.path.insert(0, str(REPO / "tests" / "hub"))
    from fakehub import FakeHub

    token = "hf_" + secrets.token_hex(17)
    wd = copy_workdir(short_local_run, tmp_path / "wd")
    overlay = tmp_path / "upload.yaml"
    overlay.write_text(yaml.safe_dump({"defaults": {"upload": {"enabled": True, "repo_id": "grpoflow-test/tiny"}}}))
    target = "results/tiny-arith-seed1/upload.json"
    with FakeHub(token) as hub:
        env = {"HF_TOKEN": token, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf-home")}
        snakemake([*LOCAL_PROFILE, target, "--configfile", *SHORT_CONFIG[1:], str(overlay)], wd, env=env)
        assert json.loads((wd / target).read_text())["sent"] is True
        wrong = "hf_" + secrets.token_hex(17)
        overlay.write_text(
            yaml.safe_dump(
                {"defaults": {"upload": {"enabled": True, "repo_id": "grpoflow-test/tiny", "revision": "other"}}}
            )
        )
        proc = snakemake(
            [*LOCAL_PROFILE, target, "--configfile", *SHORT_CONFIG[1:], str(overlay)],
            wd,
            env={**env, "HF_TOKEN": wrong},
            check=False,
        )
    assert _failure_line(proc).startswith(
        "grpoflow: error: upload of tiny-arith-seed1 to grpoflow-test/tiny@other failed: "
    )
    assert wrong not in proc.stdout + proc.stderr and token not in proc.stdout + proc.stderr
    assert files_containing(wd, token) == [] and files_containing(wd, wrong) == []


# ---- reward code and model text ------------------------------------------------------------------------------

PAYLOADS = [
    "__import__('os').system('touch {m}')",
    "exec(\"open('{m}', 'w').write('x')\")",
    "eval(\"__import__('pathlib').Path('{m}').touch()\")",
    "(lambda: __import__('pathlib').Path('{m}').touch())()",
    "__import__('subprocess').run(['touch', '{m}'])",
]


def test_no_reward_executes_model_text_or_ground_truth(tmp_path):
    """Every registered reward, through the TRL adapter and verl's compute_score, with Python in the completions
    (boxed, tagged, after '####', in prose) and in the ground truths (a poisoned data file)."""
    from grpoflow.backends.trl.rewards import build_reward_funcs
    from grpoflow.backends.verl.rewards import compute_score
    from grpoflow.rewards import REGISTRY

    marker = tmp_path / "pwned"
    texts = [p.format(m=marker) for p in PAYLOADS]
    wrappers = ("<think>{0}</think>\\boxed{{{0}}}", "<answer>{0}</answer>", "#### {0}", "The answer is {0}.")
    completions = [w.format(t) for t in texts for w in wrappers]
    truths = texts + ["5"]
    names = sorted(REGISTRY)
    rewards = {"funcs": names, "weights": None, "normalize": "none", "eps": 1e-6, "params": {}}
    trl = build_reward_funcs(rewards, num_generations=len(completions), max_response_length=8192)
    for truth in truths:
        prompts = [[{"role": "user", "content": "1+1?"}]] * len(completions)
        for fn in trl.reward_funcs:
            scores = fn(prompts=prompts, completions=completions, ground_truth=[truth] * len(completions))
            assert len(scores) == len(completions)
        for c in completions:
            out = compute_score(
                "grpoflow/arith", c, truth, {}, funcs=names, params={"soft_overlong": {"max_len": 8192}}
            )
            assert out["acc"] in (0.0, 1.0)
    assert not marker.exists(), "a reward executed model text or a ground truth"
