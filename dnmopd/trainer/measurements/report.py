"""Plots of a run, drawn from its metrics.jsonl, so a user can look rather than read:

    multipliers.png   applied DN multiplier (solid) and raw sigma_all / sigma_d (dashed) per domain
    shares.png        each domain's share of the batch's tokens, advantage magnitude and gradient (OPD runs)
    reverse_kl.png    sampled-token reverse KL to the routed teacher per domain
    reverse_kl_full_vocab.png   exact full-vocabulary reverse KL per domain (full-vocab loss runs)
    probe_kl.png      exact full-vocabulary reverse KL per domain on the fixed probe set (logging.probe_every)
    phase_times.png   seconds per update of each phase (rollout, scoring, wait, train, sync; phases overlap)
    timeline.png      when each update's phases ran (wall clock): with train.rollout_ahead 1 the next
                      batch's rollout and scoring run during the current train
    training.png      loss, mean response length and throughput
    eval.png          evaluation during training: eval/<suite> scores (and eval/heldout) by update

    python -m dnmopd.trainer.measurements.report RUN_DIR
    python -m dnmopd.trainer.measurements.report RUN_DIR OTHER_RUN... [--output FILE]

With several runs (e.g. DN-MOPD, its Label baseline and the token_share rule on the same seed and data), one
more figure draws every run's per-domain probe KL, applied multipliers and gradient share side by side
(default <RUN_DIR>/plots/comparison.png).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from dnmopd.io import atomic_write
from dnmopd.trainer.measurements.metrics import METRICS_FILE, read_metrics  # noqa: E402


def series(records: list[dict], prefix: str, suffix: str = "") -> dict[str, tuple[list[int], list[float]]]:
    """{name: (steps, values)} for every key `<prefix><name><suffix>` (name without '/')."""
    found: dict[str, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    for record in records:
        for key, value in record.items():
            if key.startswith(prefix) and key.endswith(suffix) and isinstance(value, int | float):
                name = key[len(prefix): len(key) - len(suffix)]
                if name and "/" not in name:
                    found[name][0].append(record["step"])
                    found[name][1].append(value)
    return dict(found)


def _save(fig, path: Path) -> Path:
    with atomic_write(path, "wb") as handle:
        fig.savefig(handle, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _plot_multipliers(records, out: Path) -> Path | None:
    applied, raw = series(records, "dn/", "/applied"), series(records, "dn/", "/raw_factor")
    if not applied:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for domain, (steps, values) in sorted(applied.items()):
        (line,) = ax.plot(steps, values, label=f"{domain} applied")
        if domain in raw:
            ax.plot(*raw[domain], linestyle="--", color=line.get_color(), alpha=0.6, label=f"{domain} raw")
    ax.set_yscale("log")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set(xlabel="update", ylabel="multiplier w_d", title="Domain multipliers")
    ax.legend(fontsize=8, ncol=2)
    return _save(fig, out / "multipliers.png")


SHARES = (("tokens", "tokens"), ("advantage", "advantage magnitude |r|"), ("gradient", "gradient (w_d |r| / n_r)"))


def _plot_shares(records, out: Path) -> Path | None:
    panels = [(key, title, series(records, f"share/{key}/")) for key, title in SHARES]
    if not any(lines for _, _, lines in panels):
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.8), sharey=True)
    for ax, (_, title, lines) in zip(axes, panels, strict=True):
        for domain, (steps, values) in sorted(lines.items()):
            ax.plot(steps, values, label=domain)
        ax.set(xlabel="update", title=f"share of {title}", ylim=(0, 1))
    axes[0].set_ylabel("share of the batch")
    axes[0].legend(fontsize=8)
    return _save(fig, out / "shares.png")


def _plot_lines(records, out: Path, prefix: str, name: str, title: str, ylabel: str) -> Path | None:
    lines = series(records, prefix)
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, (steps, values) in sorted(lines.items()):
        ax.plot(steps, values, label=label)
    ax.set(xlabel="update", ylabel=ylabel, title=title)
    ax.legend(fontsize=8)
    return _save(fig, out / name)


def _plot_phase_times(records, out: Path) -> Path | None:
    phases = series(records, "time/")
    if not phases:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for phase, (steps, seconds) in sorted(phases.items()):
        ax.plot(steps, seconds, marker="o", markersize=3, label=phase)
    ax.set(xlabel="update", ylabel="seconds", title="Time per phase (phases may overlap)")
    ax.legend(fontsize=8)
    return _save(fig, out / "phase_times.png")


TIMELINE_LANES = ("rollout", "scoring", "wait", "train", "sync")


def _plot_timeline(records, out: Path) -> Path | None:
    """One lane per phase, one bar per update's phase, on the wall clock of the run's first record."""
    spans = [(r["step"], lane, r[f"timeline/{lane}/start"], r[f"timeline/{lane}/end"]) for r in records
             for lane in TIMELINE_LANES if f"timeline/{lane}/start" in r and f"timeline/{lane}/end" in r]
    if not spans:
        return None
    origin = min(start for _, _, start, _ in spans)
    lanes = [lane for lane in TIMELINE_LANES if any(s[1] == lane for s in spans)]
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(lanes) + 1.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for step, lane, start, end in spans:
        y = lanes.index(lane)
        ax.barh(y, end - start, left=start - origin, height=0.6, color=colors[step % len(colors)],
                edgecolor="black", linewidth=0.3)
        if lane in ("rollout", "train"):
            ax.text(start - origin, y, str(step), va="center", fontsize=6)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    ax.set(xlabel="seconds since the first update started", title="Timeline (bar label: update)")
    return _save(fig, out / "timeline.png")


def _plot_training(records, out: Path) -> Path | None:
    panels = [(key, label) for key, label in (("loss", "loss"), ("response_length/mean", "mean response length"),
                                               ("throughput/tokens_per_s", "tokens / s"))
              if any(key in r for r in records)]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.5), squeeze=False)
    for ax, (key, label) in zip(axes[0], panels, strict=True):
        points = [(r["step"], r[key]) for r in records if key in r]
        ax.plot(*zip(*points, strict=True))
        ax.set(xlabel="update", title=label)
    return _save(fig, out / "training.png")


def draw_report(run_dir: str | Path) -> list[Path]:
    """Draw every plot the run's metrics allow into <run_dir>/plots; returns the files written."""
    run_dir = Path(run_dir)
    records = read_metrics(_metrics_file(run_dir))
    out = run_dir / "plots"
    out.mkdir(exist_ok=True)
    drawn = [_plot_multipliers(records, out), _plot_shares(records, out),
             _plot_lines(records, out, "kl/", "reverse_kl.png", "Reverse KL to the routed teacher (sampled tokens)",
                         "KL (nats/token)"),
             _plot_lines(records, out, "kl_full/", "reverse_kl_full_vocab.png",
                         "Reverse KL to the routed teacher (full vocabulary)", "KL (nats/token)"),
             _plot_lines(records, out, "probe_kl/", "probe_kl.png",
                         "Reverse KL to the routed teacher on the fixed probe set (full vocabulary)",
                         "KL (nats/token)"),
             _plot_lines(records, out, "eval/", "eval.png", "Evaluation during training (weights after the update)",
                         "score (%)"),
             _plot_phase_times(records, out), _plot_timeline(records, out), _plot_training(records, out)]
    return [p for p in drawn if p is not None]


def running_mean(values: list[float]) -> list[float]:
    total, out = 0.0, []
    for i, value in enumerate(values, start=1):
        total += value
        out.append(total / i)
    return out


def draw_comparison(run_dirs: list[str | Path], output: str | Path) -> Path:
    """One figure of every run's per-domain probe KL (left), applied multipliers (middle) and, when logged, share
    of the gradient (right; running mean over the updates so far, as each batch draws its own mix of domains):
    colour = domain, line style = run."""
    runs = [(Path(d).name, read_metrics(_metrics_file(Path(d)))) for d in run_dirs]
    if not any(series(records, "probe_kl/") for _, records in runs):
        raise ValueError(f"none of {[str(d) for d in run_dirs]} logged probe_kl/* (set logging.probe_every)")
    panels = [("probe_kl/", "", "KL (nats/token)", "Reverse KL to the routed teacher, fixed probe set", False),
              ("dn/", "/applied", "applied multiplier w_d", "Domain multipliers", False)]
    if any(series(records, "share/gradient/") for _, records in runs):
        panels.append(("share/gradient/", "", "share of the gradient (running mean)",
                       "Domain share of the gradient", True))
    styles = ("-", "--", ":", "-.")
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.6))
    colours: dict[str, str] = {}
    for (_, records), style in zip(runs, styles * len(runs), strict=False):
        for ax, (prefix, suffix, _, _, smooth) in zip(axes, panels, strict=True):
            for domain, (steps, values) in sorted(series(records, prefix, suffix).items()):
                colour = colours.setdefault(domain, f"C{len(colours)}")
                ax.plot(steps, running_mean(values) if smooth else values, linestyle=style, color=colour)
    for ax, (_, _, ylabel, title, _) in zip(axes, panels, strict=True):
        ax.set(xlabel="update", ylabel=ylabel, title=title)
    axes[1].axhline(1.0, color="grey", linewidth=0.8)
    handles = [plt.Line2D([], [], color=c, label=d) for d, c in colours.items()]
    handles += [plt.Line2D([], [], color="black", linestyle=style, label=name)
                for (name, _), style in zip(runs, styles * len(runs), strict=False)]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    return _save(fig, output)


def _metrics_file(run_dir: Path) -> Path:
    metrics = run_dir / METRICS_FILE
    if not metrics.exists():
        raise FileNotFoundError(f"{metrics} not found: is {run_dir} a run directory?")
    return metrics


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Draw PNG plots of a dnmopd run from its metrics.jsonl; with "
                                                 "several runs, also a figure comparing their probe KL and "
                                                 "multipliers.")
    parser.add_argument("run_dirs", nargs="+", help="run directories (each holds metrics.jsonl)")
    parser.add_argument("--output", help="the comparison figure (default: <first run>/plots/comparison.png)")
    args = parser.parse_args(argv)
    for path in draw_report(args.run_dirs[0]):
        print(path)
    if len(args.run_dirs) > 1:
        print(draw_comparison(args.run_dirs, args.output or Path(args.run_dirs[0]) / "plots" / "comparison.png"))


if __name__ == "__main__":
    main()
