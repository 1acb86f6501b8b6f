"""A local stand-in for the Hugging Face Hub's file endpoint, for download tests (no network).

Serves ``HEAD``/``GET /datasets/<repo>/resolve/<revision>/<path>`` with the headers ``hf_hub_download``
reads (``X-Repo-Commit``, ``ETag``, ``Content-Length``), HTTP Range requests, and the Hub's 404 error code.
``cut_at[path] = n`` makes every GET of ``path`` stop at byte ``n`` of the file and drop the connection (a
transfer that keeps failing, even when resumed).
"""

from __future__ import annotations

import hashlib
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_ROUTE = re.compile(r"^/datasets/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")


class FakeHub:
    def __init__(self, repo_id: str, revision: str, files: dict[str, bytes]) -> None:
        self.repo_id, self.revision, self.files = repo_id, revision, dict(files)
        self.cut_at: dict[str, int] = {}
        self.requests: list[tuple[str, str]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub._serve(self, body=False)

            def do_GET(self):
                hub._serve(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def gets(self, path: str) -> int:
        return sum(1 for method, p in self.requests if method == "GET" and p == path)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _serve(self, handler: BaseHTTPRequestHandler, *, body: bool) -> None:
        match = _ROUTE.match(handler.path)
        path = match["path"] if match else handler.path
        self.requests.append((handler.command, path))
        if not match or match["repo"] != self.repo_id or match["rev"] != self.revision or path not in self.files:
            handler.send_response(404)
            handler.send_header("X-Error-Code", "EntryNotFound")
            handler.send_header("X-Error-Message", "Entry not found")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        data = self.files[path]
        start = 0
        ranged = re.match(r"bytes=(\d+)-$", handler.headers.get("Range", ""))
        if ranged:
            start = int(ranged[1])
        handler.send_response(206 if ranged else 200)
        if ranged:
            handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        handler.send_header("Content-Length", str(len(data) - start))
        handler.send_header("Accept-Ranges", "bytes")
        handler.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        handler.send_header("X-Repo-Commit", self.revision)
        handler.end_headers()
        if not body:
            return
        cut = self.cut_at.get(path)
        handler.wfile.write(data[start:] if cut is None else data[start:max(start, cut)])
        if cut is not None:
            handler.wfile.flush()
            handler.close_connection = True
