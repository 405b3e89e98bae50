"""Settings: declared once (recalld.settings_table), loaded from TOML, read through typed getters.

The config file is TOML with one table per section (``[search]``, ``[embedding]`` ...). Unknown keys
and values of the wrong type are errors that name the key, so that a typo never silently reverts
to a default.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recalld import paths
from recalld.errors import ConfigError

# The table lives in settings_table; these names stay importable from here (readers, tests).
from recalld.settings_table import DEFAULT_SESSION_GLOBS as DEFAULT_SESSION_GLOBS
from recalld.settings_table import SETTINGS as SETTINGS
from recalld.settings_table import Setting as Setting
from recalld.settings_table import Value as Value

_BY_KEY = {s.key: s for s in SETTINGS}

# Config's typed getters are named after the builtins; these aliases keep annotations unambiguous.
_Str = str
_Int = int
_Float = float
_Bool = bool
_List = list


class Config:
    """Resolved settings: defaults overlaid with the config file and explicit overrides."""

    def __init__(
        self,
        values: Mapping[_Str, Value] | None = None,
        *,
        source: Path | None = None,
        base_dir: Path | None = None,
    ) -> None:
        self._values: dict[_Str, Value] = {s.key: s.default for s in SETTINGS}
        for key, value in (values or {}).items():
            self._values[key] = _check(key, value)
        self.source = source
        self.base_dir = base_dir or paths.data_dir()

    @classmethod
    def load(
        cls, path: Path | None = None, overrides: Mapping[_Str, Value] | None = None
    ) -> Config:
        """Read the config file and apply ``overrides``.

        Only a file that does not exist means "the defaults": an empty, unreadable or invalid
        one is an error (an editor or a tool rewriting it in place leaves it empty for a moment,
        and defaults would drop configured folders and index transcripts turned off).
        """
        path = path or paths.config_path()
        flat: dict[_Str, Value] = {}
        exists = path.exists()
        if exists:
            flat = _flatten(_read_toml(path), path)
        flat.update(overrides or {})
        return cls(flat, source=path if exists else None)

    def with_overrides(self, overrides: Mapping[_Str, Value]) -> Config:
        """A copy with some keys replaced."""
        merged = dict(self._values)
        merged.update(overrides)
        return Config(merged, source=self.source, base_dir=self.base_dir)

    def get(self, key: _Str) -> Value:
        """The value of ``key``."""
        if key not in _BY_KEY:
            raise KeyError(key)
        return self._values[key]

    def str(self, key: _Str) -> _Str:
        value = self.get(key)
        assert isinstance(value, str)
        return value

    def int(self, key: _Str) -> _Int:
        value = self.get(key)
        assert isinstance(value, int) and not isinstance(value, bool)
        return value

    def float(self, key: _Str) -> _Float:
        value = self.get(key)
        assert isinstance(value, int | float) and not isinstance(value, bool)
        return float(value)

    def bool(self, key: _Str) -> _Bool:
        value = self.get(key)
        assert isinstance(value, bool)
        return value

    def list(self, key: _Str) -> _List[_Str]:
        value = self.get(key)
        assert isinstance(value, list)
        return value

    def memory_roots(self) -> _List[Path]:
        """The memory folders, resolved (default: ``memory/`` in the data dir)."""
        configured = self.list("memory.paths")
        if not configured:
            return [paths.resolve_folder(paths.default_memory_dir(self.base_dir))]
        return [paths.resolve_folder(Path(p).expanduser()) for p in configured]

    def session_globs(self) -> _List[_Str]:
        """Transcript globs with ``~`` expanded."""
        return [
            str(Path(g).expanduser()) if g.startswith("~") else g
            for g in self.list("sessions.paths")
        ]

    def values(self) -> dict[_Str, Value]:
        """All values, secrets included (for a process of our own, never for display)."""
        return dict(self._values)

    def as_dict(self) -> dict[_Str, Value]:
        """All values, keys flattened (secrets masked)."""
        out = dict(self._values)
        for key in ("embedding.api_key",):
            if out.get(key):
                out[key] = "***"
        return out


def _read_toml(path: Path) -> dict[str, Any]:
    """The parsed file; a ConfigError when it cannot be read, is empty or is not TOML."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}); fix or remove the file") from exc
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot be read ({exc.strerror or exc}); fix its permissions, or remove it "
            "to use the defaults"
        ) from exc
    if not text.strip():
        raise ConfigError(
            f"{path} is empty; recalld does not take an empty file for the defaults (put the "
            "settings back, or remove the file to use the defaults)"
        )
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}); fix or remove the file") from exc


def _flatten(data: Mapping[str, Any], path: Path) -> dict[str, Value]:
    flat: dict[str, Value] = {}
    for section, table in data.items():
        if not isinstance(table, Mapping):
            raise ConfigError(f"{path}: '{section}' must be a table like [{section}]")
        for name, value in table.items():
            key = f"{section}.{name}"
            if key not in _BY_KEY:
                raise ConfigError(f"{path}: unknown setting '{key}' (see `recalld status --json`)")
            try:
                flat[key] = _check(key, value)
            except ConfigError as exc:
                raise ConfigError(f"{path}: {exc}") from None
    return flat


def _check(key: str, value: Any) -> Value:
    setting = _BY_KEY.get(key)
    if setting is None:
        raise ConfigError(f"unknown setting '{key}'")
    default = setting.default
    ok: bool
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok:
            value = float(value)
    elif isinstance(default, str):
        ok = isinstance(value, str)
    else:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    if not ok:
        raise ConfigError(
            f"setting '{key}' must be {type(default).__name__}, got {value!r}: {setting.help}"
        )
    why = setting.refusal(value)
    if why is not None:
        raise ConfigError(f"{why}, got {value!r:.80}: {setting.help}")
    return value  # type: ignore[no-any-return]
