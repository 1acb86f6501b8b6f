"""Start a set of SGLang or vLLM servers (teachers, rollout engines); wait for health, write the server map.

    python launch/start_servers.py --config servers.yaml [--set map_path=runs/x/servers.json]

The YAML is a `dnmopd.serving.server_set.ServerSet`:

    map_path: runs/demo/servers.json
    health_timeout_s: 1800
    servers:
      - {name: math_teacher, backend: sglang, model_path: /ckpt/math, port: 13141, gpus: "4",
         python: /envs/sglang/bin/python, extra_args: [--mem-fraction-static, "0.35", --chunked-prefill-size, "4096"]}
      - {name: code_teacher, backend: vllm, model_path: /ckpt/code, port: 13142, gpus: "5",
         python: /envs/vllm/bin/python, env: {VLLM_SERVER_DEV_MODE: "1"}}

The script stays in the foreground: once every server is healthy it writes the map and prints it; it
stops all servers cleanly (and removes the map) on Ctrl-C / SIGTERM or as soon as any server exits.
Exit status: 0 after a requested stop, 1 if a server failed to start or died.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time

from dnmopd.config.loader import ConfigError, load_config
from dnmopd.serving.server_set import ServerSet, start_servers, stop_servers


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, nargs="+", help="ServerSet YAML file(s), merged in order")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key (repeatable)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = parse_args(argv)
    try:
        config = load_config(ServerSet, args.config, args.overrides)
    except ConfigError as error:
        print(f"start_servers: {error}", file=sys.stderr)
        return 2
    stop_requested = False

    def request_stop(signum, frame):
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        processes = start_servers(config)
    except (RuntimeError, TimeoutError) as error:
        print(f"start_servers: {error}", file=sys.stderr)
        return 1
    print(f"start_servers: all {len(processes)} servers healthy; server map at {config.map_path}", flush=True)
    try:
        while not stop_requested:
            dead = [p for p in processes if p.process.poll() is not None]
            if dead:
                print(f"start_servers: {dead[0].spec.name} exited:\n{dead[0].log_tail()}", file=sys.stderr)
                return 1
            time.sleep(1.0)
        return 0
    finally:
        stop_servers(processes, config)
        print("start_servers: all servers stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
