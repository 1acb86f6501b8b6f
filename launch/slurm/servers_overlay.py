"""Write the server addresses of a run from server maps into a config file to pass last to the trainer.

    python launch/slurm/servers_overlay.py --config <the run's --config files> [--set key=value ...] \
        --map runs/job/servers-2.json@gpu-node-2 --map runs/job/servers-3.json@gpu-node-3 \
        --output runs/job/servers.yaml [--update-dir runs/job/rollout_weights]

`launch/start_servers.py` writes a server map (name -> backend, model path, URLs) once its servers are
healthy. The map holds what the server files say, so the overlay can also be written before any server starts,
from the server files themselves (`--servers FILE[@HOST]`, with the `--servers-set` overrides that
start_servers.py will get): launch/slurm/dnmopd.sbatch does that to check the whole config first. This tool reads
the run's merged config and the maps and writes an overlay that

- gives every HTTP teacher in `teachers.models` (matched by name) the served model path and the URLs of all
  its replicas, over all maps, keeping the entry's other options (the list is written whole: lists replace);
- gives an HTTP rollout engine the URLs of the map entry named `rollout` (whose model must be
  `student.hf_path`: the rollout servers start from the student's initial weights), and `--update-dir`.

A map written by servers that bind every interface (host 0.0.0.0) lists URLs no other node can use: name the
node after the map (`--map FILE@HOST`) and its URLs are rewritten to that host. Every map entry must be used
and every HTTP teacher found, or the tool stops with an error naming the entry.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import yaml

from dnmopd.config import ConfigError, RawConfig, load_config, load_yaml
from dnmopd.serving.server_set import ServerSet
from dnmopd.serving.servers import BACKENDS as HTTP_BACKENDS
from dnmopd.serving.servers import read_server_map

ROLLOUT = "rollout"
BIND_ALL = {"0.0.0.0", "::", ""}


class OverlayError(ValueError):
    """The config and the server maps do not fit together; the message names the entry."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--config", action="append", required=True, help="the run's config YAML (repeatable)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="the run's --set overrides (repeatable)")
    sources = parser.add_mutually_exclusive_group(required=True)
    sources.add_argument("--map", dest="maps", action="append", metavar="FILE[@HOST]",
                         help="a server map; @HOST replaces a bind-all address in its URLs (repeatable)")
    sources.add_argument("--servers", action="append", metavar="FILE[@HOST]",
                         help="a server file of launch/start_servers.py, for the map it will write (repeatable)")
    parser.add_argument("--servers-set", action="append", default=[], metavar="KEY=VALUE",
                        help="an override of every --servers file, as start_servers.py gets it (repeatable)")
    parser.add_argument("--output", required=True, type=Path, help="overlay YAML to write")
    parser.add_argument("--update-dir", help="rollout.engine.update_dir (a folder the rollout servers can read)")
    return parser.parse_args(argv)


def with_host(url: str, host: str | None, where: str) -> str:
    parts = urlsplit(url)
    if parts.hostname not in BIND_ALL and parts.hostname is not None:
        return url
    if not host:
        raise OverlayError(f"{where}: {url} binds every interface; name the server node: {where}@HOST")
    return urlunsplit(parts._replace(netloc=host if parts.port is None else f"{host}:{parts.port}"))


def _file_and_host(spec: str) -> tuple[str, str]:
    path, sep, host = spec.rpartition("@")
    return (path, host) if sep else (spec, "")


def read_maps(specs: list[str]) -> dict[str, dict]:
    """Entries of all maps by name; replicas of one name on several maps are joined."""
    return join_maps([(path, host, read_server_map(path)) for path, host in map(_file_and_host, specs)])


def planned_maps(specs: list[str], overrides: list[str]) -> dict[str, dict]:
    """The entries the server maps of these server files will hold once their servers are healthy."""
    maps = []
    for path, host in map(_file_and_host, specs):
        entries: dict[str, dict] = {}
        for server in load_config(ServerSet, path, overrides).servers:
            entry = entries.setdefault(server.name, {"backend": server.backend, "path": server.model_path,
                                                     "servers": []})
            entry["servers"].append(server.url)
        maps.append((path, host, entries))
    return join_maps(maps)


def join_maps(maps: list[tuple[str, str, dict[str, dict]]]) -> dict[str, dict]:
    """(where, host, map entries) of several maps -> entries by name, replicas joined, bind-all URLs rewritten."""
    servers: dict[str, dict] = {}
    for path, host, entries in maps:
        for name, entry in entries.items():
            urls = [with_host(url, host, path) for url in entry["servers"]]
            known = servers.setdefault(name, {"backend": entry["backend"], "path": entry["path"], "urls": [],
                                              "where": path})
            if (known["backend"], known["path"]) != (entry["backend"], entry["path"]):
                raise OverlayError(f"{path}: {name} is served as {entry['backend']} {entry['path']}, but "
                                   f"{known['where']} serves it as {known['backend']} {known['path']}")
            known["urls"].extend(urls)
    return servers


def served(servers: dict[str, dict], name: str, backend: str, what: str) -> dict:
    if name not in servers:
        raise OverlayError(f"{what} ({backend}) has no server in the maps; served: {sorted(servers)}")
    entry = servers[name]
    if entry["backend"] != backend:
        raise OverlayError(f"{what} is configured as {backend} but {entry['where']} serves it with {entry['backend']}")
    return entry


def build_overlay(raw: RawConfig, servers: dict[str, dict], update_dir: str | None) -> dict:
    data, overlay, used = raw.data, {}, set()
    models = (data.get("teachers") or {}).get("models") or []
    teachers = []
    for index, model in enumerate(models):
        if not isinstance(model, dict) or model.get("backend") not in HTTP_BACKENDS:
            teachers.append(model)
            continue
        name = model.get("name")
        where = raw.source(("teachers", "models", str(index)))
        entry = served(servers, name, model["backend"], f"teacher {name} ({where})")
        used.add(name)
        pool = {**(model.get("pool") or {}), "urls": entry["urls"]}
        teachers.append({**model, "model_path": entry["path"], "pool": pool})
    if any(isinstance(m, dict) and m.get("backend") in HTTP_BACKENDS for m in models):
        overlay["teachers"] = {"models": teachers}
    engine = (data.get("rollout") or {}).get("engine") or {}
    if engine.get("backend") in HTTP_BACKENDS:
        entry = served(servers, ROLLOUT, engine["backend"], f"rollout.engine ({raw.source(('rollout', 'engine'))})")
        used.add(ROLLOUT)
        student = (data.get("student") or {}).get("hf_path")
        if student is None or os.path.realpath(str(student)) != os.path.realpath(entry["path"]):
            raise OverlayError(f"the rollout servers ({entry['where']}) serve {entry['path']} but student.hf_path is "
                               f"{student}: they must start from the student's initial weights")
        overlay["rollout"] = {"engine": {"model_path": entry["path"], "pool": {"urls": entry["urls"]}}}
        if update_dir:
            overlay["rollout"]["engine"]["update_dir"] = update_dir
    unused = sorted(set(servers) - used)
    if unused:
        raise OverlayError(f"servers {unused} ({', '.join(servers[n]['where'] for n in unused)}) are neither an "
                           f"HTTP teacher of the config (teachers.models) nor its rollout engine (name {ROLLOUT!r})")
    return overlay


def write_overlay(overlay: dict, output: Path, sources: str) -> None:
    header = f"# Written by launch/slurm/servers_overlay.py from {sources}\n"
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp-{os.getpid()}")
    tmp.write_text(header + yaml.safe_dump(overlay, sort_keys=False))
    os.replace(tmp, output)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        raw = RawConfig()
        for path in args.config:
            raw.merge(load_yaml(path))
        for assignment in args.overrides:
            raw.override(assignment)
        if args.maps:
            servers, sources = read_maps(args.maps), "the server maps " + ", ".join(args.maps)
        else:
            servers = planned_maps(args.servers, args.servers_set)
            sources = "the server files " + ", ".join(args.servers) + " (before their servers started)"
        overlay = build_overlay(raw, servers, args.update_dir)
    except (ConfigError, OverlayError, ValueError) as error:
        print(f"servers_overlay: {error}", file=sys.stderr)
        return 2
    write_overlay(overlay, args.output, sources)
    print(f"servers_overlay: wrote {args.output}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
