"""What rank 0 shows while training: a live bar with the current phase and the last update's key numbers on
a terminal, one log line per update otherwise (CI logs, Slurm output files)."""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

KEY_METRICS = ("loss", "kl/all", "response_length/mean", "throughput/tokens_per_s")


def summary(metrics: dict[str, float], domains: list[str]) -> str:
    parts = [f"{key.split('/')[0] if key != 'kl/all' else 'kl'} {metrics[key]:.4g}"
             for key in KEY_METRICS if key in metrics]
    weights = [f"{d} {metrics[f'dn/{d}/applied']:.2f}" for d in domains if f"dn/{d}/applied" in metrics]
    if weights:
        parts.append("w: " + " ".join(weights))
    return " | ".join(parts)


class ProgressDisplay:
    def __init__(self, total: int, start: int, domains: list[str], *, enabled: bool, live: bool | None = None):
        self.enabled, self.domains = enabled, domains
        self.total = total
        self.live = enabled and (sys.stderr.isatty() if live is None else live)
        self.started = time.perf_counter()
        self._progress = None
        if self.live:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TimeRemainingColumn(), TextColumn("{task.fields[summary]}"), console=Console(stderr=True),
            )
            self._task = self._progress.add_task("starting", total=total, completed=start, summary="")
            self._progress.start()

    def phase(self, name: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=name)

    def finished(self, update: int, metrics: dict[str, float]) -> None:
        if not self.enabled:
            return
        text = summary(metrics, self.domains)
        if self._progress is not None:
            self._progress.update(self._task, completed=update + 1, summary=text)
        else:
            elapsed = time.perf_counter() - self.started
            print(f"update {update + 1}/{self.total} [{elapsed:.0f}s] {text}", flush=True)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
