"""Whether the daemon at the socket serves this process's home: its config file and data folder.

Without ``XDG_RUNTIME_DIR`` (ssh, cron, containers, ``env -i``) the socket is platformdirs'
``/tmp/runtime-<uid>/recalld``: one per uid, whatever ``HOME`` or ``RECALLD_CONFIG`` say, so a
client in another home found the first home's daemon and searched (and wrote into) its notes.
The daemon's ``hello`` names what it serves; a client compares it once per connection, on the
hello it sends anyway or on one it sends first.
"""

from __future__ import annotations

import os
from pathlib import Path

from recalld_client import locations
from recalld_client.errors import WrongDaemon

TYPE_CHECKING = False  # mypy takes it as true; typing costs `recalld search` ~3 ms to import
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


def check(hello: Mapping[str, Any], config: Path | None, address: Path) -> None:
    """Raise :class:`WrongDaemon` unless the daemon that answered ``hello`` serves ``config``
    (default: this process's config file) and this process's data folder."""
    served_config, served_data = hello.get("config"), hello.get("data_dir")
    if not isinstance(served_config, str) or not isinstance(served_data, str):
        return  # a daemon from before these fields (or a bare test server): nothing to compare
    config_hint = config if config is not None else locations.config_path_hint()

    def my_config() -> Path:
        return config if config is not None else locations.config_path()

    if _same(served_config, config_hint, my_config) and _same(
        served_data, locations.data_dir_hint(), locations.data_dir
    ):
        return
    pid = hello.get("pid", "?")
    raise WrongDaemon(
        f"the recalld daemon at {address} (pid {pid}) serves another home: config "
        f"{served_config}, data {served_data}; this command's are {my_config()} and "
        f"{locations.data_dir()}. Its notes are not yours, so nothing was asked. Either stop it "
        f"(`kill {pid}`, or `recalld stop` with its HOME / RECALLD_CONFIG), or give this home a "
        "socket of its own: set RECALLD_HOME (one folder for config, index and socket) or "
        "XDG_RUNTIME_DIR"
    )


def _same(served: str, hint: Path | None, mine: Callable[[], Path]) -> bool:
    """Whether ``served`` is this process's path: the cheap hint first, then the exact one."""
    if hint is not None and _equal(served, hint):
        return True
    return _equal(served, mine())


def _equal(served: str, mine: Path) -> bool:
    # The daemon reports resolved paths; ours may hold a symlink or be relative (--config).
    return served == str(mine) or os.path.realpath(served) == os.path.realpath(mine)
