"""Whether the MCP SDK is installed, and how to install it.

``recalld mcp`` needs it, and the quick install (``make link``, ``make run``) leaves it out, so
``recalld integrate`` checks before registering a server that could not start, and ``recalld
doctor`` says what to run instead of a bare import error.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

__all__ = ["how_to_install", "installed", "missing", "not_installed"]


def installed() -> bool:
    """Whether ``recalld mcp`` can import what it needs (looked up, not imported)."""
    try:
        return all(importlib.util.find_spec(name) is not None for name in ("mcp", "anyio"))
    except (ImportError, ValueError):  # a broken install, or a module set to None
        return False


def how_to_install() -> str:
    """The command that installs the SDK for this recalld: ``make extras`` in a checkout."""
    checkout = Path(__file__).resolve().parents[3]  # daemon/recalld/surfaces/ -> the checkout
    if (checkout / "Makefile").is_file() and (checkout / "requirements-extras.txt").is_file():
        return f"`make extras` in {checkout}"
    return f"`{sys.executable} -m pip install 'recalld[mcp]'`"


def missing() -> str | None:
    """None when the SDK is installed; else what is missing and the command that installs it."""
    return None if installed() else not_installed()


def not_installed() -> str:
    """What is missing and the command that installs it (also for an import that failed)."""
    return (
        f"recalld's MCP server needs the MCP SDK, which is not installed for {sys.executable}: "
        f"{how_to_install()} installs it"
    )
