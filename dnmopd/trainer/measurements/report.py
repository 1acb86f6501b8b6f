"""Plots of a run, drawn from its metrics.jsonl, so a user can look rather than read:

    multipliers.png   applied DN multiplier (thick) and raw sigma_all / sigma_d (thin, dashed) per domain
    shares.png        each domain's share of the batch's tokens, advantage magnitude and gradient (OPD runs)
    reverse_kl.png    the sampled-token estimate of the reverse KL to the routed teacher per domain (an
                      estimate from the sampled tokens only: it can go below 0)
    reverse_kl_full_vocab.png   exact full-vocabulary reverse KL per domain (full-vocab loss runs)
    probe_kl.png      exact full-vocabulary reverse KL per domain on the fixed probe set (logging.probe_every)
    phase_times.png   seconds per update of each phase (rollout, scoring, wait, train, probe, sync, checkpoint)
    timeline.png      when each update's phases ran (wall clock), coloured by phase, checkpoints marked: with
                      train.rollout_ahead 1 the next batch's rollout and scoring run during the current train
    training.png      loss, mean response length, share of responses cut at the token cap, throughput
    eval.png          evaluation during training: eval/<suite> scores (and eval/heldout) by update

Every plot counts updates from 1 (as the console does), on linear axes, and gives each domain and each phase the
same colour in every figure (`domain_colour`, `PHASE_COLOURS`).

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
from matplotlib.ticker import MaxNLocator  # noqa: E402

from dnmopd.io import atomic_write  # noqa: E402
from dnmopd.trainer.measurements.metrics import METRICS_FILE, read_metrics  # noqa: E402

# ------------------------------------------------------------------------------------------- shared style
DOMAIN_COLOURS = {"math": "#1f77b4", "code": "#2ca02c", "ifeval": "#d62728", "all": "#222222"}
"""Each domain's colour in every figure; `all` (a pooled value) is near-black."""
EXTRA_COLOURS = ("#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#ff7f0e", "#7f7f7f")
PHASE_COLOURS = {"rollout": "#4c72b0", "scoring": "#55a868", "wait": "#bbbbbb", "train": "#dd8452",
                 "probe": "#8172b3", "sync": "#937860", "eval": "#64b5cd", "checkpoint": "#c44e52"}
"""Each phase's colour in the time and timeline plots."""


def domain_colour(domain: str) -> str:
    """The domain's fixed colour; a domain outside DOMAIN_COLOURS gets one from its name (stable across runs)."""
    if domain in DOMAIN_COLOURS:
        return DOMAIN_COLOURS[domain]
    return EXTRA_COLOURS[sum(domain.encode()) % len(EXTRA_COLOURS)]


def domain_order(names) -> list[str]:
    """Domains in the order of DOMAIN_COLOURS (`all` last), then the others by name."""
    known = [d for d in DOMAIN_COLOURS if d in names and d != "all"]
    return known + sorted(set(names) - set(DOMAIN_COLOURS)) + (["all"] if "all" in names else [])


def updates(steps: list[int]) -> list[int]:
    """Record steps (0-based) as the updates the console counts (from 1)."""
    return [step + 1 for step in steps]


def update_axis(ax, title: str, ylabel: str) -> None:
    """After plotting: an update-numbered x axis (integer ticks, from update 1), the title and the y label."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(left=0.5)
    ax.set(xlabel="update", ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)


def side_legend(ax, **options) -> None:
    """The legend beside the axes, where it hides no line."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, **options)


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
    for domain in domain_order(applied):
        steps, values = applied[domain]
        colour = domain_colour(domain)
        ax.plot(updates(steps), values, color=colour, linewidth=3, alpha=0.45, label=f"{domain} applied")
        if domain in raw:
            ax.plot(updates(raw[domain][0]), raw[domain][1], color=colour, linestyle="--", linewidth=1, marker=".",
                    markersize=4, label=f"{domain} raw sigma_all / sigma_d")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_ylim(bottom=0)
    update_axis(ax, "Domain multipliers w_d (applied = raw clipped to the bounds)", "multiplier w_d")
    side_legend(ax)
    return _save(fig, out / "multipliers.png")


SHARES = (("tokens", "tokens"), ("advantage", "advantage magnitude |r|"), ("gradient", "gradient (w_d |r| / n_r)"))


def _plot_shares(records, out: Path) -> Path | None:
    panels = [(key, title, series(records, f"share/{key}/")) for key, title in SHARES]
    if not any(lines for _, _, lines in panels):
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.8), sharey=True)
    for ax, (_, title, lines) in zip(axes, panels, strict=True):
        for domain in domain_order(lines):
            steps, values = lines[domain]
            ax.plot(updates(steps), values, color=domain_colour(domain), label=domain)
        update_axis(ax, f"share of {title}", "share of the batch" if ax is axes[0] else "")
        ax.set_ylim(0, 1)
    side_legend(axes[-1])
    return _save(fig, out / "shares.png")


def _plot_lines(records, out: Path, prefix: str, name: str, title: str, ylabel: str,
                domains: bool = True) -> Path | None:
    lines = series(records, prefix)
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for label in domain_order(lines) if domains else sorted(lines):
        steps, values = lines[label]
        style = {"color": domain_colour(label), "linewidth": 2.2 if label == "all" else 1.5} if domains else {}
        ax.plot(updates(steps), values, label=label, marker="." if len(steps) < 40 else None, **style)
    if min(v for _, values in lines.values() for v in values) < 0:
        ax.axhline(0.0, color="grey", linewidth=0.8)
    update_axis(ax, title, ylabel)
    side_legend(ax)
    return _save(fig, out / name)


def _plot_phase_times(records, out: Path) -> Path | None:
    phases = series(records, "time/")
    if not phases:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for phase in [p for p in PHASE_COLOURS if p in phases] + sorted(set(phases) - set(PHASE_COLOURS)):
        steps, seconds = phases[phase]
        ax.plot(updates(steps), seconds, marker="o", markersize=3, label=phase,
                color=PHASE_COLOURS.get(phase), linestyle="none" if phase == "checkpoint" else "-")
    ax.set_ylim(bottom=0)
    update_axis(ax, "Time per phase (phases may overlap)", "seconds")
    side_legend(ax)
    return _save(fig, out / "phase_times.png")


TIMELINE_LANES = ("rollout", "scoring", "wait", "train", "probe", "sync", "checkpoint")


def _plot_timeline(records, out: Path) -> Path | None:
    """One lane per phase, one bar per update's phase, coloured by phase, on the wall clock of the run's first
    record; each checkpoint is marked by a line across the lanes."""
    spans = [(r["step"], lane, r[f"timeline/{lane}/start"], r[f"timeline/{lane}/end"]) for r in records
             for lane in TIMELINE_LANES if f"timeline/{lane}/start" in r and f"timeline/{lane}/end" in r]
    if not spans:
        return None
    origin = min(start for _, _, start, _ in spans)
    lanes = [lane for lane in TIMELINE_LANES if any(s[1] == lane for s in spans)]
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(lanes) + 1.6))
    label_every = max(1, len(records) // 15)
    for step, lane, start, end in spans:
        y = lanes.index(lane)
        ax.barh(y, end - start, left=start - origin, height=0.6, color=PHASE_COLOURS[lane], linewidth=0)
        if lane == "checkpoint":
            ax.axvline(start - origin, color=PHASE_COLOURS[lane], linewidth=0.8, linestyle=":")
            ax.text(end - origin, y, f" after {step + 1}", va="center", fontsize=7)
        elif lane in ("rollout", "train") and step % label_every == 0:
            ax.text(start - origin, y - 0.38, str(step + 1), va="bottom", fontsize=6)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_ylim(len(lanes) - 0.4, -0.8)
    ax.grid(axis="x", alpha=0.3)
    ax.set(xlabel="seconds since the first update started",
           title="Timeline of the phases (number: update; dotted line: a checkpoint)")
    return _save(fig, out / "timeline.png")


TRAINING_PANELS = (("loss", "loss", ""), ("response_length/mean", "mean response length", "tokens"),
                   ("truncation_rate", "responses cut at the token cap", "%"),
                   ("throughput/tokens_per_s", "throughput", "response tokens / s"))


def _plot_training(records, out: Path) -> Path | None:
    panels = [panel for panel in TRAINING_PANELS if any(panel[0] in r for r in records)]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.4), squeeze=False)
    for ax, (key, title, unit) in zip(axes[0], panels, strict=True):
        steps, values = zip(*[(r["step"], r[key]) for r in records if key in r], strict=True)
        if unit == "%":
            values = [100 * v for v in values]
            ax.set_ylim(0, 105)
        ax.plot(updates(list(steps)), values, color="#444444", marker="." if len(steps) < 40 else None)
        update_axis(ax, title, unit)
    fig.tight_layout()
    return _save(fig, out / "training.png")


def draw_report(run_dir: str | Path) -> list[Path]:
    """Draw every plot the run's metrics allow into <run_dir>/plots; returns the files written."""
    run_dir = Path(run_dir)
    records = read_metrics(_metrics_file(run_dir))
    out = run_dir / "plots"
    out.mkdir(exist_ok=True)
    drawn = [_plot_multipliers(records, out), _plot_shares(records, out),
             _plot_lines(records, out, "kl/", "reverse_kl.png",
                         "Reverse KL to the routed teacher: sampled-token estimate (can go below 0)",
                         "estimate (nats/token)"),
             _plot_lines(records, out, "kl_full/", "reverse_kl_full_vocab.png",
                         "Reverse KL to the routed teacher (full vocabulary)", "KL (nats/token)"),
             _plot_lines(records, out, "probe_kl/", "probe_kl.png",
                         "Reverse KL to the routed teacher on the fixed probe set (full vocabulary)",
                         "KL (nats/token)"),
             _plot_lines(records, out, "eval/", "eval.png", "Evaluation during training (weights after the update)",
                         "score (%)", domains=False),
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
    panels = [("probe_kl/", "", "KL (nats/token)", "Reverse KL to the routed teacher, fixed probe set (exact)",
               False),
              ("dn/", "/applied", "multiplier w_d", "Domain multipliers (applied)", False)]
    if any(series(records, "share/gradient/") for _, records in runs):
        panels.append(("share/gradient/", "", "share of the gradient (running mean)",
                       "Domain share of the gradient", True))
    styles = ("-", "--", ":", "-.")
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.6))
    for (name, records), style in zip(runs, styles * len(runs), strict=False):
        for ax, (prefix, suffix, _, _, smooth) in zip(axes, panels, strict=True):
            lines = series(records, prefix, suffix)
            for domain in domain_order(lines):
                steps, values = lines[domain]
                ax.plot(updates(steps), running_mean(values) if smooth else values, linestyle=style,
                        color=domain_colour(domain), label=f"{domain} ({name})")
    for ax, (_, _, ylabel, title, _) in zip(axes, panels, strict=True):
        update_axis(ax, title, ylabel)
    axes[1].axhline(1.0, color="grey", linewidth=0.8)
    axes[1].set_ylim(bottom=0)
    side_legend(axes[-1], handles=axes[0].get_lines())  # the KL panel's lines: every domain and run
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
