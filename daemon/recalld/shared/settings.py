"""The ``[shared]`` settings as one value, and the password that never lives in config.toml."""

from __future__ import annotations

import fnmatch
import os
import re
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from recalld.config import Config
from recalld.errors import ConfigError

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")


@dataclass(frozen=True)
class SharedSettings:
    """Where the shared store is, who this daemon is there, and what it shares and reads."""

    url: str
    member: str
    collection: str
    team: str
    share: tuple[str, ...]
    read: tuple[str, ...]
    timeout_ms: int
    password_env: str
    password_file: str

    @property
    def role(self) -> str:
        """The PostgreSQL role of this member (each member connects as its own role)."""
        return role_of(self.member)

    def reads(self, collection: str) -> bool:
        """Whether searches look in ``collection`` (never this machine's own: it is local)."""
        if collection == self.collection:
            return False
        return any(fnmatch.fnmatchcase(collection, pattern) for pattern in self.read)

    def password(self) -> str | None:
        """The password from the environment or a private file; None when neither has one."""
        if self.password_file:
            path = Path(os.path.expanduser(self.password_file))
            try:
                info = path.stat()
            except OSError as exc:
                raise ConfigError(f"shared.password_file {path}: {exc.strerror}") from exc
            if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise ConfigError(
                    f"shared.password_file {path} is readable by others: chmod 600 {path}"
                )
            return path.read_text(encoding="utf-8").strip()
        value = os.environ.get(self.password_env, "") if self.password_env else ""
        return value or None

    def dsn(self) -> str:
        """The URL with this member's role and password filled in (never logged)."""
        return with_login(self.url, self.role, self.password())


def role_of(member: str) -> str:
    """``alice`` -> ``recalld_alice``; a name PostgreSQL accepts without quoting."""
    if not _NAME.match(member):
        raise ConfigError(
            f"shared.member {member!r}: use lowercase letters, digits and _ (start with a letter)"
        )
    return f"recalld_{member}"


def with_login(url: str, user: str | None, password: str | None) -> str:
    """``url`` with the user and password replaced (psycopg reads them from the URL)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    login = ""
    if user:
        login = quote(user, safe="")
        if password:
            login += ":" + quote(password, safe="")
        login += "@"
    return urlunsplit((parts.scheme, login + host, parts.path, parts.query, parts.fragment))


def redact_url(url: str) -> str:
    """The URL without its password, for logs and ``status``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    login = parts.netloc.rsplit("@", 1)
    user = login[0].split(":", 1)[0]
    return urlunsplit((parts.scheme, f"{user}:***@{login[1]}", parts.path, parts.query, ""))


def load(config: Config) -> SharedSettings | None:
    """The shared settings, or None when ``shared.url`` is empty (the store is off)."""
    url = config.str("shared.url").strip()
    if not url:
        return None
    if not url.startswith(("postgresql://", "postgres://")):
        raise ConfigError(f"shared.url must be a postgresql:// URL, got {redact_url(url)!r}")
    if urlsplit(url).password:
        raise ConfigError(
            "shared.url holds a password: remove it, and put it in the variable named by "
            "shared.password_env or in shared.password_file (chmod 600)"
        )
    member = config.str("shared.member").strip()
    if not member:
        raise ConfigError("shared.url is set but shared.member is empty: say who you are")
    role_of(member)
    collection = config.str("shared.collection").strip() or f"{member}@{socket.gethostname()}"
    return SharedSettings(
        url=url,
        member=member,
        collection=collection,
        team=config.str("shared.team").strip(),
        share=tuple(config.list("shared.share")),
        read=tuple(config.list("shared.read")),
        timeout_ms=config.int("shared.timeout_ms"),
        password_env=config.str("shared.password_env").strip(),
        password_file=config.str("shared.password_file").strip(),
    )
