"""A pool of identical HTTP server replicas with balancing, limits, time-outs and bounded retries.

One `ReplicaPool` serves one model (a teacher or the rollout engine). Every request picks a replica
(round robin, or the one with the fewest requests in flight), runs under a connection limit and a
per-request time-out, and on a transient failure (connection error, time-out, HTTP 5xx/429, a 200 whose
body fails validation) is retried on another replica after an exponential back-off with jitter, until
`max_attempts` attempts or `retry_timeout_s` seconds are spent: by default long enough to outlast a server
restart. A replica that fails `failures_before_cooldown` times in a row is skipped while others are usable;
its health route is re-checked every `health_check_interval_s` and it rejoins as soon as it answers 200
(without a health route, after `cooldown_s`). HTTP 4xx is never retried: the request itself is wrong.

An answer from a replica in the wrong state (`StaleReplica`, e.g. a restarted server with other weights)
is handed to the caller's `repair` coroutine for that replica, then the request is sent again.

The aiohttp session is bound to the event loop that first uses it; call `aclose()` before that loop ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from dnmopd.serving.errors import RequestRejected, ServerUnavailable, StaleReplica, TransientServerError

logger = logging.getLogger(__name__)

BALANCE_MODES = ("round_robin", "least_loaded")


def normalize_url(url: str) -> str:
    """`host:port` or `http://host:port/` -> `http://host:port` (no trailing slash, no path)."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    return url


def error_message(body: str) -> str:
    """The human-readable part of an error body (SGLang, vLLM and FastAPI envelopes), else the raw text."""
    try:
        payload = json.loads(body)
    except ValueError:
        return body.strip()[:500]
    if isinstance(payload, dict):
        inner = payload.get("error")
        if isinstance(inner, dict) and "message" in inner:
            return str(inner["message"])
        for key in ("message", "detail", "error"):
            if key in payload:
                return str(payload[key])
    return body.strip()[:500]


@dataclass(slots=True)
class Replica:
    url: str
    in_flight: int = 0
    consecutive_failures: int = 0
    cooldown_until: float = 0.0
    last_pick: int = 0


class ReplicaPool:
    @dataclass(kw_only=True, slots=True)
    class Config:
        urls: list[str] = field(default_factory=list)
        """Base URLs of the replicas (`http://host:port` or `host:port`); at least one."""
        balance: str = "least_loaded"
        """`least_loaded` (fewest requests in flight, ties round robin) or `round_robin`."""
        max_connections: int = 64
        """Open connections to all replicas together (= requests in flight)."""
        max_connections_per_replica: int = 16
        """Open connections to one replica."""
        connect_timeout_s: float = 10.0
        """Time-out for establishing a connection."""
        request_timeout_s: float = 120.0
        """Time-out for one whole request (send, server work, read)."""
        max_attempts: int = 100
        """Attempts per request in total, first one included (`retry_timeout_s` usually ends retrying first)."""
        retry_timeout_s: float = 600.0
        """No new attempt starts once this long has passed since the first one: the default outlasts a server
        restart (1-5 minutes on a loaded machine or for a large model; raise it for teachers that load slower)."""
        backoff_initial_s: float = 0.5
        """Back-off before the second attempt; doubled for each further attempt."""
        backoff_max_s: float = 8.0
        """Upper bound of the exponential part of the back-off."""
        backoff_jitter_s: float = 0.25
        """Uniform random extra delay in [0, jitter] added to each back-off."""
        failures_before_cooldown: int = 2
        """Consecutive failures after which a replica is skipped (cool-down) while other replicas are usable."""
        cooldown_s: float = 15.0
        """Cool-down length; a replica whose health re-check fails stays out for another `cooldown_s`."""
        health_check_interval_s: float = 5.0
        """How often the health route of a replica in cool-down is re-checked; 200 ends its cool-down."""

        def __post_init__(self):
            if not self.urls:
                raise ValueError("ReplicaPool.Config.urls: give at least one server URL")
            if self.balance not in BALANCE_MODES:
                raise ValueError(f"ReplicaPool.Config.balance={self.balance!r}: use one of {BALANCE_MODES}")
            for name in ("max_connections", "max_connections_per_replica", "max_attempts"):
                if getattr(self, name) < 1:
                    raise ValueError(f"ReplicaPool.Config.{name}={getattr(self, name)}: must be >= 1")
            for name in ("connect_timeout_s", "request_timeout_s", "health_check_interval_s"):
                if getattr(self, name) <= 0:
                    raise ValueError(f"ReplicaPool.Config.{name}={getattr(self, name)}: must be > 0")
            for name in ("retry_timeout_s", "backoff_initial_s", "backoff_max_s", "backoff_jitter_s", "cooldown_s"):
                if getattr(self, name) < 0:
                    raise ValueError(f"ReplicaPool.Config.{name}={getattr(self, name)}: must be >= 0")

        def build(self, *, name: str = "pool", health_path: str | None = None) -> ReplicaPool:
            return ReplicaPool(self, name=name, health_path=health_path)

    def __init__(self, config: Config, *, name: str = "pool", health_path: str | None = None):
        self.config = config
        self.name = name
        self.health_path = health_path
        """GET route answering 200 when a replica is up (re-checked during cool-down); None: time-based only."""
        self.replicas = [Replica(normalize_url(url)) for url in config.urls]
        self.counters: Counter[str] = Counter()
        self._picks = 0
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        self._health_checks: dict[str, asyncio.Task] = {}

    # -- session -------------------------------------------------------------------------------------------

    def _get_session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            connector = aiohttp.TCPConnector(
                limit=self.config.max_connections, limit_per_host=self.config.max_connections_per_replica
            )
            timeout = aiohttp.ClientTimeout(
                total=self.config.request_timeout_s, connect=self.config.connect_timeout_s
            )
            self._session = aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False)
            self._session_loop = loop
        return self._session

    async def aclose(self) -> None:
        checks, self._health_checks = list(self._health_checks.values()), {}
        for task in checks:
            task.cancel()
        await asyncio.gather(*checks, return_exceptions=True)
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None
        self._session_loop = None

    # -- replica choice ------------------------------------------------------------------------------------

    async def each_replica(self, action: Callable[[Replica], Awaitable[None]]) -> None:
        """`action(replica)` on every replica in turn (the first failure stops)."""
        for replica in self.replicas:
            await action(replica)

    def pick(self, exclude: Replica | None = None) -> Replica:
        now = time.monotonic()
        usable = [r for r in self.replicas if r is not exclude] or self.replicas
        cooled = [r for r in usable if r.cooldown_until <= now] or usable
        if self.config.balance == "round_robin":
            chosen = min(cooled, key=lambda r: r.last_pick)
        else:
            chosen = min(cooled, key=lambda r: (r.in_flight, r.last_pick))
        self._picks += 1
        chosen.last_pick = self._picks
        return chosen

    def _backoff_s(self, failed_attempts: int) -> float:
        exponential = self.config.backoff_initial_s * 2 ** (failed_attempts - 1)
        return min(self.config.backoff_max_s, exponential) + random.uniform(0, self.config.backoff_jitter_s)

    def _record_failure(self, replica: Replica) -> None:
        replica.consecutive_failures += 1
        if replica.consecutive_failures >= self.config.failures_before_cooldown:
            replica.cooldown_until = time.monotonic() + self.config.cooldown_s
            self._start_health_check(replica)

    def _record_success(self, replica: Replica) -> None:
        replica.consecutive_failures = 0
        replica.cooldown_until = 0.0

    def _start_health_check(self, replica: Replica) -> None:
        task = self._health_checks.get(replica.url)
        if self.health_path is None or (task is not None and not task.done()):
            return
        self._health_checks[replica.url] = asyncio.get_running_loop().create_task(self._health_check(replica))

    async def health_status(self, replica: Replica, *, timeout_s: float) -> int:
        """The HTTP status with which the replica answers its health route (one attempt)."""
        status, _ = await self.request_to(replica, "GET", self.health_path, timeout_s=timeout_s)
        return status

    async def _health_check(self, replica: Replica) -> None:
        """Re-check a cooling replica's health route until it answers 200, then end its cool-down."""
        while replica.cooldown_until > 0:
            await asyncio.sleep(self.config.health_check_interval_s)
            try:
                status = await self.health_status(replica, timeout_s=self.config.request_timeout_s)
            except TransientServerError:
                status = 0
            if status == 200:
                logger.info("%s: %s is healthy again", self.name, replica.url)
                self._record_success(replica)
                return
            replica.cooldown_until = time.monotonic() + self.config.cooldown_s

    # -- requests ------------------------------------------------------------------------------------------

    async def post(
        self, path: str, body: Any, parse: Callable[[Any], Any] | None = None, *,
        replica: Replica | None = None, repair: Callable[[Replica], Awaitable[None]] | None = None,
    ) -> Any:
        """POST `body` as JSON to `path` on some replica (or only on `replica`), with retries; returns
        `parse(json)` (or the JSON).

        `parse` may raise `TransientServerError` (e.g. `ResponseFormatError`) to have the attempt retried, or
        `StaleReplica` to have `repair(replica)` run before the next attempt (without `repair` it is retried
        like any transient failure). Raises `RequestRejected` at once on HTTP 4xx, `ServerUnavailable` when
        `max_attempts` attempts failed or `retry_timeout_s` ran out.
        """
        attempts: list[str] = []
        failed: Replica | None = None
        start = time.monotonic()
        for attempt in range(1, self.config.max_attempts + 1):
            target = replica or self.pick(exclude=failed)
            self.counters["requests"] += 1
            try:
                payload = await self.post_to(target, path, body)
                result = parse(payload) if parse is not None else payload
            except StaleReplica as error:
                attempts.append(f"attempt {attempt} on {target.url}: {error}")
                if repair is None:
                    failed = self._failed(target, path, attempt, error)
                else:
                    self.counters["repairs"] += 1
                    await repair(target)
                    continue
            except TransientServerError as error:
                attempts.append(f"attempt {attempt} on {target.url}: {error}")
                failed = self._failed(target, path, attempt, error)
            else:
                self._record_success(target)
                return result
            delay = self._backoff_s(attempt)
            if attempt == self.config.max_attempts or time.monotonic() + delay - start > self.config.retry_timeout_s:
                break
            await asyncio.sleep(delay)
        self.counters["exhausted"] += 1
        raise ServerUnavailable(f"{self.name} POST {path}", attempts, time.monotonic() - start)

    def _failed(self, replica: Replica, path: str, attempt: int, error: Exception) -> Replica:
        self._record_failure(replica)
        self.counters["failed_attempts"] += 1
        logger.warning("%s %s attempt %d on %s failed: %s", self.name, path, attempt, replica.url, error)
        return replica

    async def post_to(self, replica: Replica, path: str, body: Any) -> Any:
        """One POST to one replica, no retry. Returns the parsed JSON body of a 200."""
        return self._json_answer(replica, path, *await self.request_to(replica, "POST", path, body))

    async def get(self, replica: Replica, path: str) -> Any:
        """One GET to one replica, no retry. Returns the parsed JSON body of a 200."""
        return self._json_answer(replica, path, *await self.request_to(replica, "GET", path))

    @staticmethod
    def _json_answer(replica: Replica, path: str, status: int, text: str) -> Any:
        if status == 200:
            try:
                return json.loads(text)
            except ValueError as error:
                raise TransientServerError(f"HTTP 200 with a body that is not JSON: {text[:200]!r}") from error
        if status == 429 or status >= 500:
            raise TransientServerError(f"HTTP {status}: {error_message(text)}")
        raise RequestRejected(replica.url + path, status, error_message(text))

    async def request_to(
        self, replica: Replica, method: str, path: str, body: Any = None, *, timeout_s: float | None = None
    ) -> tuple[int, str]:
        """One request to one replica; returns (status, body text). Transport failures become transient."""
        session = self._get_session()
        # passing timeout=None would disable the session's time-outs: only override when asked
        options = {"timeout": aiohttp.ClientTimeout(total=timeout_s)} if timeout_s is not None else {}
        replica.in_flight += 1
        try:
            async with session.request(method, replica.url + path, json=body, **options) as response:
                return response.status, await response.text()
        except (TimeoutError, aiohttp.ClientError) as error:
            kind = "time-out" if isinstance(error, TimeoutError) else type(error).__name__
            raise TransientServerError(f"{kind}: {error}".rstrip(": ")) from error
        finally:
            replica.in_flight -= 1
