"""No training backend's name, modules or knowledge outside its folder (issue 42), stronger than
tests/test_backend_names.py (which fails on dispatch: a comparison, dict key or ``case`` on a name). The rules and
what "outside" means: tests/archknowledge.py. Today's code breaks them in many places; the test is marked
``xfail(strict=True)`` and its failure is the list (the refactor's to-do). ``ALLOWED`` takes an exception with its
reason; the day the list is empty the marker goes.
"""

from __future__ import annotations

import ast

import archknowledge as K
import pytest

# (path, rule, backend) -> why it may stay. Empty: the target is that nothing may.
ALLOWED: dict[tuple[str, str, str], str] = {}


def violations() -> list[K.Finding]:
    return [f for f in K.findings() if (f.path, f.rule, f.backend) not in ALLOWED]


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="issue 42: backends are known outside their folders (rules/common.smk imports backends.tunix.device, "
    "GRPOFLOW_TUNIX_TPU in train.smk, envcheck's verl and TRL checks, rewards/'s trainer adapters, "
    "backends/tunix/generate.py, @register_backend_check, ...): the failure lists every place",
)
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
