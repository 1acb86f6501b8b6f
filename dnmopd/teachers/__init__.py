"""Teacher scoring: the `TeacherScorer` interface (`base`), its backends `inprocess`, `sglang` and `vllm` (the
last two over `http_teacher`), multi-teacher scoring with a failure policy (`fleet`), and the self-test of a
teacher against the student before update 1 (`self_test`). A backend is chosen by name in the config and imported
only then (`teacher_class`), never as a side effect of importing this package."""

from __future__ import annotations

from dnmopd.registry import LazyRegistry

teacher_class = LazyRegistry("teacher backend", {
    "inprocess": "dnmopd.teachers.inprocess:InProcessTeacher",
    "sglang": "dnmopd.teachers.sglang:SGLangTeacher",
    "vllm": "dnmopd.teachers.vllm:VLLMTeacher",
})
"""`teacher_class(backend)`: the TeacherScorer class of `backend`; its nested `Config` is what a run configures."""
