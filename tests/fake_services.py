"""Real HTTP servers on 127.0.0.1 that speak the embedding and rerank services' wire formats.

Each :class:`FakeService` runs a ``ThreadingHTTPServer`` in a thread and delegates to a *spec*
that validates requests the way the real service would (path, auth header, body fields) and
answers in that service's documented shape. Faults are queued per request (``fail``) or made
permanent (``fail_always``) so tests can script "429 then success", "500 forever", "timeout", ...
Every request is recorded with its arrival time, and any validation problem is collected in
``violations`` (and answered with a 400, as the real service would).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

KEY = "sk-test-SECRET-0123456789"
DIMS = 8

# Fault kinds understood by every spec.
RATE_LIMIT = "rate_limit"  # 429 with Retry-After (or the service's own retry hint)
SERVER_ERROR = "server_error"  # 500
TIMEOUT = "timeout"  # answer only after `sleep_s`
MALFORMED = "malformed"  # 200 with a body that is not JSON
MISSING_FIELDS = "missing_fields"  # 200 with valid JSON of the wrong shape
WRONG_DIMS = "wrong_dims"  # vectors with DIMS + 4 dimensions
WRONG_COUNT = "wrong_count"  # one vector / score fewer than asked
QUOTA = "quota"  # the service's "quota exhausted" answer


@dataclass
class Fault:
    """One scripted misbehaviour."""

    kind: str
    retry_after: str | None = "1"
    sleep_s: float = 0.6


@dataclass
class Recorded:
    """A request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float


Reply = tuple[int, dict[str, str], bytes]


def vector_for(text: str, dims: int) -> list[float]:
    """A deterministic pseudo-embedding of ``text``."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    return [float(x) for x in np.random.default_rng(seed).standard_normal(dims)]


def overlap_score(query: str, document: str) -> float:
    """A deterministic relevance: the share of query words found in the document."""
    q = set(re.findall(r"\w+", query.lower()))
    d = set(re.findall(r"\w+", document.lower()))
    return len(q & d) / max(1, len(q))


def _json(status: int, obj: Any, headers: dict[str, str] | None = None) -> Reply:
    return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(obj).encode()


class Spec:
    """One service's wire format; subclasses override the parts that differ."""

    path = "/"
    auth_header = "authorization"
    bearer = True

    def __init__(self, key: str | None = KEY, dims: int = DIMS) -> None:
        self.key = key
        self.dims = dims

    # -- validation ----------------------------------------------------------------------

    def auth_ok(self, req: Recorded) -> bool:
        if self.key is None:
            return True
        expected = f"Bearer {self.key}" if self.bearer else self.key
        return req.headers.get(self.auth_header) == expected

    def check(self, req: Recorded) -> list[str]:
        """Problems with the request ([] when it is what the real service expects)."""
        problems = []
        if req.method != "POST":
            problems.append(f"method {req.method}")
        if req.path != self.path:
            problems.append(f"path {req.path!r} != {self.path!r}")
        if "json" not in req.headers.get("content-type", ""):
            problems.append("content-type is not JSON")
        if not isinstance(req.body, dict):
            problems.append("body is not a JSON object")
            return problems
        return problems + self.check_body(req.body)

    def check_body(self, body: dict[str, Any]) -> list[str]:
        return []

    # -- answers -------------------------------------------------------------------------

    def answer(self, req: Recorded, mutate: str | None) -> Reply:
        raise NotImplementedError

    def refused(self, req: Recorded) -> Reply:
        return _json(401, {"error": {"message": "Invalid API key", "type": "invalid_request"}})

    def quota(self) -> Reply:
        return _json(429, {"error": {"message": "quota exceeded"}})

    def rate_limited(self, fault: Fault) -> Reply:
        headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
        return _json(429, {"error": {"message": "Rate limit reached"}}, headers)

    def server_error(self) -> Reply:
        return _json(500, {"error": {"message": "The server had an error"}})

    def bad_request(self, problems: list[str]) -> Reply:
        return _json(400, {"error": {"message": "; ".join(problems)}})

    def vectors(self, texts: list[str], dims: int, mutate: str | None) -> list[list[float]]:
        if mutate == WRONG_DIMS:
            dims += 4
        out = [vector_for(t, dims) for t in texts]
        return out[:-1] if mutate == WRONG_COUNT else out


def _strs(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)


class OpenAISpec(Spec):
    """``POST /v1/embeddings`` (Bearer) → ``{"data": [{"index", "embedding"}]}``."""

    path = "/v1/embeddings"

    def check_body(self, body: dict[str, Any]) -> list[str]:
        problems = []
        if not isinstance(body.get("model"), str):
            problems.append("model missing")
        if not _strs(body.get("input")):
            problems.append("input must be a non-empty list of strings")
        if "dimensions" in body and not isinstance(body["dimensions"], int):
            problems.append("dimensions must be an integer")
        return problems

    def answer(self, req: Recorded, mutate: str | None) -> Reply:
        body = req.body
        vecs = self.vectors(body["input"], body.get("dimensions", self.dims), mutate)
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vecs)]
        data.reverse()  # the API does not promise order; clients must sort by index
        if mutate == MISSING_FIELDS:
            data = [{"object": "embedding", "idx": i} for i in range(len(vecs))]
        return _json(200, {"object": "list", "data": data, "model": body["model"]})

    def quota(self) -> Reply:
        return _json(
            429,
            {
                "error": {
                    "message": "You exceeded your current quota, please check your plan.",
                    "type": "insufficient_quota",
                    "param": None,
                    "code": "insufficient_quota",
                }
            },
        )

    def refused(self, req: Recorded) -> Reply:
        # OpenAI echoes (a masked form of) the key it got; echo it whole so that the client's
        # scrubbing is what keeps it out of messages.
        sent = req.headers.get("authorization", "").removeprefix("Bearer ")
        return _json(
            401,
            {
                "error": {
                    "message": f"Incorrect API key provided: {sent}.",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            },
        )


class VoyageSpec(OpenAISpec):
    """``POST /v1/embeddings`` with ``input_type`` / ``output_dimension``; errors as ``detail``."""

    def check_body(self, body: dict[str, Any]) -> list[str]:
        problems = []
        if not isinstance(body.get("model"), str):
            problems.append("model missing")
        if not _strs(body.get("input")):
            problems.append("input must be a non-empty list of strings")
        if body.get("input_type") not in ("query", "document", None):
            problems.append("input_type must be query|document")
        if "dimensions" in body:
            problems.append("Voyage calls it output_dimension")
        return problems

    def answer(self, req: Recorded, mutate: str | None) -> Reply:
        body = req.body
        vecs = self.vectors(body["input"], body.get("output_dimension", self.dims), mutate)
        data = [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(vecs)]
        if mutate == MISSING_FIELDS:
            data = [{"object": "embedding"} for _ in vecs]
        return _json(200, {"object": "list", "data": data, "model": body["model"]})

    def refused(self, req: Recorded) -> Reply:
        return _json(401, {"detail": "Provided API key is invalid."})

    def server_error(self) -> Reply:
        return _json(500, {"detail": "Internal server error"})


class GeminiSpec(Spec):
    """``POST /v1beta/models/{model}:batchEmbedContents`` (x-goog-api-key) → ``embeddings``."""

    auth_header = "x-goog-api-key"
    bearer = False

    def __init__(self, model: str = "gemini-embedding-001", **kw: Any) -> None:
        super().__init__(**kw)
        self.model = model
        self.path = f"/v1beta/models/{model}:batchEmbedContents"

    def check_body(self, body: dict[str, Any]) -> list[str]:
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            return ["requests must be a non-empty list"]
        if len(requests) > 100:
            return ["at most 100 requests per batch"]
        problems = []
        for r in requests:
            if r.get("model") != f"models/{self.model}":
                problems.append(f"request model {r.get('model')!r} != models/{self.model}")
            parts = r.get("content", {}).get("parts")
            if not (isinstance(parts, list) and parts and isinstance(parts[0].get("text"), str)):
                problems.append("content.parts[0].text missing")
            if r.get("taskType") not in ("RETRIEVAL_DOCUMENT", "RETRIEVAL_QUERY"):
                problems.append(f"taskType {r.get('taskType')!r}")
        return problems

    def answer(self, req: Recorded, mutate: str | None) -> Reply:
        reqs = req.body["requests"]
        dims = reqs[0].get("outputDimensionality", self.dims)
        vecs = self.vectors([r["content"]["parts"][0]["text"] for r in reqs], dims, mutate)
        if mutate == MISSING_FIELDS:
            return _json(200, {"embeddings": [{"value": v} for v in vecs]})
        return _json(200, {"embeddings": [{"values": v} for v in vecs]})

    def _google(self, code: int, status: str, message: str, details: list[Any]) -> Reply:
        return _json(
            code,
            {"error": {"code": code, "message": message, "status": status, "details": details}},
        )

    def refused(self, req: Recorded) -> Reply:
        info = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}
        return self._google(
            400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", [info]
        )

    def quota(self) -> Reply:
        failure = {
            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [{"quotaId": "EmbedContentRequestsPerDayPerProjectPerModel-FreeTier"}],
        }
        return self._google(
            429,
            "RESOURCE_EXHAUSTED",
            "You exceeded your current quota, please check your plan and billing details.",
            [failure],
        )

    def rate_limited(self, fault: Fault) -> Reply:
        # Gemini puts the wait in a RetryInfo detail rather than a Retry-After header.
        failure = {
            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [{"quotaId": "EmbedContentRequestsPerMinutePerProjectPerModel"}],
        }
        retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"}
        return self._google(
            429, "RESOURCE_EXHAUSTED", "Resource has been exhausted.", [failure, retry]
        )

    def server_error(self) -> Reply:
        return self._google(500, "INTERNAL", "An internal error has occurred.", [])


class OllamaSpec(Spec):
    """``POST /api/embed`` (no auth) → ``{"embeddings": [[...]]}``; unknown model → 404."""

    path = "/api/embed"

    def __init__(self, model: str = "nomic-embed-text", **kw: Any) -> None:
        super().__init__(key=None, **kw)
        self.model = model

    def check_body(self, body: dict[str, Any]) -> list[str]:
        if not _strs(body.get("input")):
            return ["input must be a non-empty list of strings"]
        return []

    def answer(self, req: Recorded, mutate: str | None) -> Reply:
        if req.body.get("model") != self.model:
            return _json(
                404, {"error": f'model "{req.body.get("model")}" not found, try pulling it first'}
            )
        vecs = self.vectors(req.body["input"], self.dims, mutate)
        if mutate == MISSING_FIELDS:
            return _json(200, {"model": self.model, "embedding": vecs[0]})
        return _json(200, {"model": self.model, "embeddings": vecs})

    def server_error(self) -> Reply:
        return _json(500, {"error": "llama runner process has terminated"})


# -- rerankers -------------------------------------------------------------------------------


class RerankSpec(Spec):
    """Shared rerank shape: ``{"model", "query", "documents", count_field}`` → scored indexes."""

    count_field = "top_n"
    results_field = "results"

    def check_body(self, body: dict[str, Any]) -> list[str]:
        problems = []
        if not isinstance(body.get("model"), str):
            problems.append("model missing")
        if not isinstance(body.get("query"), str):
            problems.append("query missing")
        if not _strs(body.get("documents")):
            problems.append("documents must be a non-empty list of strings")
        count = body.get(self.count_field)
        if count is not None and not isinstance(count, int):
            problems.append(f"{self.count_field} must be an integer")
        return problems

    def answer(self, req: Recorded, mutate: str | None) -> Reply:
        body = req.body
        scored = [
            {"index": i, "relevance_score": overlap_score(body["query"], d)}
            for i, d in enumerate(body["documents"])
        ]
        scored.sort(key=lambda r: -float(r["relevance_score"]))  # APIs answer best first
        scored = scored[: body.get(self.count_field) or len(scored)]
        if mutate == WRONG_COUNT:
            scored = scored[:-1]
        if mutate == MISSING_FIELDS:
            scored = [{"idx": r["index"]} for r in scored]
        return _json(200, {"id": "r-1", self.results_field: scored})


class CohereRerankSpec(RerankSpec):
    path = "/v2/rerank"

    def refused(self, req: Recorded) -> Reply:
        return _json(401, {"id": "x", "message": "invalid api token"})


class VoyageRerankSpec(RerankSpec):
    path = "/v1/rerank"
    count_field = "top_k"
    results_field = "data"

    def refused(self, req: Recorded) -> Reply:
        return _json(401, {"detail": "Provided API key is invalid."})


class JinaRerankSpec(RerankSpec):
    path = "/v1/rerank"

    def refused(self, req: Recorded) -> Reply:
        return _json(401, {"detail": "Unauthorized"})


class OllamaGenerateSpec(Spec):
    """``POST /api/generate`` with a JSON-schema ``format``; answers a JSON grade as text."""

    path = "/api/generate"

    def __init__(self, model: str = "qwen2.5:3b") -> None:
        super().__init__(key=None)
        self.model = model

    def check_body(self, body: dict[str, Any]) -> list[str]:
        problems = []
        if body.get("stream") is not False:
            problems.append("stream must be false")
        fmt = body.get("format")
        if not (isinstance(fmt, dict) and "score" in fmt.get("properties", {})):
            problems.append("format must be a JSON schema with a score property")
        if not isinstance(body.get("prompt"), str):
            problems.append("prompt missing")
        return problems

    def answer(self, req: Recorded, mutate: str | None) -> Reply:
        if req.body.get("model") != self.model:
            return _json(404, {"error": f"model '{req.body.get('model')}' not found"})
        prompt = req.body["prompt"]
        query = re.search(r"Query: (.*)", prompt)
        doc = prompt.split("Document:\n", 1)[-1]
        grade = round(10 * overlap_score(query.group(1) if query else "", doc))
        text = json.dumps({"score": grade}) if mutate != MISSING_FIELDS else "I cannot say."
        return _json(200, {"model": self.model, "response": text, "done": True})


# -- the server ------------------------------------------------------------------------------


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
