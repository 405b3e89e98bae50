"""Config values are checked at load (issue 14, item 14): ranges and enums, table-driven.

Every numeric key declares its range and every enum key its choices in the one settings table;
a value outside them is refused with a message naming the file and the key, and ``recalld serve``
with such a config exits with the config exit code and one line, no traceback.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import env_for
from recalld.config import SETTINGS, Config, Setting
from recalld.errors import ConfigError
from recalld.surfaces.cli import EXIT_CONFIG

NUMERIC = [
    s for s in SETTINGS if isinstance(s.default, int | float) and not isinstance(s.default, bool)
]
ENUMS = [s for s in SETTINGS if s.choices and isinstance(s.default, str)]
LIST_CHOICES = [s for s in SETTINGS if s.choices and isinstance(s.default, list)]


def _load(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return Config.load(path)


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[chunking]\nmax_tokens = 0", "chunking.max_tokens must be between 2 and 8192"),
        ("[search]\nmax_results = -5", "config.toml: search.max_results must be between 1 and 50"),
        ('[search]\nfusion = "bogus"', "search.fusion must be one of weighted, rrf"),
        ("[search]\nmmr_lambda = 5", "search.mmr_lambda must be between 0 and 1"),
        ("[search]\nrecency_half_life_days = -1", "search.recency_half_life_days must be between"),
        ('[embedding]\nprovider = "cohere"', "embedding.provider must be one of auto, local"),
        ('[rerank]\nprovider = "magic"', "rerank.provider must be one of none, cohere"),
    ],
)
def test_out_of_range_values_are_refused_by_name(tmp_path: Path, toml: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, toml)
    assert message in str(err.value)


def test_every_numeric_key_has_a_range_holding_its_default() -> None:
    assert NUMERIC, "no numeric settings found"
    for s in NUMERIC:
        assert s.low is not None and s.high is not None, f"{s.key} declares no range"
        assert s.low <= s.default <= s.high, f"{s.key}: default outside its range"


@pytest.mark.parametrize("setting", NUMERIC, ids=lambda s: s.key)
def test_each_numeric_key_refuses_values_just_outside(setting: Setting) -> None:
    assert setting.low is not None and setting.high is not None
    is_int = isinstance(setting.default, int)
    step = 1 if is_int else 1e-6 * max(1.0, abs(setting.high))
    for bad in (setting.low - step, setting.high + step):
        with pytest.raises(ConfigError, match=f"{setting.key} must be between"):
            Config({setting.key: int(bad) if is_int else float(bad)})
    Config({setting.key: setting.low})  # the bounds themselves are allowed
    Config({setting.key: setting.high})


def test_list_keys_with_choices_refuse_unknown_items() -> None:
    assert {s.key for s in LIST_CHOICES} >= {"sessions.embed_kinds"}
    for s in LIST_CHOICES:
        assert isinstance(s.default, list) and set(s.default) <= set(s.choices)
        assert Config({s.key: list(s.choices)}).list(s.key) == list(s.choices)
        assert Config({s.key: []}).list(s.key) == []
        with pytest.raises(ConfigError, match=f"{s.key}: unknown kind 'bogus'"):
            Config({s.key: [s.choices[0], "bogus"]})


def test_enum_keys_accept_their_choices_and_nothing_else() -> None:
    assert {s.key for s in ENUMS} >= {
        "search.fusion",
        "search.score_norm",
        "embedding.provider",
        "rerank.provider",
    }
    for s in ENUMS:
        assert isinstance(s.default, str) and s.default in s.choices
        for choice in s.choices:
            assert Config({s.key: choice}).str(s.key) == choice
        assert Config({s.key: f" {s.choices[0].upper()} "})  # as the readers strip and lower
        with pytest.raises(ConfigError, match=f"{s.key} must be one of"):
            Config({s.key: "bogus"})


def test_serve_with_a_bad_config_exits_with_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[search]\nmax_results = -5\n")
    done = subprocess.run(
        [sys.executable, "-m", "recalld.surfaces.cli", "serve"],
        env=env_for(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == EXIT_CONFIG, done.stderr
    assert "config.toml: search.max_results must be between 1 and 50" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run" / "recalld.sock").exists()
