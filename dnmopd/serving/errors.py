"""Errors raised by the HTTP serving layer.

`TransientServerError` is retried (another replica, after a back-off); `RequestRejected` is not: the
server understood the request and refused it (HTTP 4xx), so sending it again cannot help. `StaleReplica`
(a transient error) asks the caller to repair the replica first.
"""

from __future__ import annotations

from typing import Any


class ServingError(RuntimeError):
    """Base class of every serving failure."""


class TransientServerError(ServingError):
    """A failure worth retrying: connection refused or reset, time-out, HTTP 5xx or 429."""


class RequestRejected(ServingError):
    """The server answered 4xx: the request itself is wrong. Never retried."""

    def __init__(self, url: str, status: int, message: str):
        super().__init__(f"{url} rejected the request with HTTP {status}: {message}")
        self.url = url
        self.status = status


class ServerUnavailable(ServingError):
    """Every attempt on every replica failed; `attempts` lists what happened, oldest first."""

    def __init__(self, path: str, attempts: list[str], seconds: float):
        history = "\n  ".join(attempts)
        super().__init__(f"{path}: all {len(attempts)} attempts failed in {seconds:.1f} s:\n  {history}")
        self.attempts = attempts


class StaleReplica(TransientServerError):
    """The replica answered, but from another state than the client set up (e.g. other weights after a restart).

    The caller repairs that replica (see `ReplicaPool.post`) before the request is sent again."""


class ResponseFormatError(TransientServerError):
    """The server answered 200 with a body that does not have the agreed shape (or scored other ids).

    Retried like a transient failure: another replica may answer correctly."""


def describe(value: Any) -> str:
    """A server answer (or part of one) for an error message: its repr, cut at 200 characters."""
    text = repr(value)
    return text if len(text) < 200 else text[:200] + "..."
