"""The search helper process: ``python -m recalld.serve.helper_process FD``.

A second interpreter that answers searches the daemon hands it while several run at once (see
:mod:`recalld.serve.search_helper` for why). It opens the index read-only, loads the model and
the vectors itself, then mirrors every change the daemon's writer commits, in commit order: the
changes and the searches share one stream, so a search handed over after a write sees it.

It writes nothing anywhere. It exits when the daemon says ``bye`` or closes the socket (also
when the daemon dies: the socket closes with it).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from recalld.config import Config
from recalld.errors import RecalldError
from recalld.serve.helper_wire import Channel, change_from_wire
from recalld.serve.log_guard import ScrubbingFormatter

# Two keep a core busy beside the daemon's searches; more handed over (the daemon gives it up to
# half of what is in flight) wait in the pool's queue.
SEARCH_THREADS = 2


def main(argv: list[str] | None = None) -> int:
    """Serve the daemon on the inherited socket whose descriptor is ``argv[0]``."""
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.WARNING, format="recalld helper: %(message)s")
    for handler in logging.getLogger().handlers:  # its lines join the daemon's log: redacted
        handler.setFormatter(ScrubbingFormatter(handler.formatter or logging.Formatter(), ()))
    sock = socket.socket(fileno=int(args[0]))
    channel = Channel(sock)
    hello = channel.receive()
    if hello is None or hello.get("op") != "hello":
        return 1
    try:
        engine, load_s = _open(hello)
    except Exception as exc:  # noqa: BLE001 - told to the daemon, which searches alone
        channel.send({"op": "failed", "error": f"{type(exc).__name__}: {exc}"})
        return 1
    channel.send({"op": "ready", "pid": os.getpid(), "load_s": round(load_s, 3)})
    _serve(channel, engine)
    engine.close()
    return 0


def _open(hello: dict[str, Any]) -> tuple[Any, float]:
    """The read-only engine the daemon's settings describe, warm (the model and the vectors
    loaded). The postings of common words are not read ahead: it only serves a busy daemon's
    queries, whose words it reads as they come, for the sake of its start and its memory."""
    from recalld.engine import Engine

    started = time.perf_counter()
    config = Config(hello["config"], base_dir=Path(hello["base_dir"]))
    engine = Engine(config, writable=False, follows_writes=True, index_path=Path(hello["index"]))
    emb = engine.embedder
    if emb is None or emb.kind != "local":
        raise RecalldError("the search helper serves the local model only")
    # Handed searches only while the daemon runs others: its cores are busy, so each search
    # runs its channels one after the other (recalld.retrieval.channel_overlap).
    engine.overlap_channels = False
    engine.warm()
    return engine, time.perf_counter() - started


def _serve(channel: Channel, engine: Any) -> None:
    """Apply changes in order; answer searches on a small pool, each answer sent whole."""
    send_lock = threading.Lock()

    def answer(msg: dict[str, Any]) -> None:
        try:
            reply: dict[str, Any] = {
                "id": msg["id"],
                "result": engine.searcher.search(msg["params"]),
            }
        except Exception as exc:  # noqa: BLE001 - the daemon runs the search itself instead
            reply = {"id": msg["id"], "error": f"{type(exc).__name__}: {exc}"}
        try:
            with send_lock:
                channel.send(reply)
        except OSError:
            pass  # the daemon is gone; the reader sees the socket close

    with ThreadPoolExecutor(SEARCH_THREADS, thread_name_prefix="recalld-helper") as pool:
        while True:
            try:
                msg = channel.receive()
            except OSError:
                msg = None
            if msg is None or msg.get("op") == "bye":
                return
            op = msg.get("op")
            if op == "change":
                engine.apply_change(change_from_wire(msg))
            elif op == "search":
                pool.submit(answer, msg)


if __name__ == "__main__":
    sys.exit(main())
