"""The measurements of the weights an update produced, beyond the update's own metrics: the fixed probe set's
exact KL to the teachers (`probe.py`, `logging.probe_every`) and the evaluation during training
(`evaluation.py`, `eval:`). The trainer builds one `Measurements` and, in each update, calls it where each
measurement belongs:

    after_training(update)   after the optimizer steps, before the weight sync: the probe (a student forward on
                             every rank, while a batch collected ahead is still generating), timed as the
                             update's "probe" phase and reduced with the update's metrics
    after_sync(update)       after the weight sync: the evaluation (rank 0's rollout engine then serves exactly
                             the new weights and nothing else generates), its metrics the same on every rank
"""

from __future__ import annotations

import time

from dnmopd.trainer.measurements.evaluation import TrainingEvaluation
from dnmopd.trainer.measurements.probe import FixedProbe
from dnmopd.trainer.measurements.progress import ProgressDisplay


class Measurements:
    def __init__(self, evaluation: TrainingEvaluation, probe: FixedProbe | None = None):
        self.evaluation = evaluation
        self.probe = probe  # the trainer sets it after its resume, which the probe must know (`build_probe`)

    def after_training(self, update: int, progress: ProgressDisplay, phases: dict) -> dict[str, float]:
        """This rank's parts of the probe metrics when the probe is due; its phase joins `phases`."""
        if self.probe is None or not self.probe.due(update):
            return {}
        progress.phase("probe")
        tick = time.time()
        metrics = self.probe.measure()
        phases["probe"] = (tick, time.time())
        return metrics

    def after_sync(self, update: int, progress: ProgressDisplay) -> dict[str, float]:
        """The evaluation metrics when an evaluation is due (every rank gets the same dict)."""
        if not self.evaluation.due(update):
            return {}
        progress.phase("eval")
        return self.evaluation.after_update(update)

    def close(self) -> None:
        self.evaluation.close()
