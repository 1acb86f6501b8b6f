"""Dispatch a run to its mode's trainer."""

from __future__ import annotations

from dnmopd.trainer.config import TrainerConfig


def run(config: TrainerConfig) -> None:
    from dnmopd.trainer.trainer import Trainer

    trainer = Trainer(config)
    try:
        trainer.train()
    finally:
        trainer.close()
