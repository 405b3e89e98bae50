"""Settings: declared once below (key, default, help), loaded from TOML, read through typed getters.

The config file is TOML with one table per section (``[search]``, ``[embedding]`` ...). Unknown keys
and values of the wrong type are errors that name the key, so that a typo never silently reverts
to a default.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recalld import paths
from recalld.errors import ConfigError

Value = str | int | float | bool | list[str]


@dataclass(frozen=True)
class Setting:
    """One config key: its default and a one-line description."""

    key: str
    default: Value
    help: str


DEFAULT_SESSION_GLOBS = [
    "~/.claude/projects/**/*.jsonl",
    "~/.codex/sessions/**/rollout-*.jsonl",
    "~/.openclaw/agents/*/sessions/*.jsonl",
]

SETTINGS: tuple[Setting, ...] = (
    Setting("memory.paths", [], "Markdown folders to index; empty means the data dir's memory/."),
    Setting("memory.extensions", [".md", ".markdown", ".txt"], "File name endings indexed."),
    Setting("memory.max_file_bytes", 10_000_000, "Larger files are skipped with a log line."),
    Setting("sessions.paths", DEFAULT_SESSION_GLOBS, "Globs of agent transcript JSONL files."),
    Setting("sessions.delta_bytes", 100_000, "New transcript bytes that trigger indexing."),
    Setting("sessions.delta_messages", 50, "New transcript messages that trigger indexing."),
    Setting("sessions.quiet_s", 5.0, "Index a grown transcript after this many quiet seconds."),
    Setting("sessions.include_thinking", False, "Index the agent's thinking blocks."),
    Setting("sessions.tool_result_chars", 5_000_000, "Cap on the indexed text of one tool result."),
    Setting(
        "sessions.embed_kinds",
        ["message", "tool_call", "tool_output"],
        "Transcript chunk kinds that get vectors (the others are keyword-only).",
    ),
    Setting(
        "sessions.embed_tool_head_chars",
        300,
        "Of a tool call or output, only this many leading characters are embedded.",
    ),
    Setting("embedding.provider", "auto", "auto|local|ollama|openai|gemini|voyage|none."),
    Setting("embedding.model", "", "Model name; empty means the provider's default."),
    Setting("embedding.base_url", "", "Service URL; empty means the provider's default."),
    Setting("embedding.dims", 0, "Output dimensions where the service allows; 0 = model default."),
    Setting(
        "embedding.api_key_env", "", "Environment variable holding the key (default per provider)."
    ),
    Setting("embedding.api_key", "", "The key itself; only if you insist (prefer api_key_env)."),
    Setting("embedding.batch_size", 16, "Chunks per embedding call."),
    Setting("embedding.max_batch_tokens", 8000, "Input-token budget of one remote request."),
    Setting("embedding.max_concurrency", 2, "Embedding requests in flight at once."),
    Setting("embedding.timeout_s", 30.0, "Timeout of one remote embedding request."),
    Setting("embedding.max_retries", 4, "Retries on 429/5xx/timeouts (exponential backoff)."),
    Setting("embedding.threads", 0, "ONNX intra-op threads for the local model; 0 = all cores."),
    Setting("search.max_results", 6, "Results returned by default."),
    Setting("search.min_score", 0.35, "Fused results under this score are dropped."),
    Setting("search.vector_weight", 0.2, "Weight of the vector channel in weighted fusion."),
    Setting("search.text_weight", 0.8, "Weight of the keyword channel in weighted fusion."),
    Setting("search.score_norm", "minmax", "minmax|none: rescale each channel before fusing."),
    Setting("search.candidate_multiplier", 4, "Each channel fetches max_results times this."),
    Setting("search.snippet_chars", 700, "Maximum characters of a result's snippet."),
    Setting("search.fusion", "weighted", "weighted|rrf."),
    Setting("search.rrf_k", 60, "The k of reciprocal rank fusion."),
    Setting("search.context_weight", 1.5, "BM25 weight of a title/heading match vs the text."),
    Setting("search.max_query_chars", 4000, "Longer queries are cut to this many characters."),
    Setting("search.query_shape", True, "Weigh channels by query kind (recalld.query_shape)."),
    Setting("search.identifier_vector_weight", 0.1, "Vector weight for identifier queries."),
    Setting("search.question_vector_weight", 0.2, "Vector weight for questions."),
    Setting("search.statement_vector_weight", 0.5, "Vector weight for prose statements."),
    Setting("search.literal_boost", 0.3, "Score raise for chunks holding the query's literals."),
    Setting("search.name_boost", 1.0, "Score raise for a file whose name or title is the query."),
    Setting("search.partial_identifiers", True, "Match identifier parts and CJK bigrams."),
    Setting("search.ident_weight", 1.0, "BM25 weight of a derived identifier/CJK token match."),
    Setting("search.dedupe", True, "Collapse near-duplicate passages into one result."),
    Setting("search.dedupe_similarity", 0.8, "Shingle Jaccard at which two passages are one."),
    Setting("search.mmr_lambda", 1.0, "MMR relevance/diversity balance (1 = no diversity pass)."),
    Setting("search.recency_half_life_days", 0.0, "Half-life of recency decay (0 = off)."),
    Setting("search.evergreen", ["MEMORY.md"], "Globs of files that never decay."),
    Setting("search.max_tokens", 0, "Default token budget of a search answer (0 = none)."),
    Setting("chunking.max_tokens", 256, "Chunk size cap in model tokens (MiniLM reads 256)."),
    Setting(
        "chunking.target_tokens",
        240,
        "Chunk size bound for packing (content-defined cuts keep chunks under it).",
    ),
    Setting("sync.debounce_s", 1.5, "Quiet time before a changed file is re-indexed."),
    Setting("sync.watch", True, "Watch memory folders for changes."),
    Setting("rerank.provider", "none", "none|cohere|voyage|jina|ollama|onnx."),
    Setting("rerank.model", "", "Reranker model name (or ONNX folder for onnx)."),
    Setting("rerank.base_url", "", "Reranker service URL; empty means the provider's default."),
    Setting("rerank.api_key_env", "", "Environment variable holding the reranker key."),
    Setting("rerank.top_n", 20, "Fused results that the reranker rescores."),
    Setting("rerank.timeout_s", 3.0, "Time budget of one rerank call."),
)

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
        """Read the config file (missing is fine) and apply ``overrides``."""
        path = path or paths.config_path()
        flat: dict[_Str, Value] = {}
        if path.exists():
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8"))
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise ConfigError(
                    f"{path}: not valid TOML ({exc}); fix or remove the file"
                ) from exc
            flat = _flatten(data, path)
        flat.update(overrides or {})
        return cls(flat, source=path if path.exists() else None)

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
            return [paths.default_memory_dir(self.base_dir).resolve()]
        return [Path(p).expanduser().resolve() for p in configured]

    def session_globs(self) -> _List[_Str]:
        """Transcript globs with ``~`` expanded."""
        return [
            str(Path(g).expanduser()) if g.startswith("~") else g
            for g in self.list("sessions.paths")
        ]

    def as_dict(self) -> dict[_Str, Value]:
        """All values, keys flattened (secrets masked)."""
        out = dict(self._values)
        for key in ("embedding.api_key",):
            if out.get(key):
                out[key] = "***"
        return out


def _flatten(data: Mapping[str, Any], path: Path) -> dict[str, Value]:
    flat: dict[str, Value] = {}
    for section, table in data.items():
        if not isinstance(table, Mapping):
            raise ConfigError(f"{path}: '{section}' must be a table like [{section}]")
        for name, value in table.items():
            key = f"{section}.{name}"
            if key not in _BY_KEY:
                raise ConfigError(f"{path}: unknown setting '{key}' (see `recalld status --json`)")
            flat[key] = _check(key, value)
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
    return value  # type: ignore[no-any-return]
