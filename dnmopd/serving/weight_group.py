"""The sender's end of a torch process group with SGLang servers, and one weight update sent over it.

SGLang's online update (0.5.23, docs/weight-sync.md): each server joins a custom process group whose rank 0 is
the sender (`/init_weights_update_group`, answered once every rank has joined); an update runs between
`/begin_weight_update` and `/end_weight_update` (400 otherwise); each `/update_weights_from_distributed` call
announces names, dtypes and shapes, and the server receives them by broadcast from rank 0 OF THAT GROUP (SGLang
hard-codes the source; sglang issue #19251). The group is created here with this process as its rank 0 whatever
its global torchrun rank, so any trainer rank can send: no Ray, no rank-0 sender.

    form:  every server's tp_size (`/get_server_info`); POST init to each (rank offsets 1, 1 + tp_1, ...) while
           this process hosts the rendezvous store as rank 0; bounded by `join_timeout_s`, naming the servers
           that did not join
    send:  pause generation, begin, then per bucket (tensors of one dtype up to `bucket_mb`) POST update to every
           server and broadcast the bucket (its bytes as one flat tensor, or one broadcast per tensor); the last
           call sets the version and flushes the radix cache; end, continue

Every wait is bounded by `timeout_s`: the group's collectives (gloo raises at once when a peer's socket closes,
and at the time-out when a peer hangs; NCCL's watchdog enforces it on GPU) and every HTTP call. A failed send
closes the group, so that the servers' pending receives fail instead of waiting, then ends each responsive
server's session and resumes its generation (at most CLEANUP_TIMEOUT_S more); the group is then `broken` and
the next update forms a new one.
"""

from __future__ import annotations

import asyncio
import datetime
import gc
import json
import logging
import socket
import time
from collections.abc import Awaitable, Iterable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import torch
import torch.distributed as dist

from dnmopd.serving import sglang_api
from dnmopd.serving.blocking import io_loop, run_blocking
from dnmopd.serving.errors import ResponseFormatError, ServingError, TransientServerError
from dnmopd.serving.pool import Replica, ReplicaPool, error_message

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "gloo", "nccl")
CLEANUP_TIMEOUT_S = 10.0
"""Bound of the clean-up calls to a server (end the session, resume generation) after a failed send: the send
fails within `timeout_s` of a server's failure, and its clean-up takes at most this much more."""


class WeightGroupError(ServingError):
    """The group could not be formed, or an update over it failed (the message names the server and the step)."""


def local_address(url: str) -> str:
    """This machine's address on its route to the host of `url` (no packet is sent)."""
    host = urlsplit(url).hostname or "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))
        return probe.getsockname()[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def buckets(tensors: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int,
            dtype: torch.dtype | None = None) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Consecutive tensors (cast to `dtype` when given) of one dtype, up to `bucket_bytes` each; a larger tensor
    is a bucket of its own."""
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in tensors:
        tensor = tensor.detach()
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        tensor = tensor.contiguous()
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and (size + nbytes > bucket_bytes or tensor.dtype != bucket[0][1].dtype):
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


def with_last(items: Iterable) -> Iterator[tuple[Any, bool]]:
    """(item, is_last) for each item, reading one ahead."""
    iterator = iter(items)
    try:
        current = next(iterator)
    except StopIteration:
        return
    for following in iterator:
        yield current, False
        current = following
    yield current, True


def flatten(bucket: list[tuple[str, torch.Tensor]]) -> torch.Tensor:
    """The bucket's bytes in order: what SGLang's `flattened_bucket` load format receives."""
    return torch.cat([tensor.reshape(-1).view(torch.uint8) for _, tensor in bucket])


def _new_group(host: str, port: int, world_size: int, name: str, backend: str, *,
               join_timeout_s: float, timeout_s: float):
    """This process as rank 0 of a process group of its own with `world_size - 1` server ranks.

    It mirrors, call for call, how an SGLang server joins (its `init_custom_process_group`): a TCP store hosted by
    rank 0 (the servers' `tcp://` rendezvous connects to it), prefixed by the group's name, and torch's group
    constructor outside the default world. The store is made here, not by `rendezvous`, which under torchrun
    would only connect to the elastic agent's store. torch has no public API for a second group beside the
    default one; this private helper is the one SGLang itself uses, so both sides build the group the same way
    (checked against torch 2.13 here and the server's 2.14.1)."""
    from torch.distributed import distributed_c10d as c10d

    join_timeout = datetime.timedelta(seconds=join_timeout_s)
    store = dist.TCPStore(host, port, world_size, True, join_timeout, multi_tenant=True)
    group, _ = c10d._new_process_group_helper(world_size, 0, [], backend, c10d.PrefixStore(name, store),
                                              group_name=name, timeout=datetime.timedelta(seconds=timeout_s))
    c10d._world.pg_group_ranks[group] = {rank: rank for rank in range(world_size)}
    return group, store


@dataclass(frozen=True, slots=True)
class Member:
    replica: Replica
    rank_offset: int
    tp_size: int


@dataclass(slots=True)
class SendStats:
    seconds: float
    bytes: int
    buckets: int
    tensors: int


class WeightGroup:
    """One process group between this process (rank 0) and every replica of `pool`; `send` one update over it."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        backend: str = "auto"
        """Collective backend of the group: gloo (CPU), nccl (GPU), auto (nccl when CUDA is available)."""
        host: str = ""
        """Address at which the servers reach the sending trainer rank (it hosts the group's rendezvous); "":
        this machine's address on its route to the first server."""
        port: int = 0
        """TCP port of the group's rendezvous on the sending rank (0: a free one, picked at each formation)."""
        bucket_mb: float = 256.0
        """Tensors (of one dtype) per update call, in MiB; a larger tensor is sent alone. Each call is an HTTP round
        trip to every server, so small buckets cost round trips on a GPU (docs/weight-sync.md)."""
        flatten: bool = True
        """Send each bucket's bytes as one broadcast (SGLang's `flattened_bucket`); false: one broadcast per tensor
        (faster through gloo on a CPU, docs/benchmarks.md)."""
        timeout_s: float = 300.0
        """Bound of every collective and HTTP call of an update: a hung server fails the update within it (a dead
        one at once), plus at most 10 s of clean-up on the other servers."""
        join_timeout_s: float = 120.0
        """Bound of forming the group (every server joins, or the error names those that did not)."""

        def __post_init__(self):
            if self.backend not in BACKENDS:
                raise ValueError(f"WeightGroup.Config.backend={self.backend!r}: use one of {BACKENDS}")
            if not 0 <= self.port < 65536:
                raise ValueError(f"WeightGroup.Config.port={self.port}: use 0 (a free port) or a TCP port")
            for name in ("bucket_mb", "timeout_s", "join_timeout_s"):
                if not getattr(self, name) > 0:
                    raise ValueError(f"WeightGroup.Config.{name}={getattr(self, name)}: must be > 0")

        @property
        def resolved_backend(self) -> str:
            if self.backend != "auto":
                return self.backend
            return "nccl" if torch.cuda.is_available() else "gloo"

    def __init__(self, config: Config, pool: ReplicaPool, *, name: str, version: str):
        """Form the group with every replica of `pool` and label each with `version` (blocking; raises
        WeightGroupError). A server that restarts loses the label, which is how its sender finds out."""
        self.config = config
        self.pool = pool
        self.name = name
        self.broken = False
        self.unresponsive: set[str] = set()
        """Servers that did not answer a call of this group in time, or could not be reached."""
        self._group = None
        self._store = None
        self.dtype: torch.dtype | None = None
        """The servers' parameter dtype: tensors are cast to it before they are sent."""
        self.members = self._members()
        self._form()
        try:
            self._on_every_server("version", {"new_version": version})
        except WeightGroupError:
            self.close()
            raise

    # -- forming -------------------------------------------------------------------------------------------

    def _members(self) -> list[Member]:
        async def info(replica: Replica) -> Any:
            return await self._call(replica, "GET", "/get_server_info", None, self.config.join_timeout_s)

        members, offset, dtypes = [], 1, set()
        for replica in self.pool.replicas:
            answer = run_blocking(info(replica))
            tp_size, dp_size = sglang_api.server_parallelism(answer)
            if dp_size != 1:
                raise WeightGroupError(f"rollout server {replica.url} runs data parallel {dp_size}: SGLang updates "
                                       "weights over a process group only with dp_size 1 (start one server per "
                                       "replica instead)")
            members.append(Member(replica, offset, tp_size))
            offset += tp_size
            dtypes.add(answer.get("dtype"))
        served = [getattr(torch, d, None) for d in dtypes if isinstance(d, str)]
        if len(served) == 1 and isinstance(served[0], torch.dtype):
            self.dtype = served[0]
        return members

    @property
    def world_size(self) -> int:
        return 1 + sum(member.tp_size for member in self.members)

    def _form(self) -> None:
        config = self.config
        host = config.host or local_address(self.members[0].replica.url)
        port = config.port or free_port()
        backend = config.resolved_backend
        joins = {member.replica.url: self._submit(self._call(
            member.replica, "POST", sglang_api.WEIGHT_ROUTES["init"],
            sglang_api.init_group_body(host, port, member.rank_offset, self.world_size, self.name, backend),
            config.join_timeout_s)) for member in self.members}
        started = time.monotonic()
        try:
            self._group, self._store = _new_group(host, port, self.world_size, self.name, backend,
                                                  join_timeout_s=config.join_timeout_s, timeout_s=config.timeout_s)
        except Exception as error:  # noqa: BLE001 - the servers' answers say who did not join
            self.close()
            missing = self._failed_calls(joins, wait_s=max(1.0, config.join_timeout_s - (time.monotonic() - started)))
            raise WeightGroupError(f"weight-update group {self.name} at {host}:{port} ({backend}): not formed "
                                   f"within {config.join_timeout_s:g} s; did not join: {missing or 'unknown'} "
                                   f"({error})") from error
        missing = self._failed_calls(joins, wait_s=config.join_timeout_s)
        if missing:
            self.close()
            raise WeightGroupError(f"weight-update group {self.name} at {host}:{port}: {missing}")
        logger.info("weight-update group %s formed at %s:%d (%s): %d servers, world size %d", self.name, host,
                    port, backend, len(self.members), self.world_size)

    # -- sending -------------------------------------------------------------------------------------------

    def send(self, tensors: Iterable[tuple[str, torch.Tensor]], version: str) -> SendStats:
        """Pause, begin, broadcast `tensors` in buckets, end (the servers then serve `version`), continue.
        Raises WeightGroupError within `timeout_s` of a server failing; the group is then `broken`."""
        if self.broken or self._group is None:
            raise WeightGroupError(f"weight-update group {self.name} is closed")
        started = time.monotonic()
        stats = SendStats(0.0, 0, 0, 0)
        bucket_bytes = int(self.config.bucket_mb * 2**20)
        step = "pause generation"
        try:
            self._on_every_server("pause", {"mode": "abort"})
            step = "begin the update"
            self._begin()
            for bucket, last in with_last(buckets(tensors, bucket_bytes, self.dtype)):
                step = f"bucket {stats.buckets + 1} ({bucket[0][0]} ...)"
                self._send_bucket(bucket, version if last else None)
                stats.buckets += 1
                stats.tensors += len(bucket)
                stats.bytes += sum(t.numel() * t.element_size() for _, t in bucket)
            if not stats.tensors:
                raise WeightGroupError("no tensors to send")
            step = "end the update"
            self._on_every_server("end", {})
            step = "resume generation"
            self._on_every_server("continue", {})
        except Exception as error:
            self._fail(version)
            servers = ", ".join(m.replica.url for m in self.members)
            raise WeightGroupError(f"weight-update group {self.name} with {servers}: the update to {version} failed "
                                   f"at {step} after {time.monotonic() - started:.1f} s: {error}") from error
        stats.seconds = time.monotonic() - started
        return stats

    def _begin(self) -> None:
        """Open each server's update session; a session left open by an earlier failed update is ended first."""
        route = sglang_api.WEIGHT_ROUTES["begin"]
        for member in self.members:
            answer = run_blocking(self._call(member.replica, "POST", route, {}, self.config.timeout_s,
                                             accept_refusal=True))
            if isinstance(answer, RefusedAnswer) and sglang_api.SESSION_ALREADY_OPEN in answer.message:
                run_blocking(self._call(member.replica, "POST", sglang_api.WEIGHT_ROUTES["end"], {},
                                        self.config.timeout_s))
                answer = run_blocking(self._call(member.replica, "POST", route, {}, self.config.timeout_s))
            if isinstance(answer, RefusedAnswer):
                raise WeightGroupError(f"{member.replica.url}{route}: {answer.message}")
            sglang_api.check_success(answer, route)

    def _send_bucket(self, bucket: list[tuple[str, torch.Tensor]], version: str | None) -> None:
        flat = self.config.flatten
        body = sglang_api.update_body(bucket, self.name, flattened=flat, version=version)
        route = sglang_api.WEIGHT_ROUTES["update"]
        calls = {m.replica.url: self._submit(self._call(m.replica, "POST", route, body, self.config.timeout_s))
                 for m in self.members}
        try:
            if flat:
                dist.broadcast(flatten(bucket), group=self._group, group_src=0)
            else:
                works = [dist.broadcast(t, group=self._group, group_src=0, async_op=True) for _, t in bucket]
                for work in works:
                    work.wait()
        except Exception as error:
            self.close()  # the servers' receives fail now: a server that still does not answer is unresponsive
            failed = self._failed_calls(calls, wait_s=min(CLEANUP_TIMEOUT_S, self.config.timeout_s))
            raise WeightGroupError(f"the broadcast failed: {error}; {failed or 'every server answered'}") from error
        failed = self._failed_calls(calls, wait_s=self.config.timeout_s)
        if failed:
            raise WeightGroupError(failed)

    def _on_every_server(self, route: str, body: dict) -> None:
        calls = {m.replica.url: self._submit(self._call(m.replica, "POST", sglang_api.WEIGHT_ROUTES[route], body,
                                                        self.config.timeout_s)) for m in self.members}
        failed = self._failed_calls(calls, wait_s=self.config.timeout_s)
        if failed:
            raise WeightGroupError(failed)

    def _fail(self, version: str) -> None:
        """After a failed send: close the group (the servers' receives fail at once), then end each responsive
        server's session, label it `incomplete-<version>` (some buckets may have loaded) and resume its
        generation, each call bounded by CLEANUP_TIMEOUT_S."""
        self.close()
        timeout = min(CLEANUP_TIMEOUT_S, self.config.timeout_s)
        steps = (("end", {}), ("version", {"new_version": f"incomplete-{version}"}), ("continue", {}))
        for member in self.members:
            if member.replica.url in self.unresponsive:
                continue
            for route, body in steps:
                try:
                    run_blocking(self._call(member.replica, "POST", sglang_api.WEIGHT_ROUTES[route], body, timeout,
                                            accept_refusal=True))
                except ServingError as error:
                    logger.warning("%s after a failed weight update: %s", member.replica.url, error)
                    break

    # -- closing -------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Drop this end of the group (its sockets close with it); the servers keep theirs until `destroy`."""
        self.broken = True
        if self._group is not None:
            try:
                dist.destroy_process_group(self._group)
            except Exception as error:  # noqa: BLE001 - a broken group may refuse; its sockets still close below
                logger.warning("weight-update group %s: %s", self.name, error)
        self._group = None
        self._store = None
        gc.collect()  # the gloo pairs close when the last reference goes

    async def drop_on_servers(self) -> None:
        """Ask every reachable server to drop its end of this group (SGLang refuses a second group of one name for
        the life of a server, so every formation has a name of its own)."""
        timeout = min(CLEANUP_TIMEOUT_S, self.config.timeout_s)
        for member in self.members:
            try:
                await self._call(member.replica, "POST", sglang_api.WEIGHT_ROUTES["destroy"],
                                 {"group_name": self.name}, timeout, accept_refusal=True)
            except ServingError:
                pass  # a restarted server has no such group; a dead one has nothing to drop

    # -- HTTP ----------------------------------------------------------------------------------------------

    async def _call(self, replica: Replica, method: str, path: str, body: Any, timeout_s: float, *,
                    accept_refusal: bool = False) -> Any:
        """One request, no retry: the JSON of a 200; a 4xx raises WeightGroupError (or is returned as a
        RefusedAnswer when `accept_refusal`); a time-out or a dead server raises TransientServerError."""
        status, text = await self.pool.request_to(replica, method, path, body, timeout_s=timeout_s)
        if status == 200:
            try:
                return json.loads(text)
            except ValueError as error:
                raise ResponseFormatError(f"{replica.url}{path}: a 200 whose body is not JSON: {text[:200]!r}") \
                    from error
        if accept_refusal and 400 <= status < 500:
            return RefusedAnswer(status, error_message(text))
        raise WeightGroupError(f"{replica.url}{path} answered HTTP {status}: {error_message(text)}")

    @staticmethod
    def _submit(call: Awaitable) -> Future:
        return asyncio.run_coroutine_threadsafe(call, io_loop())

    def _failed_calls(self, calls: dict[str, Future], *, wait_s: float) -> str:
        """Wait for every call (at most `wait_s` in all); '' when all succeeded, else what failed, by server. A
        server that did not answer, or could not be reached, is `unresponsive` (no clean-up call goes to it)."""
        deadline = time.monotonic() + wait_s
        problems = []
        for url, call in calls.items():
            try:
                answer = call.result(timeout=max(0.0, deadline - time.monotonic()))
                if isinstance(answer, dict) and answer.get("success") is False:
                    problems.append(f"{url}: {answer.get('message')}")
            except FutureTimeout:
                call.cancel()
                self.unresponsive.add(url)
                problems.append(f"{url}: no answer within {wait_s:g} s")
            except TransientServerError as error:
                self.unresponsive.add(url)
                problems.append(f"{url}: {error}")
            except ServingError as error:
                problems.append(f"{url}: {error}")
        return "; ".join(problems)


@dataclass(frozen=True, slots=True)
class RefusedAnswer:
    status: int
    message: str
