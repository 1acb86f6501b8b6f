"""A set of inference servers (teachers' scorers, the student's rollout engines): start them all, wait for
health, write the server map, stop them all.

Servers that share a `name` are replicas of one model and share one server-map entry.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from dnmopd.serving.servers import ServerProcess, ServerSpec, write_server_map

logger = logging.getLogger(__name__)


@dataclass(kw_only=True, slots=True)
class ServerSet:
    servers: list[ServerSpec] = field(default_factory=list)
    """One entry per server process; entries with the same name are replicas of one model."""
    map_path: str = "runs/servers.json"
    """Where the server map is written once every server is healthy (removed again on stop)."""
    log_dir: str = "runs/server_logs"
    """Each server's output goes to <log_dir>/<name>-<port>.log."""
    health_timeout_s: float = 1800.0
    """How long to wait for every server to become healthy (big teachers load slowly)."""

    def __post_init__(self):
        if not self.servers:
            raise ValueError("ServerSet.servers: give at least one server")
        ports = [(s.host, s.port) for s in self.servers]
        if len(set(ports)) != len(ports):
            raise ValueError(f"ServerSet.servers: two servers share a host:port in {ports}")
        for spec in self.servers:
            first = next(s for s in self.servers if s.name == spec.name)
            if (spec.backend, spec.model_path) != (first.backend, first.model_path):
                raise ValueError(
                    f"ServerSet.servers: replicas of {spec.name!r} disagree on backend/model_path"
                )


def start_servers(config: ServerSet) -> list[ServerProcess]:
    """Start every server, wait until all are healthy, write the map. On failure stop all and raise."""
    processes = [
        ServerProcess(spec, Path(config.log_dir) / f"{spec.name}-{spec.port}.log") for spec in config.servers
    ]
    try:
        for process in processes:
            logger.info("starting %s (%s) on %s: %s", process.spec.name, process.spec.backend,
                        process.spec.url, process.spec.model_path)
            process.start()
        deadline = time.monotonic() + config.health_timeout_s
        for process in processes:
            process.wait_healthy(timeout_s=max(1.0, deadline - time.monotonic()))
            logger.info("%s is healthy at %s", process.spec.name, process.spec.url)
    except BaseException:
        stop_servers(processes, config)
        raise
    entries: dict[str, tuple[str, str, list[str]]] = {}
    for spec in config.servers:
        entries.setdefault(spec.name, (spec.backend, spec.model_path, []))[2].append(spec.url)
    write_server_map(config.map_path, entries)
    return processes


def stop_servers(processes: list[ServerProcess], config: ServerSet) -> None:
    """Stop every server (SIGTERM, then SIGKILL) and remove the map so nothing reads stale addresses."""
    Path(config.map_path).unlink(missing_ok=True)
    for process in processes:
        process.stop()
