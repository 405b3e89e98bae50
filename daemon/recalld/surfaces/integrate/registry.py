"""The agents ``recalld integrate`` knows, by the name typed on the command line."""

from __future__ import annotations

from recalld.surfaces.integrate.agent import Agent


def agents() -> dict[str, Agent]:
    """Name -> agent (built on each call: their paths follow HOME and the agents' variables)."""
    from recalld.surfaces.integrate import claude_code, codex, gemini_cli

    found = [claude_code.agent(), codex.agent(), gemini_cli.agent()]
    return {a.name: a for a in found}


NAMES = ("claude-code", "codex", "gemini-cli")
