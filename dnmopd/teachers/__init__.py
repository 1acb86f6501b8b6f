"""Teacher scoring: the `TeacherScorer` interface (`base`), its backends `inprocess`, `sglang` and `vllm`,
and multi-teacher scoring with a failure policy (`fleet`). A backend is chosen by name in the config and
imported only then (`teacher_class`), never as a side effect of importing this package."""

from __future__ import annotations

import importlib

TEACHER_BACKENDS = {
    "inprocess": ("dnmopd.teachers.inprocess", "InProcessTeacher"),
    "sglang": ("dnmopd.teachers.sglang", "SGLangTeacher"),
    "vllm": ("dnmopd.teachers.vllm", "VLLMTeacher"),
}


def teacher_class(backend: str):
    """The TeacherScorer class of `backend`; its nested `Config` is what a run configures."""
    if backend not in TEACHER_BACKENDS:
        raise ValueError(f"teacher backend {backend!r}: use one of {sorted(TEACHER_BACKENDS)}")
    module, name = TEACHER_BACKENDS[backend]
    return getattr(importlib.import_module(module), name)
