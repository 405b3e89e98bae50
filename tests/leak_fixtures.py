"""Credentials as tools print them, inside transcripts of each agent format recalld reads.

Every key here is generated (random bytes, fixed seed): it has the shape of a real one and
grants nothing. :func:`key_parts` lists pieces of each that must never leave the daemon.
"""

from __future__ import annotations

import base64
import json
import random
from typing import Any

_RNG = random.Random(41)


def _b64(n: int) -> str:
    return base64.b64encode(bytes(_RNG.randrange(256) for _ in range(n))).decode()


def _pem(kind: str = "PRIVATE KEY") -> str:
    body = _b64(912)  # a 2048-bit key's PKCS#8 body is about this long
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return f"-----BEGIN {kind}-----\n" + "\n".join(lines) + f"\n-----END {kind}-----\n"


GCP_PEM = _pem()
RSA_PEM = _pem("RSA PRIVATE KEY")
TLS_PEM = _pem("EC PRIVATE KEY")

#: ``cat key.json`` of a GCP service account.
SERVICE_ACCOUNT = json.dumps(
    {
        "type": "service_account",
        "project_id": "harbor-ops-2231",
        "private_key_id": "4c1f0e9b7a2d4c55b1e0f3a9d8c7b6a5f4e3d2c1",
        "private_key": GCP_PEM,
        "client_email": "deployer@harbor-ops-2231.iam.gserviceaccount.com",
        "client_id": "103245678901234567890",
        "token_uri": "https://oauth2.googleapis.com/token",
    },
    indent=2,
)

#: ``kubectl get secret tls -o json``: data base64-encoded, and the applied manifest (with the
#: key in stringData) as a JSON string in an annotation.
KUBECTL_SECRET = json.dumps(
    {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "data": {
            "tls.crt": base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n").decode(),
            "tls.key": base64.b64encode(TLS_PEM.encode()).decode(),
        },
        "metadata": {
            "name": "web-tls",
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": json.dumps(
                    {"kind": "Secret", "stringData": {"ssh-key": RSA_PEM}}
                )
            },
        },
    },
    indent=4,
)

#: ``gcloud iam service-accounts keys create --format=json``: the whole key file base64-encoded.
GCLOUD_KEY = json.dumps(
    {
        "name": "projects/harbor-ops-2231/serviceAccounts/deployer/keys/4c1f0e9b",
        "privateKeyData": base64.b64encode(SERVICE_ACCOUNT.encode()).decode(),
        "privateKeyType": "TYPE_GOOGLE_CREDENTIALS_FILE",
        "keyAlgorithm": "KEY_ALG_RSA_2048",
    },
    indent=2,
)

OUTPUTS = {"cat key.json": SERVICE_ACCOUNT, "kubectl": KUBECTL_SECRET, "gcloud": GCLOUD_KEY}


def key_parts() -> list[str]:
    """Pieces of every key above that must not appear in anything served: body lines of each
    PEM (as they read at any escape depth) and of the base64 forms."""
    parts = []
    for pem in (GCP_PEM, RSA_PEM, TLS_PEM):
        body = pem.splitlines()[1:-1]
        parts += [body[1][:40], body[-1][-20:]]
    parts.append(base64.b64encode(TLS_PEM.encode()).decode()[100:140])
    parts.append(base64.b64encode(SERVICE_ACCOUNT.encode()).decode()[200:240])
    return parts


def claude_code(command: str, output: str) -> list[dict[str, Any]]:
    """A Bash call and its result, as Claude Code writes them."""
    return [
        {"type": "user", "message": {"role": "user", "content": f"run {command}"}},
        {
            "type": "assistant",
            "message": {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "Bash",
                        "input": {"command": command},
                    }
                ],
            },
        },
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": output}],
            },
        },
    ]


def codex(command: str, output: str) -> list[dict[str, Any]]:
    """A shell call and its output as Codex writes them: the output is JSON in a JSON string, so
    the tool's own JSON strings are one level deeper than in Claude Code."""

    def env(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {"timestamp": "2026-11-01T10:00:00Z", "type": kind, "payload": payload}

    return [
        env("session_meta", {"id": "s1", "cwd": "/repo", "cli_version": "0.77.0"}),
        env(
            "response_item",
            {
                "type": "function_call",
                "name": "shell",
                "call_id": "c1",
                "arguments": json.dumps({"command": ["bash", "-lc", command]}),
            },
        ),
        env(
            "response_item",
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": json.dumps({"output": output, "metadata": {"exit_code": 0}}),
            },
        ),
    ]


def openclaw(command: str, output: str) -> list[dict[str, Any]]:
    """An exec call and its result as OpenClaw writes them."""
    return [
        {"type": "session", "version": 3, "id": "u-1", "timestamp": "2026-11-01T10:00:00Z"},
        {
            "type": "message",
            "id": "a1",
            "message": {
                "role": "assistant",
                "content": [
                    {
                        "type": "toolCall",
                        "id": "call_1",
                        "name": "exec",
                        "arguments": {"command": command},
                    }
                ],
            },
        },
        {
            "type": "message",
            "id": "a2",
            "message": {
                "role": "toolResult",
                "toolCallId": "call_1",
                "toolName": "exec",
                "content": [{"type": "text", "text": output}],
            },
        },
    ]


def generic(command: str, output: str) -> list[dict[str, Any]]:
    """Role / content messages (the generic reader: OpenAI-style chat logs, other agents)."""
    return [
        {"role": "user", "content": f"run {command}", "timestamp": "2026-11-01T10:00:00Z"},
        {"role": "assistant", "content": f"Running `{command}`."},
        {"role": "tool", "name": "shell", "content": output},
    ]


FORMATS = {"claude": claude_code, "codex": codex, "openclaw": openclaw, "generic": generic}


def transcript(fmt: str, command: str, output: str) -> str:
    """The JSONL text of a transcript in ``fmt`` in which ``command`` printed ``output``."""
    return "".join(json.dumps(r) + "\n" for r in FORMATS[fmt](command, output))
