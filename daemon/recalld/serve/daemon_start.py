"""``recalld serve``: the process around a :class:`Daemon`, from the checks before it opens
the index to the exit that does not wait on busy threads."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from pathlib import Path

from recalld import fd_limits, paths, security
from recalld.config import Config
from recalld.index import index_health
from recalld.serve import log_guard
from recalld.serve.allocator import tune_allocator
from recalld.serve.config_overview import describe_config
from recalld.serve.config_watch import LiveConfig
from recalld.serve.daemon import Daemon
from recalld.serve.idle_stop import IDLE_KEY, IdleStop
from recalld.serve.instance import EXIT_WAIT_S, LOCK_NAME, private_dir, take_lock
from recalld.serve.server import Server

log = logging.getLogger("recalld.serve.daemon")  # the daemon's log lines, as before the split


def serve(config: Config, config_path: Path | None = None) -> int:
    """Run the daemon in the foreground until SIGTERM/SIGINT or a ``shutdown`` request.

    ``config_path`` is the file to watch for edits (default: the one ``config`` was read from,
    else the platform's, which may not exist yet); SIGHUP reloads it at once.
    """
    config_path = config_path or config.source or paths.config_path()
    socket_path = _prepare_process(config, config_path)
    # The lock before the index: a second daemon must not check, move aside or write an index
    # the first still holds, nor start while the one just stopped still closes it.
    private_dir(socket_path.parent)
    lock_fd = take_lock(socket_path.parent / LOCK_NAME, socket_path, wait_s=EXIT_WAIT_S)
    try:
        daemon = _open_daemon(config, paths.index_path(config.base_dir))
    except BaseException:
        os.close(lock_fd)
        raise
    live = daemon.live = LiveConfig(daemon, config_path)
    daemon.idle = IdleStop(
        lambda: daemon.engine.config.float(IDLE_KEY),
        lambda: daemon.pending() > 0 or daemon.state() != "idle",
    )
    servers: list[Server] = []
    try:
        asyncio.run(_run(daemon, socket_path, servers, lock_fd))
    finally:
        live.watcher.stop()
        clean = daemon.stop()
        if clean:  # otherwise the exit below releases it, once nothing writes any more
            for server in servers:
                server.release_lock()
    _exit_if_busy(clean)
    return 0


def _prepare_process(config: Config, config_path: Path) -> Path:
    """Tune the process, refuse unwritable folders, log the setup; the socket path to serve."""
    tune_allocator()  # before the model loads; freed memory goes back to the system when idle
    fd_limits.raise_soft_limit()  # systemd's 1,024 is too few under a flood of clients
    log_guard.protect_logs(config)  # no API key in the log, whatever prints it
    socket_path: Path = paths.socket_path()
    # The index holds every note and transcript: private files, whatever the login umask.
    os.umask(os.umask(security.PRIVATE_UMASK) | security.PRIVATE_UMASK)
    index = paths.index_path(config.base_dir)
    index_health.ensure_writable(index.parent, "index")
    index_health.ensure_writable(socket_path.parent, "socket")
    # Where the notes live, first in the log (after the one-sentence refusals above).
    for line in describe_config(config, config_path):
        log.info("%s", line)
    security.private_log_dir(paths.log_dir())  # 0700, daemon.log 0600 (older homes: 0755/0644)
    for loose in security.tighten(security.index_files(paths.index_path(config.base_dir))):
        log.warning("%s was readable by other users; it is now private (0600)", loose)
    for warning in security.config_warnings(config):
        log.warning("%s", warning)
    return socket_path


async def _run(daemon: Daemon, socket_path: Path, servers: list[Server], lock_fd: int) -> None:
    """Listen, start the daemon and the config watcher, serve until asked to stop."""
    idle, live = daemon.idle, daemon.live
    assert idle is not None and live is not None  # set by serve() before the loop starts
    server = Server(
        idle.wrap(daemon.handlers()),
        {"watch": daemon.watch},
        socket_path,
        quick={"status", "get"},
        keep_lock=True,
        lock_fd=lock_fd,
        # Named in hello: a client of another home that shares this socket (no XDG_RUNTIME_DIR:
        # the uid's fallback) refuses this daemon rather than read and write its notes.
        identity={
            "config": str(live.path.expanduser().resolve()),
            "data_dir": str(daemon.engine.config.base_dir.expanduser().resolve()),
        },
    )
    servers.append(server)
    daemon.connections = lambda: server.admission.stats()
    _handle_signals(server, live)
    await server.start()
    log.info(
        "recalld listening on %s (provider %s)",
        socket_path,
        daemon.engine.embedder.label if daemon.engine.embedder else "none",
    )
    daemon.start()
    live.start()
    idle_task = asyncio.create_task(idle.run(server.request_shutdown))
    await server.serve_forever()
    idle_task.cancel()


def _handle_signals(server: Server, live: LiveConfig) -> None:
    """SIGTERM and SIGINT stop the server; SIGHUP reloads the config file at once."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, server.request_shutdown)
    with contextlib.suppress(NotImplementedError, RuntimeError, AttributeError):
        loop.add_signal_handler(signal.SIGHUP, live.watcher.ask)  # no SIGHUP on Windows


def _exit_if_busy(clean: bool) -> None:
    """Exit at once when the writer, a handler or an embedding thread is still busy."""
    busy = _busy_handlers() + _embedding()
    if not clean or busy:
        # Handler threads still inside a long search or get, or the writer inside a batch:
        # the interpreter would join them at exit. Nothing they do needs finishing (reads, or
        # a transaction SQLite rolls back), so exit now rather than hold SIGTERM for minutes.
        # An embedding call still running (its vectors are never written after the stop) must
        # not meet the interpreter's exit either: onnxruntime's pool, torn down under it by
        # the C++ exit handlers, aborted the process ("terminate called", SIGABRT).
        log.info("exiting with busy threads: %s", ", ".join(busy) or "recalld-writer")
        logging.shutdown()
        os._exit(0)


def _open_daemon(config: Config, index: Path) -> Daemon:
    """The daemon over a checked index: one that fails ``quick_check`` (or cannot even be
    opened as a database) is moved aside first, and the start's full sync rebuilds it. An index
    the last daemon closed cleanly is checked after the start instead (``_check_later``)."""
    clean = index_health.take_clean_mark(index)
    problem = None if clean else index_health.quick_check(index)
    aside = index_health.move_aside(index) if problem else None
    try:
        daemon = Daemon(config)
    except Exception as exc:  # a raw apsw error too: the engine reads the index at once
        if aside is not None or not index_health.is_corruption(exc):
            raise
        problem, aside = str(exc), index_health.move_aside(index)
        daemon = Daemon(config)
    if problem and aside is not None:
        daemon.note_damaged(problem, aside)
    daemon.check_after_start = clean and aside is None
    return daemon


def _embedding() -> list[str]:
    """Embedding threads still alive (a call in flight after the stop's short wait)."""
    return [t.name for t in threading.enumerate() if t.name.startswith("recalld-embed")]


def _busy_handlers(wait_s: float = 0.5) -> list[str]:
    """Names of the server's handler threads still running after ``wait_s`` (idle ones have
    ended by then: their pools were shut down)."""
    deadline = time.monotonic() + wait_s
    busy = []
    for thread in threading.enumerate():
        if thread.name.startswith(("recalld-handler", "recalld-quick")):
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                busy.append(thread.name)
    return busy
