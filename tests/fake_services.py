"""Real HTTP servers on 127.0.0.1 that speak the embedding and rerank services' wire formats.

Each :class:`FakeService` runs a ``ThreadingHTTPServer`` in a thread and delegates to a *spec*
that validates requests the way the real service would (path, auth header, body fields) and
answers in that service's documented shape. Faults are queued per request (``fail``) or made
permanent (``fail_always``) so tests can script "429 then success", "500 forever", "timeout", ...
Every request is recorded with its arrival time, and any validation problem is collected in
``violations`` (and answered with a 400, as the real service would).

This module holds the server; the specs live by service in ``fake_embedding_services`` and
``fake_rerank_services`` (their shared base in ``fake_service_base``) and are re-exported here,
so tests import everything from ``fake_services``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fake_embedding_services import GeminiSpec, OllamaSpec, OpenAISpec, VoyageSpec
from fake_rerank_services import (
    CohereRerankSpec,
    JinaRerankSpec,
    OllamaGenerateSpec,
    RerankSpec,
    VoyageRerankSpec,
)
from fake_service_base import (
    DIMS,
    KEY,
    MALFORMED,
    MISSING_FIELDS,
    QUOTA,
    RATE_LIMIT,
    SERVER_ERROR,
    TIMEOUT,
    WRONG_COUNT,
    WRONG_DIMS,
    Fault,
    Recorded,
    Reply,
    Spec,
    overlap_score,
    vector_for,
)

__all__ = [
    "DIMS",
    "KEY",
    "MALFORMED",
    "MISSING_FIELDS",
    "QUOTA",
    "RATE_LIMIT",
    "SERVER_ERROR",
    "TIMEOUT",
    "WRONG_COUNT",
    "WRONG_DIMS",
    "CohereRerankSpec",
    "FakeService",
    "Fault",
    "GeminiSpec",
    "JinaRerankSpec",
    "OllamaGenerateSpec",
    "OllamaSpec",
    "OpenAISpec",
    "Recorded",
    "Reply",
    "RerankSpec",
    "Spec",
    "ThreadingHTTPServer",
    "VoyageRerankSpec",
    "VoyageSpec",
    "free_port_url",
    "overlap_score",
    "serving",
    "vector_for",
]


@dataclass
class FakeService:
    """A real HTTP server for one spec, with scripted faults and a request log."""

    spec: Spec
    requests: list[Recorded] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    max_in_flight: int = 0
    _queue: list[Fault] = field(default_factory=list)
    _always: Fault | None = None
    _in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def fail(self, *faults: Fault | str) -> None:
        """Misbehave on the next requests, one fault each, in order."""
        self._queue.extend(f if isinstance(f, Fault) else Fault(f) for f in faults)

    def fail_always(self, fault: Fault | str) -> None:
        """Misbehave on every request from now on."""
        self._always = fault if isinstance(fault, Fault) else Fault(fault)

    def _next_fault(self) -> Fault | None:
        with self._lock:
            if self._queue:
                return self._queue.pop(0)
            return self._always

    def handle(self, req: Recorded) -> Reply:
        with self._lock:
            self.requests.append(req)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            return self._reply(req)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _reply(self, req: Recorded) -> Reply:
        spec = self.spec
        if not spec.auth_ok(req):
            return spec.refused(req)
        problems = spec.check(req)
        if problems:
            self.violations.extend(problems)
            return spec.bad_request(problems)
        fault = self._next_fault()
        kind = fault.kind if fault else None
        if fault is not None and kind == TIMEOUT:
            time.sleep(fault.sleep_s)
        elif fault is not None and kind == RATE_LIMIT:
            return spec.rate_limited(fault)
        elif kind == SERVER_ERROR:
            return spec.server_error()
        elif kind == QUOTA:
            return spec.quota()
        elif kind == MALFORMED:
            return 200, {"Content-Type": "application/json"}, b'{"data": [ {"index": 0, "embed'
        return spec.answer(req, kind)

    def start(self) -> None:
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in separate writes

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                req = Recorded(
                    method="POST",
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                    at=time.monotonic(),
                )
                status, headers, payload = service.handle(req)
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.block_on_close = False
        self._server = server
        # A short poll interval: shutdown() waits up to one interval, once per test.
        threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


@contextmanager
def serving(spec: Spec) -> Iterator[FakeService]:
    """Run a fake service for the duration of a ``with`` block."""
    service = FakeService(spec)
    service.start()
    try:
        yield service
    finally:
        service.stop()


def free_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (for connection-refused tests)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
