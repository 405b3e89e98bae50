"""A stand-in for the Gemini API at the network edge, so the real Gemini CLI runs offline.

It answers the way the API does for what Gemini CLI asks: JSON-schema requests (its model
router) get an object of the schema's required fields; a chat turn first gets a ``read_file``
function call on :attr:`FakeGeminiApi.read_path` (when the CLI offers that tool), and once the
function's response comes back, :attr:`FakeGeminiApi.answer` as text, streamed as SSE.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_EXAMPLE = {"STRING": "simple", "INTEGER": 5, "NUMBER": 0.5, "BOOLEAN": False, "ARRAY": []}


def _schema_answer(schema: dict[str, Any]) -> dict[str, Any]:
    props = schema.get("properties") or {}
    return {
        k: _EXAMPLE.get(str(props.get(k, {}).get("type", "STRING")).upper(), "x")
        for k in schema.get("required") or list(props)
    }


def _read_tool(body: dict[str, Any]) -> tuple[str, str] | None:
    """(tool name, its path parameter) of the read_file tool the CLI offers, if any."""
    for group in body.get("tools") or []:
        for decl in group.get("functionDeclarations") or []:
            if decl.get("name") == "read_file":
                schema = decl.get("parametersJsonSchema") or decl.get("parameters") or {}
                required = schema.get("required") or ["file_path"]
                return decl["name"], required[0]
    return None


class FakeGeminiApi:
    """``with FakeGeminiApi(read_path, answer) as api: api.url`` for GOOGLE_GEMINI_BASE_URL."""

    def __init__(self, read_path: str, answer: str) -> None:
        self.read_path, self.answer = read_path, answer
        self.requests: list[str] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                api.requests.append(self.path)
                self._send(*api.respond(self.path, json.loads(raw or b"{}")))

            def _send(self, kind: str, data: bytes) -> None:
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeGeminiApi:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def respond(self, path: str, body: dict[str, Any]) -> tuple[str, bytes]:
        if ":countTokens" in path:
            return "application/json", json.dumps({"totalTokens": 10}).encode()
        config = body.get("generationConfig") or {}
        if isinstance(config.get("responseJsonSchema"), dict):
            parts = [{"text": json.dumps(_schema_answer(config["responseJsonSchema"]))}]
        else:
            parts = self._turn(body)
        answer = {
            "candidates": [
                {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": {
                "promptTokenCount": 40,
                "candidatesTokenCount": 12,
                "totalTokenCount": 52,
            },
            "modelVersion": "gemini-2.5-flash",
        }
        if ":streamGenerateContent" in path:
            return "text/event-stream", f"data: {json.dumps(answer)}\r\n\r\n".encode()
        return "application/json", json.dumps(answer).encode()

    def _turn(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        said = json.dumps(body.get("contents") or [])
        tool = _read_tool(body)
        if tool is None or "functionResponse" in said:
            return [{"text": self.answer}]
        return [{"functionCall": {"name": tool[0], "args": {tool[1]: self.read_path}}}]
