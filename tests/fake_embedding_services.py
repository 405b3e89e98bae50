"""Fake embedding services' wire formats: OpenAI, Voyage, Gemini and Ollama (served by
``fake_services.FakeService``)."""

from __future__ import annotations

from typing import Any

from fake_service_base import MISSING_FIELDS, Fault, Recorded, Reply, Spec, _json, _strs


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
