"""The trainer's console: one rank speaks, and the libraries' known notices are filtered where they come from.

`timed(logger, what)` logs the start of a long step and its end with the seconds it took.

`setup_logging()` is called once by the training command line, before megatron-core, transformers or datasets are
imported:

- rank 0 (torchrun's RANK) logs INFO and up; every other rank WARNING and up, its lines tagged with its rank,
  except the work that one rank does for all, whichever rank it is (the weight-update group's sender,
  `rollout.sender_dp_rank`): INFO on every rank;
- megatron-core's INFO chatter (its optimizer and DDP set-up, every bucket's parameter list) and huggingface_hub's
  (one line per weight file saved) are dropped; their warnings are kept;
- the notices that are expected, not news, are dropped by their exact text at their source (a Python warning
  by its module, a log record by its logger): megatron-core's import-time notices that Transformer Engine or Apex
  are missing (the torch fallbacks are the supported path without them) and its deprecation of its own default
  `cuda_graph_scope`; and, on a machine without CUDA, transformers' notices that Gated DeltaNet falls back to
  its reference implementation (flash-linear-attention and causal-conv1d need CUDA) and megatron-core's
  "CPU RNG state changed within GPU RNG context" (on a CPU, dnmopd.student.cpu_compat makes the CPU generator
  the "GPU" one);
- no progress bars from datasets, transformers or huggingface_hub (loading and writing weights, generating a
  split): the trainer draws its own progress (dnmopd.trainer.measurements.progress). An environment variable
  set by the user wins.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import warnings

QUIET_PACKAGES = ("megatron", "huggingface_hub")
"""Libraries whose INFO records are set-up chatter: WARNING and up only (found by the file that logs them:
huggingface_hub names some of its loggers after their file path)."""
EXPECTED_WARNINGS = (
    (r"(Transformer Engine and Apex are|Apex is) not installed", r"megatron\."),
    (r"full scope is deprecated", r"megatron\.core\.transformer\.transformer_config"),
)
"""(message, module) regular expressions of megatron-core's Python warnings that are expected."""
CPU_ONLY_NOTICES = {
    "transformers.integrations.hub_kernels": "is falling back to its reference PyTorch implementation",
    "megatron.core.tensor_parallel.random": "CPU RNG state changed within GPU RNG context",
}
"""logger -> the start or middle of a record that is expected where there is no CUDA."""
ONE_RANK_LOGGERS = ("dnmopd.serving.weight_group",)
"""Loggers of work that a single rank does for the run, which need not be rank 0: INFO wherever it runs."""
PROGRESS_BARS_OFF = ("HF_DATASETS_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_PROGRESS_BARS")
"""Read by datasets and huggingface_hub (whose setting transformers follows) when they are imported."""


class _Chatter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not any(
            f"{os.sep}{package}{os.sep}" in record.pathname for package in QUIET_PACKAGES)


class _CpuOnlyNotice(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        torch = sys.modules.get("torch")  # imported by whoever logs these
        return not (self.text in record.getMessage() and torch is not None and not torch.cuda.is_available())


def process_rank() -> int:
    """This process's global rank under torchrun (0 outside it)."""
    return int(os.environ.get("RANK", "0"))


def setup_logging(rank: int | None = None) -> None:
    rank = process_rank() if rank is None else rank
    tag = f"rank {rank} " if rank else ""
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING, force=True,
                        format=f"%(asctime)s {tag}%(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_Chatter())
    for name in ONE_RANK_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
    for message, module in EXPECTED_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=UserWarning, module=module)
    for name, text in CPU_ONLY_NOTICES.items():
        logging.getLogger(name).addFilter(_CpuOnlyNotice(text))
    for variable in PROGRESS_BARS_OFF:
        os.environ.setdefault(variable, "1")


@contextlib.contextmanager
def timed(logger: logging.Logger, what: str):
    """Log `what` at its start and at its end, with the seconds it took (INFO: rank 0's only)."""
    logger.info("%s ...", what)
    start = time.perf_counter()
    yield
    logger.info("%s: done in %.1f s", what, time.perf_counter() - start)
