"""The serve stage: ``recalld serve``, the daemon behind the socket.

The daemon (the engine, one writer thread, the watcher and its jobs of syncs), the socket server
and its client connections, the single-instance lock of a home, and the live configuration that
applies edits of the config file without a restart.
"""
