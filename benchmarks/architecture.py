"""The architecture's figures for issue 42, read from the source: the import graph by module, by package and at the
type level (nodes, arrows, layers, circles, arrows against the layer order), the files that name a setting, the walk
of a setting from config/config.yaml to the trainer, and the places outside a backend's folder that know it.

    .venv/bin/python benchmarks/architecture.py                      # everything
    .venv/bin/python benchmarks/architecture.py --key max_response_length --walk learning_rate

It lives in benchmarks/ because it measures (farm-studio's figures, which this workplace lacks) and prints; the
guards that fail on the same measures are tests (tests/test_import_graph.py, tests/test_backend_knowledge.py), and
both read the source through the same instruments (tests/archgraph.py, tests/archwalk.py, tests/archknowledge.py),
whose docstrings define every figure. Nothing is imported from grpoflow: the source is parsed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import archgraph as A  # noqa: E402
import archknowledge as K  # noqa: E402
import archwalk as W  # noqa: E402

GRAPHS = {
    "static (module level + in functions)": A.STATIC,
    "runtime (+ importlib targets)": A.RUNTIME,
    "type level (annotations, TYPE_CHECKING)": A.TYPE,
}
GRANULARITIES = {
    "module": None,
    "package (each backend its own)": A.package_of,
    "area (first level: config, backends...)": A.area_of,
}


def figures_table() -> list[str]:
    lines = [
        "| graph | by | nodes | arrows | layers | circles (sizes) | arrows against the static layers (edges) |",
        "|---|---|---|---|---|---|---|",
    ]
    for gname, kinds in GRAPHS.items():
        for by, collapse in GRANULARITIES.items():
            g = A.graph(kinds, collapse)
            f = A.figures(g, A.touched(g) if kinds == A.TYPE else None)
            static = A.layers(A.graph(A.STATIC, collapse))
            es = [e for e in A.edges() if e.kind in kinds]
            against = A.against_the_layers(es, static, collapse)
            node = collapse or (lambda m: m)
            pairs = {(node(e.source), node(e.target)) for e in against}
            sizes = ", ".join(str(len(c)) for c in f.circles) or "-"
            lines.append(
                f"| {gname} | {by} | {f.nodes} | {f.edges} | {f.layers} | {len(f.circles)} ({sizes}) "
                f"| {len(pairs)} ({len(against)}) |"
            )
    return lines


def circles_text() -> list[str]:
    out = []
    for gname, kinds in GRAPHS.items():
        for by, collapse in GRANULARITIES.items():
            for c in A.circles(A.graph(kinds, collapse)):
                out.append(f"- {gname}, by {by}: {', '.join(sorted(c))}")
    return out


def against_text() -> list[str]:
    """The arrows of the runtime and type-level module graphs that run against the static layers."""
    static = A.layers(A.graph(A.STATIC))
    es = [e for e in A.edges() if e.kind in A.ALL - A.STATIC]
    return [
        f"- {e.source} (layer {static[e.source]}) -> {e.target} (layer {static[e.target]}), {e.kind}: {e.where()}"
        for e in A.against_the_layers(es, static)
    ]


def naming(key: str) -> list[str]:
    files = A.files_naming(key)
    elsewhere = {root: len(A.files_naming(key, (root,))) for root in ("rules", "Snakefile", "config", "tests", "docs")}
    out = [
        f"`{key}` is named in {len(files)} files under src/ ({', '.join(f'{k}: {v}' for k, v in elsewhere.items())})"
    ]
    return out + [f"- {f}" for f in files]


def walk_text(key: str) -> list[str]:
    steps = W.walk(key)
    out = [
        "| # | where | module | layer | how it arrives | dark | climbs back up | what |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in steps:
        layer = "" if s.layer == W.EXTERNAL else s.layer
        climb = f"yes ({s.caller} -> {s.module})" if s.climbs else ""
        problem = f" **{s.problem}**" if s.problem else ""
        out.append(
            f"| {s.n} | `{s.where}` | {s.module} | {layer} | {s.hop.via} | {'dark' if s.dark else ''} | {climb} "
            f"| {s.hop.what}{problem} |"
        )
    back = W.back_arrows_in(steps)
    out += [
        "",
        f"{len(steps)} hops, {sum(s.dark for s in steps)} dark ({', '.join(sorted({s.hop.via for s in steps if s.dark}))}), "
        f"{sum(s.climbs for s in steps)} climbing back up; back-arrows among the walk's modules: {len(back)}",
    ]
    out += [f"- {e.source} -> {e.target} ({e.kind}): {e.where()}" for e in back]
    return out


def knowledge_text() -> list[str]:
    found = K.findings()
    rules = Counter(f.rule for f in found)
    files = Counter(f.path for f in found)
    out = [
        f"{len(found)} places in {len(files)} files: " + ", ".join(f"{n} {r}" for r, n in sorted(rules.items())),
        "",
        "| file | places |",
        "|---|---|",
    ]
    out += [f"| `{path}` | {n} |" for path, n in sorted(files.items())]
    return out + [""] + [f"- {f}" for f in found]


def commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "src", "rules"], cwd=REPO, capture_output=True, text=True)
    return proc.stdout.strip() + (" + uncommitted changes in src/ or rules/" if dirty.stdout.strip() else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--key", action="append", help="a setting whose files to list (default: the two walked)")
    parser.add_argument("--walk", action="append", choices=sorted(W.WALKS), help="a walk to print (default: all)")
    args = parser.parse_args(argv)
    sections = [
        (f"# Architecture figures ({commit()})", []),
        ("## The import graph", figures_table()),
        ("## Circles", circles_text() or ["none"]),
        ("## Arrows against the static layer order (module graph)", against_text() or ["none"]),
    ]
    for key in args.key or sorted(W.WALKS):
        sections.append((f"## Files naming `{key}`", naming(key)))
    for key in args.walk or list(W.WALKS):
        sections.append((f"## The walk of `{key}` (config/config.yaml, the TRL demo)", walk_text(key)))
    sections.append(("## A backend known outside its folder", knowledge_text()))
    for title, lines in sections:
        print("\n".join([title, "", *lines, ""]) if lines else title + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
