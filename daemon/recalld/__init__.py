"""recalld: always-on memory for local AI agents (the daemon and engine)."""

__version__ = "0.1.0"
