"""The parts every fake service of ``fake_services`` shares: keys, fault kinds, the request record.

:class:`Spec` is one service's wire format: it validates requests the way the real service would
(path, auth header, body fields) and answers in that service's documented shape; the embedding
specs are in ``fake_embedding_services``, the rerank ones in ``fake_rerank_services``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
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
