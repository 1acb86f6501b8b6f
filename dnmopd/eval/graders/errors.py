"""The graders' one error type."""


class GraderError(RuntimeError):
    """The grader itself failed (checker exception, unimplemented instruction, sandbox failure)."""
