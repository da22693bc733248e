"""No training backend's name, modules or knowledge outside its folder (issue 42), stronger than
tests/test_backend_names.py (which fails on dispatch: a comparison, dict key or ``case`` on a name). The rules and
what "outside" means: tests/archknowledge.py. A failure lists every place that breaks them; ``ALLOWED`` takes an
exception only with its reason (keyed by file, rule and backend, so an entry covers every such line of that file).
"""

from __future__ import annotations

import ast

import archknowledge as K

# (path, rule, backend) -> why it may stay. The target is that nothing may without a reason.
RERUN = (
    "renaming it changes the rule's shell line, which reruns every finished job of the rule (Snakemake's code trigger)"
)
PLANE = (
    "the Tunix plane (grpoflow.planes.TUNIX: an environment, requirements/tunix.lock and the config key tunix_env, "
    "named after the library it holds; the tunix backend's jobs run in it): a plane's name, not the backend's"
)
ALLOWED: dict[tuple[str, str, str], str] = {
    ("rules/train.smk", "key", "tunix"): f"GRPOFLOW_TUNIX_TPU, exported in train_grpo's shell line: {RERUN}",
    ("rules/evaluate.smk", "key", "tunix"): f"GRPOFLOW_TUNIX_TPU, exported in evaluate's shell line: {RERUN}",
    ("rules/common.smk", "definition", "tunix"): f"ENV_TUNIX, the conda env file of {PLANE}",
    ("rules/common.smk", "key", "tunix"): f"envs/tunix.yaml, the conda env file of {PLANE}",
    ("src/grpoflow/deployment.py", "definition", "tunix"): f"tunix_venv_python, .venv-tunix's interpreter: {PLANE}",
    ("src/grpoflow/planes.py", "definition", "tunix"): PLANE,
    ("src/grpoflow/envcheck.py", "definition", "tunix"): f"HOW_TO_PICK_TUNIX, how to pick the interpreter of {PLANE}",
    ("src/grpoflow/envcheck.py", "key", "tunix"): f"tunix_env and requirements/tunix.lock in how to pick {PLANE}",
    ("src/grpoflow/planes.py", "name", "tunix"): PLANE,
    ("src/grpoflow/schema/config.schema.yaml", "schema text", "tunix"): (
        f"the descriptions of the config key tunix_env and its sub-keys (users' configs write it: not renamed), the "
        f"environment of {PLANE}; what the tunix backend runs there is its schema.yaml's x-describes"
    ),
    ("src/grpoflow/envcheck.py", "key", "trl"): (
        "`python -m grpoflow.envcheck train-trl-gpu ...` runs in finished TRL-on-GPU runs' train_grpo commands (a "
        "param: renaming it reruns them); envcheck forwards that one kind to the TRL backend's module, in a new process"
    ),
    (
        "src/grpoflow/provenance.py",
        "name",
        "trl",
    ): "the trl distribution's name, among the libraries provenance records",
    (
        "src/grpoflow/provenance.py",
        "name",
        "verl",
    ): "the verl distribution's name, among the libraries provenance records",
}


def violations() -> list[K.Finding]:
    return [f for f in K.findings() if (f.path, f.rule, f.backend) not in ALLOWED]


def test_no_backend_is_known_outside_its_folder():
    found = violations()
    by_rule: dict[str, int] = {}
    for f in found:
        by_rule[f.rule] = by_rule.get(f.rule, 0) + 1
    summary = ", ".join(f"{n} {rule}" for rule, n in sorted(by_rule.items()))
    assert not found, (
        f"{len(found)} places outside a backend's folder know it ({summary}); each belongs in the backend's folder "
        "(or in ALLOWED, with its reason):\n" + "\n".join(map(str, found))
    )


def test_the_allowlist_names_only_what_is_there():
    present = {(f.path, f.rule, f.backend) for f in K.findings()}
    assert set(ALLOWED) <= present, f"stale ALLOWED entries: {sorted(set(ALLOWED) - present)}"


def test_the_rules_see_each_form_and_pass_the_uses_that_are_not_knowledge():
    """The detector on Python written here, as a file outside every backend's folder."""
    code = '''
"""A docstring naming verl, trl.vllm and GRPOFLOW_TUNIX_TPU is not code."""
import importlib
backend = "verl"
key = "trl.vllm.mode"
os.environ["GRPOFLOW_TUNIX_TPU"] = ""
override = "actor_rollout_ref.rollout.n=8"
def check_trl_gpu(spec): pass
importlib.import_module(f"grpoflow.backends.{backend}.merge")
message = f"trained with TRL on {n} GPUs"
other = "backend_name"
'''
    found = sorted((f.line, f.rule, f.backend) for f in K.python_findings("x.py", ast.parse(code), None, {}))
    assert found == [
        (4, "name", "verl"),
        (5, "key", "trl"),
        (6, "key", "tunix"),
        (7, "key", "verl"),
        (8, "definition", "trl"),
        (9, "layout", "every"),
    ]
    inside_trl = K.python_findings("src/grpoflow/backends/trl/x.py", ast.parse('k = "trl.vllm.mode"'), "trl", {})
    assert inside_trl == []  # a backend's own folder may know it


def test_a_backend_registering_itself_is_seen():
    code = (
        "from grpoflow.config import register_backend_check\n"
        "from grpoflow.backends.trl.table import register_here\n"
        "@register_backend_check('trl')\ndef check(name, exp, cfg=None): pass\n"
        "@register_here\ndef own(): pass\n"
    )
    module = "grpoflow.backends.trl.commandline"
    found = K.self_registrations("p.py", module, ast.parse(code), "trl")
    assert [(f.line, f.text) for f in found] == [(3, "@register_backend_check('trl') (grpoflow.config)")]


def test_identifiers_split_into_words():
    assert K.name_tokens("check_trl_gpu") == {"check", "trl", "gpu"}
    assert K.name_tokens("HOW_TO_PICK_TUNIX") == {"how", "to", "pick", "tunix"}
    assert K.name_tokens("TrlRewards") == {"trl", "rewards"}
