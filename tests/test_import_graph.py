"""The import graph of src/grpoflow, derived from the source (tests/archgraph.py: every ``import`` and ``from ...
import``, at module level or inside a function; ``importlib`` targets; ``if TYPE_CHECKING:`` imports and the names
annotations use, for the type level): no import circle.

Kept passing (each failure prints the circles, and an edge of each with its file and line):

- no circle among the static imports (module level and inside functions);
- no circle once ``importlib`` targets are edges (literals, f-strings over the backends' names, registry tables);
- no package depends on itself through others (packages: ``archgraph.package_of``, each backend its own);
- no circle at the type level (annotations, ``TYPE_CHECKING`` imports, string annotations).
"""

from __future__ import annotations

import archgraph as A


def describe(g: dict[str, set[str]], kinds, collapse=None) -> str:
    """Each circle: its members, one closed path through it, and every arrow inside it with one edge that makes it
    (file:line); ``^`` marks an arrow against the layers of the static graph (module level and in-function imports)
    at the same granularity: the arrows to cut first."""
    static = A.layers(A.graph(A.STATIC, collapse))
    out = []
    for component in A.circles(g):
        out.append(f"circle of {len(component)}: {', '.join(sorted(component))}")
        out.append(f"  e.g. {' -> '.join(A.a_cycle(g, component))}")
        for a in sorted(component):
            for b in sorted(g[a] & component):
                edge = A.edges_between(a, b, kinds, collapse)[0]
                mark = "^" if static[b] >= static[a] else " "
                out.append(f"  {mark} {a} -> {b}: {edge.where()} ({edge.source} -> {edge.target}, {edge.kind})")
    return "\n".join(out)


def test_the_graph_is_read_from_the_source():
    graph = A.graph(A.STATIC)
    assert "grpoflow.errors" in graph["grpoflow.config"]  # module level
    assert "grpoflow.envcheck" in graph["grpoflow.job"]  # inside a function
    assert graph["grpoflow.errors"] == set() and graph["grpoflow.hubid"] == set()


def test_no_import_circle():
    assert A.circles(A.graph(A.STATIC)) == []


def test_the_circle_finder_finds_one():
    assert A.circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_every_importlib_call_is_an_edge():
    """Each ``import_module`` / ``__import__`` in src/ is followed: a literal, an f-string over the registries' names,
    or a registry table named in archgraph.DYNAMIC_ARGUMENTS."""
    assert A.unresolved_dynamic_imports() == [], (
        "importlib calls the graph cannot follow: name the registry table each reads in archgraph.DYNAMIC_ARGUMENTS"
    )
    dynamic = {(e.source, e.target) for e in A.edges() if e.kind == "dynamic"}
    registry = {(e.source, e.target) for e in A.edges() if e.kind == "module"}
    assert ("grpoflow.backends.registry", "grpoflow.backends.verl") in registry  # a registry line, no importlib
    assert ("grpoflow.evaluation.run", "grpoflow.evaluation.vllm_backend") in dynamic  # EVALUATION_BACKENDS's modules
    assert ("grpoflow.job", "grpoflow.merge") in dynamic  # SHELL_JOBS's modules


def test_the_graph_reads_each_kind_of_edge(tmp_path, monkeypatch):
    """Dynamic imports (literal, f-string over the registry's names, a registry table), TYPE_CHECKING imports and
    annotations, on a package written here."""
    pkg = tmp_path / "grpoflow"
    (pkg / "backends" / "x").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "low.py": "class T: ...\n",
        "backends/__init__.py": "",
        "backends/registry.py": "from grpoflow.backends.x import BACKEND as x\n",
        "backends/x/__init__.py": "",
        "backends/x/run.py": "",
        "table.py": 'TABLE = {"a": ("grpoflow.low", 1)}\n',
        "user.py": (
            "import importlib\nfrom typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from grpoflow.low import T\n"
            "def f(b, module) -> 'T':\n"
            '    importlib.import_module(f"grpoflow.backends.{b}.run")\n'
            "    importlib.import_module(module)\n"
            '    __import__("grpoflow.table")\n'
        ),
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    monkeypatch.setattr(A, "SRC", tmp_path)
    monkeypatch.setattr(A, "REPO", tmp_path)
    monkeypatch.setattr(A, "DYNAMIC_ARGUMENTS", {("grpoflow.user", "module"): ("grpoflow.table", "TABLE")})
    for cached in (A.modules, A.edges, A.tree):
        cached.cache_clear()
    try:
        found = {(e.target, e.kind) for e in A.edges() if e.source == "grpoflow.user"}
    finally:
        monkeypatch.undo()
        for cached in (A.modules, A.edges, A.tree):
            cached.cache_clear()
    assert found == {
        ("grpoflow.backends.x.run", "dynamic"),
        ("grpoflow.low", "dynamic"),
        ("grpoflow.table", "dynamic"),
        ("grpoflow.low", "type"),
    }


def test_layers_and_arrows_against_them():
    """Layer = 1 + the highest layer below (0: depends on nothing); a circle shares one layer; an arrow against the
    layer order goes to the node's own layer or above."""
    g = {"top": {"mid", "low"}, "mid": {"low"}, "low": set(), "c1": {"c2"}, "c2": {"c1", "low"}}
    assert A.layers(g) == {"top": 2, "mid": 1, "low": 0, "c1": 1, "c2": 1}
    up = A.Edge("low", "top", "dynamic", "f.py", 1)
    down = A.Edge("top", "low", "module", "f.py", 2)
    across = A.Edge("c1", "c2", "module", "f.py", 3)
    assert A.against_the_layers([up, down, across], A.layers(g)) == [up, across]


def test_packages_are_folders_and_each_backend_is_its_own():
    assert A.package_of("grpoflow.config") == "config"
    assert A.package_of("grpoflow.evaluation.settings") == "evaluation"
    assert A.package_of("grpoflow.backends.verl.checks") == "backends.verl"
    assert A.package_of("grpoflow.backends.common") == "backends"
    assert A.area_of("grpoflow.backends.verl.checks") == "backends"


def test_no_import_circle_through_importlib():
    g = A.graph(A.RUNTIME)
    assert A.circles(g) == [], "import circles through importlib:\n" + describe(g, A.RUNTIME)


def test_no_package_depends_on_itself_through_others():
    g = A.graph(A.RUNTIME, A.package_of)
    assert A.circles(g) == [], "packages that depend on themselves through others:\n" + describe(
        g, A.RUNTIME, A.package_of
    )


def test_no_circle_at_the_type_level():
    g = A.graph(A.TYPE)
    assert A.circles(g) == [], "circles at the type level:\n" + describe(g, A.TYPE)
