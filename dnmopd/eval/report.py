"""What a person reads: the summary table on the terminal (rich), the summary JSON, a plot of suites by model."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from dnmopd.eval.protocol import DOMAINS, SIX
from dnmopd.io import atomic_write

COLUMNS = (*SIX, *DOMAINS, "total", "math500")
LABELS = {"aime25": "AIME25", "aime26": "AIME26", "lcb_v5": "LCB v5", "lcb_v6": "LCB v6", "ifeval": "IFEval",
          "ifbench": "IFBench", "math": "math", "code": "code", "if": "IF", "total": "Total", "math500": "MATH-500"}


def _cell(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def summary_table(rows: Sequence[dict], *, cap: int) -> Table:
    """One row per model: suites, domains, Total, MATH-500 (only the columns some model has)."""
    columns = [c for c in COLUMNS if any(r["levels"].get(c) is not None for r in rows)]
    table = Table(title=f"avg@n, cap {cap} (Total = mean of the six suites; MATH-500 apart)")
    table.add_column("model")
    for column in columns:
        table.add_column(LABELS[column], justify="right")
    table.add_column("cap hits", justify="right")
    for r in rows:
        table.add_row(r["name"], *(_cell(r["levels"].get(c)) for c in columns), f"{100 * r['cap_hit_rate']:.1f}%")
    return table


def measures_table(row: dict) -> Table:
    """One model's suites with the measures beside avg@n: IF loose accuracy, math pass@k and cons@n, and the
    answers whose grading failed."""
    table = Table(title=f"{row['name']}: beside avg@n")
    for column in ("suite", "avg@n", "loose", "pass@k", "cons@n", "eval failures"):
        table.add_column(column, justify="left" if column == "suite" else "right")
    for suite, summary in row["suites"].items():
        passes = summary.get("pass_at_k") or {}
        table.add_row(LABELS.get(suite, suite), _cell(summary["score"]), _cell(summary.get("score_loose")),
                      ", ".join(f"@{k} {v:.2f}" for k, v in passes.items()) or "-",
                      _cell(summary.get("cons_at_n")), str(summary.get("eval_failures", 0)))
    return table


def print_summary(rows: Sequence[dict], *, cap: int, console: Console | None = None) -> None:
    console = console or Console()
    console.print(summary_table(rows, cap=cap))
    for r in rows:
        console.print(measures_table(r))
    for r in rows:
        if r["deviations"]:
            console.print(f"[yellow]{r['name']}: not the paper's protocol ({'; '.join(r['deviations'])}): "
                          "scores are not comparable with the paper's[/yellow]")


def write_json(path: Path, value) -> None:
    with atomic_write(path) as handle:
        handle.write(json.dumps(value, indent=2, allow_nan=False) + "\n")


def plot_suites(rows: Sequence[dict], path: Path, *, cap: int) -> Path:
    """Grouped bars: one group per suite (and Total), one bar per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    columns = [c for c in (*SIX, "total", "math500") if any(r["levels"].get(c) is not None for r in rows)]
    width = 0.8 / max(len(rows), 1)
    fig, ax = plt.subplots(figsize=(1.2 + 1.1 * len(columns), 3.6))
    for i, r in enumerate(rows):
        values = [r["levels"].get(c) or 0.0 for c in columns]
        ax.bar(np.arange(len(columns)) + (i - (len(rows) - 1) / 2) * width, values, width, label=r["name"])
    ax.set_xticks(np.arange(len(columns)), [LABELS[c] for c in columns])
    ax.set_ylabel("avg@n (%)")
    ax.set_title(f"Suites by model, cap {cap}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_write(path, "wb") as handle:
        fig.savefig(handle, format="png", dpi=120)
    plt.close(fig)
    return path
