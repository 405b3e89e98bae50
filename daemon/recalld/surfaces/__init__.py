"""The surfaces: what people and agents use, each a client of the daemon or the engine.

The ``recalld`` command (its fast path, the full CLI, what it prints, its exit codes, progress
bars, ``recalld eval``), the MCP server over stdio, the tray icon, and ``recalld service``'s
systemd unit or launchd agent.
"""
