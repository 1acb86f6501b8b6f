"""An HTTP server that answers with the exchanges recorded from real SGLang / vLLM servers.

Run as a process: `python replay_server.py --fixtures DIR [--behavior B] [--port P]`; it binds
127.0.0.1 (on a free port unless given) and prints `PORT <n>` once it listens. A request is answered with
the recorded response whose request body is equal (vLLM's optional "model" key ignored; the earliest
recording wins); items of recorded batch exchanges are also indexed as single requests. Anything
unrecorded gets 404, so a client that sends a body different from what the real server was sent fails.

`GET /_connections` answers how many TCP connections clients have opened to it so far (distinct client
addresses), for tests of connection reuse.

Behaviors (scoring/generation routes only, except `unhealthy`; info routes always answer):
  ok            answer from the recordings
  slow:S        sleep S seconds first (a replica that times out)
  http500       answer 500 "Internal Server Error" (what SGLang sends on an unhandled error)
  die_after:N   answer N requests, then exit abruptly on the next one without replying (a crashed server)
  unhealthy     the health routes answer 503 (a server still loading, or one whose engine died)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

from aiohttp import web

WORK_ROUTES = {"/generate", "/v1/completions"}
HEALTH_ROUTES = {"/health", "/health_generate"}


def _key(method: str, path: str, body) -> str:
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k != "model"}
    return json.dumps([method, path, body], sort_keys=True)


def load_recordings(fixtures: Path) -> dict[str, tuple[int, object, str | None]]:
    table: dict[str, tuple[int, object, str | None]] = {}
    for file in sorted(fixtures.glob("*/*.json")):
        record = json.loads(file.read_text())
        if record.get("status") is None:
            continue  # the server died: nothing to replay
        answer = (record["status"], record["response"], record.get("response_content_type"))
        # a request recorded twice (e.g. again after a weight update) replays its first, normal-state answer
        table.setdefault(_key(record["method"], record["path"], record["request"]), answer)
        for single, response in _batch_items(record):
            table.setdefault(_key(record["method"], record["path"], single), (200, response, "application/json"))
    return table


def _batch_items(record):
    """Single-request views of a recorded 200 batch exchange (SGLang list answer, vLLM choices)."""
    request, response = record["request"], record["response"]
    if record["status"] != 200 or not isinstance(request, dict):
        return
    if record["path"] == "/generate" and isinstance(response, list) and isinstance(request.get("input_ids"), list) \
            and request["input_ids"] and isinstance(request["input_ids"][0], list):
        lsl = request.get("logprob_start_len")
        for i, ids in enumerate(request["input_ids"]):
            single = dict(request, input_ids=ids)
            if isinstance(lsl, list):
                single["logprob_start_len"] = lsl[i]
            yield single, response[i]
    if record["path"] == "/v1/completions" and isinstance(request.get("prompt"), list) and request["prompt"] \
            and isinstance(request["prompt"][0], list):
        for choice in response["choices"]:
            single = dict(request, prompt=request["prompt"][choice["index"]])
            yield single, dict(response, choices=[dict(choice, index=0)])


def make_app(table, behavior: str) -> web.Application:
    state = {"answered": 0}
    clients = set()

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.path == "/_connections":
            return web.json_response({"connections": len(clients)})
        clients.add(request.transport.get_extra_info("peername"))
        body = None
        if request.can_read_body:
            try:
                body = await request.json()
            except ValueError:
                return web.Response(status=400, text="malformed JSON")
        if behavior == "unhealthy" and request.path in HEALTH_ROUTES:
            return web.Response(status=503, text="Service Unavailable")
        if request.path in WORK_ROUTES:
            if behavior.startswith("die_after:") and state["answered"] >= int(behavior.split(":")[1]):
                os._exit(1)  # like SGLang's scheduler crash: the process is gone, no reply
            if behavior.startswith("slow:"):
                await asyncio.sleep(float(behavior.split(":")[1]))
            if behavior == "http500":
                return web.Response(status=500, text="Internal Server Error")
        found = table.get(_key(request.method, request.path, body))
        if found is None:
            return web.json_response({"error": {"message": f"not recorded: {request.method} {request.path}"}},
                                     status=404)
        if request.path in WORK_ROUTES:
            state["answered"] += 1
        status, response, content_type = found
        if content_type and "json" in content_type or not isinstance(response, str):
            return web.json_response(response, status=status)
        return web.Response(status=status, text=response, content_type=(content_type or "text/plain").split(";")[0])

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


async def serve(fixtures: Path, behavior: str, port: int) -> None:
    runner = web.AppRunner(make_app(load_recordings(fixtures), behavior))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print(f"PORT {port}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fixtures", type=Path, required=True)
    parser.add_argument("--behavior", default="ok")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    args, _ = parser.parse_known_args()  # ignores server options when standing in for a real server
    try:
        asyncio.run(serve(args.fixtures, args.behavior, args.port))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
