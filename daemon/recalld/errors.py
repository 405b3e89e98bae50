"""The daemon's exceptions. Each carries a wire ``code`` that maps one to one to a client class.

    RecalldError (code "internal")
    ├── BadRequest        "bad_request"  invalid parameters, empty or oversized query
    ├── Forbidden         "forbidden"    path outside the configured roots
    ├── NotFound          "not_found"    path not indexed / does not exist
    ├── ConfigError       "config"       invalid config file or value
    ├── IndexError_       "index"        the index is unusable (mixed vector spaces, corrupt)
    ├── ProviderError     "provider"     the embedding provider failed or is misconfigured
    └── Unavailable       "unavailable"  the daemon cannot serve this right now

Messages say what happened and what to do next. Only the CLI turns them into exit codes.
"""

from __future__ import annotations


class RecalldError(Exception):
    """Base of every recalld error."""

    code = "internal"


class BadRequest(RecalldError):
    """The request's parameters are invalid."""

    code = "bad_request"


class Forbidden(RecalldError):
    """The path is outside the configured memory and session roots."""

    code = "forbidden"


class NotFound(RecalldError):
    """The requested file does not exist or is not indexed."""

    code = "not_found"


class ConfigError(RecalldError):
    """The configuration is invalid."""

    code = "config"


class IndexError_(RecalldError):
    """The index cannot be used as it is (e.g. built with another vector space)."""

    code = "index"


class ProviderError(RecalldError):
    """The embedding provider failed or is misconfigured."""

    code = "provider"

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class Unavailable(RecalldError):
    """The daemon cannot serve the request now (shutting down, overloaded)."""

    code = "unavailable"
