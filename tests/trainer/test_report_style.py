"""The plots read at a glance: each domain and phase has one colour in every figure, updates count from 1 on
linear axes, the sampled-token KL says it is an estimate, truncation is shown, and the timeline is coloured by
phase with the checkpoints in it. Checked on the figures the report draws (before they are written)."""

import matplotlib.colors
import pytest

from dnmopd.trainer.measurements import report
from dnmopd.trainer.measurements.metrics import MetricsLogger

DOMAINS = ("math", "code", "ifeval")


@pytest.fixture
def figures(monkeypatch, tmp_path):
    """The run's figures by file name, drawn from a run of 4 updates with a checkpoint after the 2nd and 4th."""
    logger = MetricsLogger(MetricsLogger.Config(tensorboard=False), tmp_path)
    for step in range(4):
        start = 100.0 + 10 * step
        record = {"loss": 0.1, "response_length/mean": 31.0, "truncation_rate": 0.5 + 0.1 * step,
                  "throughput/tokens_per_s": 500.0, "kl/all": 0.05 - 0.03 * step, "probe_kl/all": 0.1 - 0.01 * step,
                  "time/rollout": 2.0, "time/train": 3.0, "timeline/rollout/start": start,
                  "timeline/rollout/end": start + 2, "timeline/train/start": start + 2, "timeline/train/end": start + 5}
        for i, domain in enumerate(DOMAINS):
            record |= {f"dn/{domain}/applied": 0.5 + i, f"dn/{domain}/raw_factor": 0.5 + i, f"kl/{domain}": 0.01 * i,
                       f"probe_kl/{domain}": 0.1 * i}
        if step % 2:
            record |= {"time/checkpoint": 1.0, "timeline/checkpoint/start": start + 5,
                       "timeline/checkpoint/end": start + 6}
        logger.log(step, record)
    logger.close()
    drawn = {}
    saved = report._save

    def keep(fig, path):
        drawn[path.name] = fig
        return saved(fig, path)

    monkeypatch.setattr(report, "_save", keep)
    assert sorted(p.name for p in report.draw_report(tmp_path)) == sorted(drawn)
    return drawn


def lines_by_label(fig):
    return {line.get_label(): line for ax in fig.axes for line in ax.get_lines()}


def test_a_domain_has_one_colour_in_every_figure(figures):
    for name in ("multipliers.png", "reverse_kl.png", "probe_kl.png"):
        lines = lines_by_label(figures[name])
        for domain in DOMAINS:
            (line,) = [line for label, line in lines.items() if label.split()[0] == domain][:1]
            assert matplotlib.colors.to_hex(line.get_color()) == report.DOMAIN_COLOURS[domain], (name, domain)
    assert len({report.domain_colour(d) for d in DOMAINS + ("all",)}) == 4
    assert report.domain_colour("chemistry") == report.domain_colour("chemistry")  # stable for any other domain


def test_updates_count_from_one_on_linear_axes(figures):
    for name, fig in figures.items():
        if name == "timeline.png":
            continue
        for ax in fig.axes:
            assert ax.get_xlabel() == "update" and ax.get_yscale() == "linear" and ax.get_xscale() == "linear"
            for line in ax.get_lines():
                if len(line.get_xdata()) == 4:
                    assert list(line.get_xdata()) == [1, 2, 3, 4], name


def test_the_raw_multiplier_is_drawn_over_the_applied_one(figures):
    lines = lines_by_label(figures["multipliers.png"])
    applied, raw = lines["math applied"], lines["math raw sigma_all / sigma_d"]
    assert raw.get_zorder() >= applied.get_zorder() and raw.get_linewidth() < applied.get_linewidth()
    assert list(raw.get_ydata()) == list(applied.get_ydata())  # equal here: both stay visible


def test_labels_say_what_is_estimated_and_truncation_is_shown(figures):
    (kl,) = figures["reverse_kl.png"].axes
    assert "sampled-token estimate" in kl.get_title() and "below 0" in kl.get_title()
    assert any(line.get_ydata()[0] == 0 for line in kl.get_lines())  # the zero line: the estimate went below it
    titles = [ax.get_title() for ax in figures["training.png"].axes]
    assert "responses cut at the token cap" in titles
    truncation = figures["training.png"].axes[titles.index("responses cut at the token cap")]
    assert list(truncation.get_lines()[0].get_ydata()) == pytest.approx([50, 60, 70, 80])


def test_the_timeline_is_coloured_by_phase_and_marks_the_checkpoints(figures):
    (ax,) = figures["timeline.png"].axes
    lanes = [label.get_text() for label in ax.get_yticklabels()]
    assert lanes == ["rollout", "train", "checkpoint"]
    colours = {}
    for bar in ax.patches:
        lane = lanes[round(bar.get_y() + bar.get_height() / 2)]
        colours.setdefault(lane, set()).add(matplotlib.colors.to_hex(bar.get_facecolor()))
    assert colours == {lane: {report.PHASE_COLOURS[lane]} for lane in lanes}
    assert sorted(text.get_text().strip() for text in ax.texts if "after" in text.get_text()) == ["after 2",
                                                                                                 "after 4"]
    assert len([line for line in ax.get_lines() if line.get_linestyle() == ":"]) == 2
