"""The daemon's log keeps no secret: the keys it holds and every shape the redactor knows.

Every handler's output passes :class:`ScrubbingFormatter` (tracebacks included), set up at start
and again when the config changes (a new key must not reach the log either).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from recalld.config import Config
from recalld.ingest.redactor import redact
from recalld.security import MASK, secret_values


class ScrubbingFormatter(logging.Formatter):
    """Formats with ``inner``, then masks every secret in the text (tracebacks included): the
    keys this daemon holds, and every secret shape the redactor knows."""

    def __init__(self, inner: logging.Formatter, secrets: Iterable[str]) -> None:
        super().__init__()
        self.inner = inner
        self.secrets = tuple(secrets)

    def format(self, record: logging.LogRecord) -> str:
        text = self.inner.format(record)
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return redact(text, "log")[0]  # a line quoting a file: the one redactor


def protect_logs(config: Config, logger: logging.Logger | None = None) -> None:
    """Keep keys out of the log, even at debug level.

    The HTTP wire trace (``httpcore`` at DEBUG) prints every response header, so a service or a
    proxy that echoes the ``Authorization`` header would put the key in the log: it stays at
    INFO. And every handler's output is scrubbed of the keys this daemon holds, as a last line
    of defence for whatever else might print one (an exception message, a third-party library).
    """
    logging.getLogger("httpcore").setLevel(logging.INFO)
    secrets = secret_values(config)  # none set: the formatter still redacts secret shapes
    for handler in (logger or logging.getLogger()).handlers:
        current = handler.formatter or logging.Formatter()
        if isinstance(current, ScrubbingFormatter):
            current = current.inner
        handler.setFormatter(ScrubbingFormatter(current, secrets))
