"""What rank 0 shows while training: one row of a table per update, under a header that says what each column
is, within 80 columns (with up to three domains); on a terminal the rows scroll above a live bar with the current
phase, and in a log (CI, Slurm output files) they are plain lines.

     update    time    loss      kl  probe kl  length  trunc    math    code  ifeval
       1/30      2s  0.1191  0.1252    0.1144    31.3    88%    2.00    1.06    0.67

A column is shown when the first update's metrics have it: the loss, the sampled-token KL estimate to the
routed teacher (`kl/all`; the exact `kl_full/all` instead under the full-vocabulary loss), the fixed probe set's
exact KL, the GRPO reward, the mean response length, the share of responses cut at the token cap, and each
domain's applied DN multiplier."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path
from typing import NamedTuple

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class Column(NamedTuple):
    header: str
    key: str
    width: int
    format: str


COLUMNS = (
    Column("loss", "loss", 8, "{:.4f}"),
    Column("kl", "kl/all", 8, "{:.4f}"),
    Column("kl full", "kl_full/all", 8, "{:.4f}"),
    Column("probe kl", "probe_kl/all", 10, "{:.4f}"),
    Column("reward", "grpo/reward_mean", 8, "{:.3f}"),
    Column("length", "response_length/mean", 8, "{:.1f}"),
    Column("trunc", "truncation_rate", 7, "{:.0%}"),
)
LEGEND = {
    "kl/all": "kl: sampled-token estimate",
    "kl_full/all": "kl full: full-vocabulary KL",
    "probe_kl/all": "probe kl: exact KL on the fixed probe set",
    "truncation_rate": "trunc: responses cut at the token cap",
}


def multiplier_columns(domains: list[str]) -> list[Column]:
    return [Column(domain[:8], f"dn/{domain}/applied", max(len(domain[:8]), 5) + 2, "{:.2f}") for domain in domains]


def elapsed(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class UpdateTable:
    """The header and the rows; the columns are those the first update's metrics have."""

    def __init__(self, total: int, domains: list[str]):
        self.total, self.domains = total, domains
        self.columns: list[Column] | None = None
        self.update_width = max(len(f"{total}/{total}"), len("update"))

    def header(self, metrics: dict[str, float]) -> list[str]:
        """Fixes the columns; the legend line (what the abbreviated columns mean) and the header line."""
        skip = {"kl/all"} if "kl_full/all" in metrics else set()
        self.columns = [c for c in (*COLUMNS, *multiplier_columns(self.domains)) if c.key in metrics and
                        c.key not in skip]
        notes = [LEGEND[c.key] for c in self.columns if c.key in LEGEND]
        if any(c.key.startswith("dn/") for c in self.columns):
            notes.append("<domain>: DN multiplier w_d")
        head = f"{'update':>{self.update_width}} {'time':>6}" + "".join(f"{c.header:>{c.width}}" for c in self.columns)
        return [*textwrap.wrap("; ".join(notes), 80), head]

    def row(self, update: int, seconds: float, metrics: dict[str, float]) -> str:
        cells = "".join(f"{c.format.format(metrics[c.key]) if c.key in metrics else '-':>{c.width}}"
                        for c in self.columns)
        return f"{f'{update + 1}/{self.total}':>{self.update_width}} {elapsed(seconds):>6}" + cells


class ProgressDisplay:
    def __init__(self, total: int, start: int, domains: list[str], *, enabled: bool, live: bool | None = None):
        self.enabled = enabled
        self.live = enabled and (sys.stderr.isatty() if live is None else live)
        self.table = UpdateTable(total, domains)
        self.started = time.perf_counter()
        self._progress = None
        if self.live:
            self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(bar_width=20),
                                      MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                                      console=Console(stderr=True))
            self._task = self._progress.add_task("starting", total=total, completed=start)
            self._progress.start()

    def phase(self, name: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=name)

    def finished(self, update: int, metrics: dict[str, float]) -> None:
        if not self.enabled:
            return
        lines = self.table.header(metrics) if self.table.columns is None else []
        lines.append(self.table.row(update, time.perf_counter() - self.started, metrics))
        for line in lines:
            if self._progress is not None:
                self._progress.console.print(line, highlight=False, markup=False)
            else:
                print(line, flush=True)
        if self._progress is not None:
            self._progress.update(self._task, completed=update + 1)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def run_summary(run_dir: Path, updates: int, seconds: float, metrics: dict[str, float], *, checkpoints: list[Path],
                release: Path | None, plots: list[Path] | None) -> str:
    """The end of a run in a few lines: where its outputs are and its final probe and evaluation numbers."""
    done = f"{updates} updates in {elapsed(seconds)}" if updates else "the run had finished already"
    lines = [f"done: {done}; outputs in {run_dir}/"]
    if checkpoints:
        lines.append(f"  checkpoint  {checkpoints[-1]}")
    if release is not None:
        lines.append(f"  release     {release}")
    if plots:
        lines.append(f"  plots       {plots[0].parent}/ ({', '.join(p.stem for p in plots)})")
    lines.append(f"  metrics     {run_dir / 'metrics.jsonl'}, {run_dir / 'tensorboard'}/")
    for label, prefix, digits in (("probe kl", "probe_kl/", 4), ("eval", "eval/", 2)):
        values = [f"{key[len(prefix):]} {value:.{digits}f}" for key, value in metrics.items()
                  if key.startswith(prefix) and "/" not in key[len(prefix):]]
        if values:
            lines.append(f"  {label:<10}  " + ", ".join(values))
    return "\n".join(lines)
