"""The architecture's instruments, read from the source (no import of the code it measures): the module graph of
``src/grpoflow`` with every kind of edge, the package graph, the type-level graph, their circles and layers, and the
arrows that run against the layer order. Used by tests/test_import_graph.py, tests/test_backend_knowledge.py and
benchmarks/architecture.py (which prints the figures of issue 42's closing note).

Edges, each with the file and line that makes it:

- ``module``: an ``import`` / ``from ... import`` at module level (outside ``if TYPE_CHECKING:``);
- ``function``: the same inside a function or method body (it runs when the function is called);
- ``dynamic``: an ``importlib.import_module(...)`` / ``import_module(...)`` / ``__import__(...)`` call. Its targets:
  a string literal; an f-string, with each ``{...}`` replaced by every name of the registries in ``REGISTRY_NAMES``
  (``f"grpoflow.backends.{backend}.merge"``: one edge per backend that has that module); any other argument by
  the module names written in the registry table ``DYNAMIC_ARGUMENTS`` names for that call site (the evaluation
  backends' modules for ``grpoflow.evaluation.run``). A call none of these resolves is listed by ``unresolved_dynamic_imports``
  (a test fails on it: name its registry in ``DYNAMIC_ARGUMENTS``);
- ``type``: an import under ``if TYPE_CHECKING:``, and every name an annotation uses (string annotations parsed)
  that the module imported from another grpoflow module, by any import.

The *runtime* graph is module + function + dynamic edges (what can run); the *static* graph module + function (what
the original circle test and docs/ARCHITECTURE.md's layers count); the *type-level* graph the ``type`` edges alone
(which module's annotations name which module's types).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src"
ROOT = "grpoflow"

STATIC = frozenset({"module", "function"})
RUNTIME = STATIC | {"dynamic"}
TYPE = frozenset({"type"})
ALL = RUNTIME | TYPE

# A dynamic import whose argument is neither a literal nor an f-string: (calling module, the argument as written) ->
# (module, table) whose module-name strings are its targets. Each table is a registry written in the source.
DYNAMIC_ARGUMENTS: dict[tuple[str, str], tuple[str, str]] = {
    ("grpoflow.job", "module"): ("grpoflow.job", "SHELL_JOBS"),
    ("grpoflow.evaluation.run", "evaluation_backend(run.backend).module"): (
        "grpoflow.evaluation.backends",
        "EVALUATION_BACKENDS",
    ),
}
# The registries whose names an f-string's ``{...}`` stands for: (module, table) -> its keys are the names.
REGISTRY_NAMES: tuple[tuple[str, str], ...] = ()
# The training backends' registry: one import line per backend, ``from grpoflow.backends.<name> import BACKEND as
# <name>`` (its names are those of the f-strings too).
BACKEND_REGISTRY = "grpoflow.backends.registry"


@dataclass(frozen=True, order=True)
class Edge:
    source: str
    target: str
    kind: str
    path: str  # relative to the repository
    line: int

    def where(self) -> str:
        return f"{self.path}:{self.line}"


# ---- the modules and their syntax trees ---------------------------------------------------------------------------


@lru_cache(maxsize=1)
def modules() -> dict[str, Path]:
    """Every module of src/grpoflow by dotted name (a package by its own name, for its ``__init__.py``)."""
    out = {}
    for path in sorted((SRC / ROOT).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


@lru_cache(maxsize=None)
def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def owner(name: str) -> str | None:
    """The module of src/grpoflow a dotted name lives in (``grpoflow.config.WorkflowConfig`` -> ``grpoflow.config``)."""
    mods = modules()
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _package(module: str) -> str:
    """The package a module's relative imports are anchored at."""
    return module if modules()[module].name == "__init__.py" else module.rpartition(".")[0]


def is_type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


def _nodes(node: ast.AST, in_function=False, in_type_checking=False):
    """(node, inside a function body, inside ``if TYPE_CHECKING:``) for every node under ``node``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(node, ast.If) and is_type_checking(node.test) and child in node.body:
            yield from _visit(child, in_function, True)
        else:
            yield from _visit(child, in_function, in_type_checking)


def _visit(node, in_function, in_type_checking):
    yield node, in_function, in_type_checking
    inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
    yield from _nodes(node, inner, in_type_checking)


def import_targets(module: str, node: ast.Import | ast.ImportFrom) -> list[tuple[str, str]]:
    """(bound name, imported dotted name) of one import statement, relative imports resolved."""
    if isinstance(node, ast.Import):
        return [(a.asname or a.name.partition(".")[0], a.name) for a in node.names]
    base = node.module or ""
    if node.level:
        pkg = _package(module).split(".")
        base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
    return [(a.asname or a.name, f"{base}.{a.name}") for a in node.names if a.name != "*"]


def _import_edge_target(dotted: str) -> str | None:
    """``from pkg import mod`` imports pkg.mod; ``from mod import name`` imports mod."""
    if not dotted.startswith(ROOT):
        return None
    return owner(dotted)


def imported_names(module: str, source: ast.Module | None = None) -> dict[str, str]:
    """Every name a module binds by importing (anywhere in it) -> the grpoflow module it comes from; ``source``: its
    syntax tree, when not the module's file."""
    names = {}
    for node, _, _ in _nodes(source or tree(modules()[module])):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for bound, dotted in import_targets(module, node):
                target = _import_edge_target(dotted)
                if target:
                    names[bound] = target
    return names


# ---- dynamic imports ------------------------------------------------------------------------------------------------


def _is_dynamic_import(call: ast.Call) -> bool:
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    if name == "import_module" or name == "__import__":
        return bool(call.args)
    return False


def _assignment(module: str, name: str) -> ast.AST | None:
    for node in tree(modules()[module]).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return node.value
    return None


def table_modules(module: str, table: str) -> list[str]:
    """The module names (string constants naming a module of src/grpoflow) written in a registry table."""
    value = _assignment(module, table)
    if value is None:
        return []
    found = [
        c.value
        for c in ast.walk(value)
        if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value in modules()
    ]
    return sorted(set(found))


def table_names(module: str, table: str) -> list[str]:
    """The keys of a registry table written as a dict literal."""
    value = _assignment(module, table)
    if not isinstance(value, ast.Dict):
        return []
    return [k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]


def registry_lines(module: str = BACKEND_REGISTRY) -> dict[str, str]:
    """name -> package of each line ``from <package> import BACKEND as <name>`` of the backend registry."""
    if module not in modules():
        return {}
    return {
        alias.asname: node.module
        for node in tree(modules()[module]).body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
        if alias.name == "BACKEND" and alias.asname
    }


def registry_names() -> list[str]:
    tables = {n for module, table in REGISTRY_NAMES for n in table_names(module, table)}
    return sorted(tables | set(registry_lines()))


def _fstring_targets(node: ast.JoinedStr) -> list[str]:
    """An f-string's values over the registries' names (every ``{...}`` the same name), those naming a module."""
    out = []
    for name in registry_names():
        text = "".join(v.value if isinstance(v, ast.Constant) else name for v in node.values)
        if text in modules():
            out.append(text)
    return out


def dynamic_targets(module: str, call: ast.Call) -> list[str] | None:
    """The modules a dynamic import call can import; None when the call cannot be followed."""
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value] if arg.value.startswith(ROOT) else []
    if isinstance(arg, ast.JoinedStr):
        return _fstring_targets(arg) or None
    table = DYNAMIC_ARGUMENTS.get((module, ast.unparse(arg)))
    return table_modules(*table) if table else None


def unresolved_dynamic_imports() -> list[str]:
    """``path:line: call`` of every dynamic import the graph cannot follow."""
    out = []
    for module, path in modules().items():
        for node, _, _ in _nodes(tree(path)):
            if isinstance(node, ast.Call) and _is_dynamic_import(node) and dynamic_targets(module, node) is None:
                out.append(f"{rel(path)}:{node.lineno}: {ast.unparse(node)}")
    return out


# ---- annotations ----------------------------------------------------------------------------------------------------


def _annotations(root: ast.AST):
    for node in ast.walk(root):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                if arg is not None and arg.annotation is not None:
                    yield arg.annotation
            if node.returns is not None:
                yield node.returns
        elif isinstance(node, ast.AnnAssign):
            yield node.annotation


def _annotation_names(annotation: ast.expr) -> list[tuple[str, int]]:
    """(dotted name, line) of every name an annotation uses; string annotations parsed."""
    out = []
    for node in ast.walk(annotation):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                inner = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                continue
            out += [(name, node.lineno) for name, _ in _annotation_names(inner)]
        elif isinstance(node, (ast.Name, ast.Attribute)):
            text = ast.unparse(node)
            if re.fullmatch(r"[A-Za-z_][\w.]*", text):
                out.append((text, getattr(node, "lineno", 0)))
    return out


# ---- the graph ------------------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def edges() -> tuple[Edge, ...]:
    """Every edge of src/grpoflow, of every kind."""
    mods = modules()
    found: set[Edge] = set()
    for mod, path in mods.items():
        where = rel(path)
        t = tree(path)

        def add(target: str | None, kind: str, line: int) -> None:
            if target and target != mod:
                found.add(Edge(mod, target, kind, where, line))

        for node, in_function, in_tc in _nodes(t):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                kind = "type" if in_tc else "function" if in_function else "module"
                for _, dotted in import_targets(mod, node):
                    add(_import_edge_target(dotted), kind, node.lineno)
            elif isinstance(node, ast.Call) and _is_dynamic_import(node):
                for target in dynamic_targets(mod, node) or []:
                    add(owner(target), "dynamic", node.lineno)
        names = imported_names(mod)
        for annotation in _annotations(t):
            for dotted, line in _annotation_names(annotation):
                head, _, rest = dotted.partition(".")
                if head in names:
                    add(owner(f"{names[head]}.{rest}") if rest else names[head], "type", line or annotation.lineno)
                elif dotted.startswith(ROOT + "."):
                    add(owner(dotted), "type", line or annotation.lineno)
    return tuple(sorted(found))


def graph(kinds=RUNTIME, collapse=None) -> dict[str, set[str]]:
    """The graph of the edges of ``kinds``; ``collapse`` maps a module to its node (e.g. ``package_of``)."""
    node = collapse or (lambda m: m)
    g: dict[str, set[str]] = {node(m): set() for m in modules()}
    for e in edges():
        if e.kind in kinds and node(e.source) != node(e.target):
            g[node(e.source)].add(node(e.target))
    return g


def edges_between(a: str, b: str, kinds=ALL, collapse=None) -> list[Edge]:
    node = collapse or (lambda m: m)
    return [e for e in edges() if e.kind in kinds and node(e.source) == a and node(e.target) == b]


def package_of(module: str) -> str:
    """The package node of a module, without the ``grpoflow.`` prefix: the folder it is in (``evaluation``,
    ``rewards``, ``report``...), a top-level module its own node (``config``, ``provenance``...), each training
    backend's folder its own node (``backends.trl``); ``backends`` is the registry's folder with its shared modules
    (``common``, ``memory``)."""
    parts = module.split(".")[1:]
    if not parts:
        return ROOT
    if parts[0] == "backends" and len(parts) > 1 and (SRC / ROOT / "backends" / parts[1]).is_dir():
        return ".".join(parts[:2])
    return parts[0]


def area_of(module: str) -> str:
    """The first level under grpoflow (``backends.trl`` counted in ``backends``): the packages the issue names."""
    return package_of(module).split(".")[0]


# ---- circles, layers, arrows against the layer order ---------------------------------------------------------------


def circles(g: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def a_cycle(g: dict[str, set[str]], component: set[str]) -> list[str]:
    """One closed path through a circle's first node (sorted), as a list ending where it starts."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(g[v] & component):
            if w == start:
                return paths[v] + [start]
            if w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    return [start]


def layers(g: dict[str, set[str]]) -> dict[str, int]:
    """Each node's layer: 0 when it depends on nothing, else 1 + the highest layer of what it depends on; the nodes
    of a circle are collapsed into one and share its layer."""
    comp = {v: frozenset({v}) for v in g}
    for c in circles(g):
        for v in c:
            comp[v] = frozenset(c)
    memo: dict[frozenset, int] = {}

    def layer(c: frozenset) -> int:
        if c not in memo:
            memo[c] = -1  # being computed (cannot recur: circles are collapsed)
            below = {comp[w] for v in c for w in g[v]} - {c}
            memo[c] = 1 + max((layer(d) for d in below), default=-1)
        return memo[c]

    return {v: layer(comp[v]) for v in g}


def against_the_layers(es, layer: dict[str, int], collapse=None) -> list[Edge]:
    """The edges that run against the layer order: from a node to one at its own layer or above (an arrow running
    back up). None does in the graph the layers were computed from, unless it has a circle; an importlib,
    TYPE_CHECKING or annotation edge measured against the static layers can."""
    node = collapse or (lambda m: m)
    return [e for e in es if node(e.source) != node(e.target) and layer[node(e.target)] >= layer[node(e.source)]]


@dataclass
class Figures:
    nodes: int
    edges: int
    layers: int
    circles: list[set[str]]


def figures(g: dict[str, set[str]], nodes: set[str] | None = None) -> Figures:
    """Nodes (all of ``g``, or ``nodes``: those with an edge of the graph), edges, layers, circles."""
    lay = layers(g)
    counted = nodes if nodes is not None else set(g)
    return Figures(
        len(counted),
        sum(len(w) for w in g.values()),
        1 + max((lay[v] for v in counted), default=-1),
        circles(g),
    )


def touched(g: dict[str, set[str]]) -> set[str]:
    """The nodes with at least one edge."""
    return {v for v, ws in g.items() if ws} | {w for ws in g.values() for w in ws}


# ---- the workflow files (Snakefile, rules/*.smk) as Python ----------------------------------------------------------


def snakemake_python(path: Path) -> tuple[str, dict[int, int]]:
    """A .smk file as Python, translated by Snakemake's own parser (snakemake.parser.parse), and its line map
    (generated line -> line of the .smk). The workflow argument stands in for Snakemake's Workflow: the parser only
    opens the file through its source cache."""
    from types import SimpleNamespace

    from snakemake import parser
    from snakemake.sourcecache import LocalSourceFile

    def open_source(source):
        return open(source.get_path_or_uri(secret_free=True), encoding="utf-8")

    workflow = SimpleNamespace(sourcecache=SimpleNamespace(open=open_source))
    linemap: dict[int, int] = {}
    code, _ = parser.parse(LocalSourceFile(str(path)), workflow, linemap)
    return code, linemap


def workflow_files() -> list[Path]:
    return [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]


@lru_cache(maxsize=1)
def workflow_edges() -> tuple[Edge, ...]:
    """The grpoflow modules the Snakefile and rules import (source node ``rules``), with the .smk file and line."""
    found = set()
    for path in workflow_files():
        code, linemap = snakemake_python(path)
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0):
                for _, dotted in import_targets("grpoflow", node):
                    target = _import_edge_target(dotted)
                    if target:
                        found.add(Edge("rules", target, "module", rel(path), linemap.get(node.lineno, node.lineno)))
    return tuple(sorted(found))


def files_naming(word: str, roots=("src",)) -> list[str]:
    """The files (any text file) under ``roots`` that name ``word`` as a whole word, relative to the repository."""
    pattern = re.compile(rf"\b{re.escape(word)}\b")
    out = []
    for root in roots:
        base = REPO / root
        paths = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for path in paths:
            if "__pycache__" in path.parts:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            if pattern.search(text):
                out.append(rel(path))
    return out


def by_node(es, collapse) -> dict[tuple[str, str], list[Edge]]:
    out: dict[tuple[str, str], list[Edge]] = defaultdict(list)
    for e in es:
        out[(collapse(e.source), collapse(e.target))].append(e)
    return out
