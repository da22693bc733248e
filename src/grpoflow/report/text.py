"""How the report writes numbers and tables: percentages, points, p-values, intervals, Markdown tables."""

from __future__ import annotations


def pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def pts(x) -> str:
    return "–" if x is None else f"{100 * x:+.1f} pts"


def num(x) -> str:
    return "–" if x is None else f"{x:.1f}"


def fmt(x, how: str) -> str:
    return {"pct": pct, "pts": pts, "num": num}[how](x)


def p_text(p: float | None) -> str:
    if p is None:
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}" if p < 0.01 else f"{p:.2f}"


def p_is(p: float, name: str = "p") -> str:
    """``p < 0.001`` or ``p = 0.70`` (``name``: ``p (Holm)``)."""
    return f"{name} < 0.001" if p < 0.001 else f"{name} = {p_text(p)}"


def pct_ci(value: float, ci) -> str:
    return f"{100 * value:.1f}% [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def pts_ci(delta: float, ci) -> str:
    return f"{100 * delta:+.1f} pts [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"


def decoding_label(generation: dict) -> str:
    """How a benchmark was decoded, as the report and the model card say it."""
    if generation.get("greedy"):
        return "greedy"
    return (
        f"{generation['preset']} sampling (T {generation['temperature']}, top_p {generation['top_p']}, "
        f"top_k {generation['top_k']}), avg@{generation['samples']}"
    )


def sampled_order(key: str) -> tuple:
    """pass@1, pass@2, … then avg@n, then maj@k."""
    kind, k = key.split("@")
    return ({"pass": 0, "avg": 1}.get(kind, 2), int(k))


def md_table(header: list[str], body: list[list[str]], text_columns: int = 1) -> str:
    """A Markdown table; the first ``text_columns`` are left-aligned, the (numeric) rest right-aligned."""
    esc = [[str(c).replace("|", "\\|") for c in row] for row in [header] + body]
    lines = [
        "| " + " | ".join(esc[0]) + " |",
        "|" + "|".join(":---" if i < text_columns else "---:" for i in range(len(header))) + "|",
    ]
    lines += ["| " + " | ".join(r) + " |" for r in esc[1:]]
    return "\n".join(lines)
