"""The megatron-core student: Qwen3 and Qwen3.5 with TP/PP, loaded from and exported to Hugging Face.

Modules (one job each):

* ``arch``: the architecture read from an HF ``config.json`` (text-only or the Qwen3.5 VL layout);
* ``parallel``: ``torch.distributed`` start-up and megatron's process groups (``ParallelDims``);
* ``cpu_compat``: the context manager that lets megatron-core run on CPU/gloo inside it;
* ``layers``, ``gated_delta_rule``, ``gated_delta_net``, ``specs``: the layers and their ModuleSpecs;
* ``options``: the build options and the run config's ``student`` section (no megatron import);
* ``model``, ``build``: ``StudentModel`` (GPTModel returning hidden states) and the builder;
* ``hf_mapping``, ``weights``: HF <-> megatron tensor layouts, loading and gathered HF-named iteration;
* ``checkpoint``, ``student``: distributed checkpoints and the ``Student`` facade the trainer uses;
* ``logits``: forward-only logits through megatron's pipeline schedules (verification, tests).

Hugging Face release folders, their config files, model cards and weight merges live in ``dnmopd.hf``; tiny
random checkpoints for the tests and the demo in ``dnmopd.examples.tiny``. The names below are imported lazily,
so importing the package does not pull in megatron-core.
"""

import importlib

_EXPORTS = {
    "BuildOptions": "dnmopd.student.options",
    "OutputShard": "dnmopd.student.model",
    "PackedSequences": "dnmopd.student.model",
    "ParallelDims": "dnmopd.student.parallel",
    "Student": "dnmopd.student.student",
    "StudentArch": "dnmopd.student.arch",
    "StudentConfig": "dnmopd.student.options",
    "StudentModel": "dnmopd.student.model",
    "init_distributed": "dnmopd.student.parallel",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dnmopd.student' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
