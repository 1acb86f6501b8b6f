"""Run one training run (any mode: the one `Trainer` drives them all), inside megatron-core's CPU layer when
there is no GPU."""

from __future__ import annotations

from dnmopd.trainer.config import TrainerConfig


def run(config: TrainerConfig) -> None:
    from dnmopd.student.cpu_compat import cpu_compat
    from dnmopd.trainer.trainer import Trainer

    with cpu_compat():
        trainer = Trainer(config)
        try:
            trainer.train()
        finally:
            trainer.close()
