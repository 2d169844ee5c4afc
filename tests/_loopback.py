"""A loopback HTTP server for the fetcher tests: files at their canonical URL paths, ranges,
extra headers (the Hub's), and failure modes."""
from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    """Serves ``files`` (path -> bytes) with ``Range: bytes=N-`` requests answered by 206.

    ``headers_for``: path -> extra response headers; ``modes``: path -> ``"truncate"`` (half
    the body, then the connection closes), ``"no-range"`` (ignore Range, send the whole file)
    or ``"stall"`` (a few bytes, then silence longer than the client's timeout); ``log``: one
    ``(command, path, Range header)`` per request."""

    files: dict[str, bytes] = {}
    headers_for: dict[str, dict[str, str]] = {}
    modes: dict[str, str] = {}
    log: list[tuple[str, str, str | None]] = []
    timeout = 5  # seconds per socket operation: a stuck client cannot hold a thread

    def _answer(self, with_body: bool) -> None:
        path, rng = self.path, self.headers.get("Range")
        body, mode = self.files.get(path), self.modes.get(path)
        self.log.append((self.command, path, rng))
        if body is None:
            self.send_error(404)
            return
        status, start = 200, 0
        if rng and mode != "no-range" and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        payload = body[start:]
        self.send_response(status)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.send_header("Accept-Ranges", "none" if mode == "no-range" else "bytes")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in self.headers_for.get(path, {}).items():
            self.send_header(name, value)
        self.end_headers()
        if not with_body:
            return
        if mode == "truncate":
            payload = payload[: len(payload) // 2]
        if mode == "stall":
            self.wfile.write(payload[:10])
            self.wfile.flush()
            time.sleep(1.5)
            return
        self.wfile.write(payload)

    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        self._answer(True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(False)

    def log_message(self, *args) -> None:  # keep the test output clean
        pass


@contextlib.contextmanager
def serving(files: dict[str, bytes],
            headers_for: dict[str, dict[str, str]] | None = None) -> Iterator[ThreadingHTTPServer]:
    """A server on 127.0.0.1 (its port: ``server.server_port``) with its own :class:`Handler`
    subclass (``server.RequestHandlerClass``: files, modes and log to inspect or change)."""
    handler = type("Handler", (Handler,), {"files": dict(files),
                                           "headers_for": dict(headers_for or {}),
                                           "modes": {}, "log": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (a mirror that refuses connections)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
