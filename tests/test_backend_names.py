"""Each training backend is the only place that knows it (issue 32): outside ``src/grpoflow/backends/`` no code
dispatches on a training backend's name; it asks the backend's interface (``grpoflow.backends.INTERFACE``).

The rule, over the Python of ``src/grpoflow`` and of the workflow (``Snakefile``, ``rules/*.smk`` as Snakemake's own
parser translates them, ``workflow/scripts``): a name of ``grpoflow.backends.registry.BACKENDS`` written as a string literal
may not be

- an operand of a comparison (``==``, ``!=``, ``in``, ``not in``, ``is``), alone or inside a tuple, list or set
  literal operand (``backend == "verl"``, ``backend in ("verl", "tunix")``);
- a key of a dict literal (a dispatch table: ``{"verl": CLUSTER, ...}.get(backend)``);
- a ``case`` pattern of a ``match``.

Other uses of the words are not dispatch and stay allowed: the registry itself (inside ``backends/``), reading a
backend's own config section (``exp.get("verl")``: the credentials check reads every section), constants naming a
package or a plane (``envcheck.VERL``, the ``tunix`` plane), the package list of ``grpoflow.provenance``, strings in
messages and docstrings. The schema YAML and docs are not code. ``ALLOWED`` lists any exception, with its reason.
"""

from __future__ import annotations

import ast

from archgraph import snakemake_python
from grpoflow_testing import REPO

from grpoflow.backends.registry import BACKENDS

NAMES = frozenset(BACKENDS)
# (path relative to the repo, line's name) -> why that dispatch is allowed. Empty: there is none today.
ALLOWED: dict[tuple[str, str], str] = {}


def _literal_names(node: ast.AST) -> list[str]:
    """The backend names a comparison operand spells: a string constant, or constants in a tuple/list/set."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [i.value for i in items if isinstance(i, ast.Constant) and i.value in NAMES]


def dispatches(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, name, code) of every comparison, dict key or match case on a training backend's name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                found += [(node.lineno, name, ast.unparse(node)) for name in _literal_names(operand)]
        elif isinstance(node, ast.Dict):
            found += [
                (node.lineno, k.value, ast.unparse(node)[:80])
                for k in node.keys
                if isinstance(k, ast.Constant) and k.value in NAMES
            ]
        elif isinstance(node, ast.MatchValue):
            found += [(node.lineno, name, ast.unparse(node)) for name in _literal_names(node.value)]
    return sorted(found)


def sources() -> list[tuple[str, ast.AST, dict[int, int]]]:
    """(path, tree, line map) of every file the rule covers."""
    out = []
    backends_dir = REPO / "src" / "grpoflow" / "backends"
    for path in sorted((REPO / "src" / "grpoflow").rglob("*.py")) + sorted((REPO / "workflow").rglob("*.py")):
        if backends_dir in path.parents:
            continue
        out.append((str(path.relative_to(REPO)), ast.parse(path.read_text(encoding="utf-8")), {}))
    for path in [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]:
        code, linemap = snakemake_python(path)
        out.append((str(path.relative_to(REPO)), ast.parse(code), linemap))
    return out


def test_no_code_outside_the_backends_dispatches_on_a_backend_name():
    found = dict.fromkeys(
        f"{path}:{linemap.get(line, line)}: {code}"
        for path, tree, linemap in sources()
        for line, name, code in dispatches(tree)
        if (path, name) not in ALLOWED
    )
    assert not found, (
        "dispatch on a training backend's name outside src/grpoflow/backends/ (ask the backend's interface, "
        "grpoflow.backends.INTERFACE, instead):\n" + "\n".join(found)
    )


def test_the_rule_sees_each_form_of_dispatch_and_passes_the_uses_that_are_not():
    """The detector itself, on the forms the workflow used before (rules/common.smk, grpoflow.deployment, preflight)."""
    caught = """
if exp["backend"] == "verl": pass
x = {"verl": 1, "tunix": 2}.get(backend)
y = backend in ("trl", "other")
match backend:
    case "tunix": pass
"""
    assert [(line, name) for line, name, _ in dispatches(ast.parse(caught))] == [
        (2, "verl"),
        (3, "tunix"),
        (3, "verl"),
        (4, "trl"),
        (6, "tunix"),
    ]
    allowed = """
section = exp.get("verl") or {}
VERL = ("verl", "verl==0.9.1")
TUNIX = "tunix"
raise ValueError("use backend: verl for several nodes")
pkgs = ["trl", "verl"]
"""
    assert dispatches(ast.parse(allowed)) == []


def test_the_allowlist_names_only_what_is_there():
    present = {(path, name) for path, tree, _ in sources() for _, name, _ in dispatches(tree)}
    assert set(ALLOWED) <= present, f"stale ALLOWED entries: {sorted(set(ALLOWED) - present)}"


def test_the_evaluation_backends_table_is_the_schemas_enum():
    """One table (grpoflow.evaluation.backends) answers for every evaluation backend the schema accepts."""
    from grpoflow.evaluation.backends import EVALUATION_BACKENDS
    from grpoflow.schema import load_schema

    enum = load_schema()["$defs"]["evaluation"]["properties"]["backend"]["enum"]
    assert sorted(enum) == sorted(EVALUATION_BACKENDS)
