"""Blocking calls into the async rollout engines and teachers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

T = TypeVar("T")


class AsyncClient(Protocol):
    async def aclose(self) -> None: ...


def run_blocking(work: Callable[[], Awaitable[T]], client: AsyncClient) -> T:
    """`work()` on a fresh event loop, then `client.aclose()`: its HTTP session belongs to that loop and cannot
    serve the next one."""

    async def run() -> T:
        try:
            return await work()
        finally:
            await client.aclose()

    return asyncio.run(run())
