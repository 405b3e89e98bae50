"""The settings table: every config key once, with its default, one-line help and accepted values.

A new config key is a row here; :mod:`recalld.config` loads the TOML file and checks values
against these rows (its typed getters read them).
"""

from __future__ import annotations

from dataclasses import dataclass

Value = str | int | float | bool | list[str]


@dataclass(frozen=True)
class Setting:
    """One config key: its default, a one-line description, and the values it accepts.

    Numbers must lie in ``[low, high]`` (both inclusive); strings with ``choices`` must be one
    of them (case and surrounding spaces are ignored, as the readers of those keys do).
    """

    key: str
    default: Value
    help: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()

    def refusal(self, value: Value) -> str | None:
        """Why ``value`` is out of this key's range or choices, or None when it is fine."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            if (
                self.low is not None
                and self.high is not None
                and not (self.low <= value <= self.high)
            ):
                return f"{self.key} must be between {_num(self.low)} and {_num(self.high)}"
        elif isinstance(value, str) and self.choices and value.strip().lower() not in self.choices:
            return f"{self.key} must be one of {', '.join(self.choices)}"
        elif isinstance(value, list) and self.choices:
            bad = [v for v in value if not isinstance(v, str) or v not in self.choices]
            if bad:
                return (
                    f"{self.key}: unknown kind {bad[0]!r}; each must be one of "
                    f"{', '.join(self.choices)}"
                )
        return None


DEFAULT_SESSION_GLOBS = [
    "~/.claude/projects/**/*.jsonl",
    "~/.codex/sessions/**/rollout-*.jsonl",
    "~/.openclaw/agents/*/sessions/*.jsonl",
]

SETTINGS: tuple[Setting, ...] = (
    Setting("memory.paths", [], "Markdown folders to index; empty means the data dir's memory/."),
    Setting("memory.extensions", [".md", ".markdown", ".txt"], "File name endings indexed."),
    Setting(
        "memory.max_file_bytes", 10_000_000, "Larger files are skipped with a log line.", 1, 1 << 40
    ),
    Setting(
        "memory.daily_note",
        "YYYY-MM-DD.md",
        "Note `remember` appends to by default, in the first memory folder (YYYY, MM, DD: today).",
    ),
    Setting(
        "memory.max_entry_chars",
        20_000,
        "Longest text `remember` writes as one entry; longer is refused with an error.",
        1,
        1_000_000,
    ),
    Setting("sessions.paths", DEFAULT_SESSION_GLOBS, "Globs of agent transcript JSONL files."),
    Setting(
        "sessions.delta_bytes", 100_000, "New transcript bytes that trigger indexing.", 1, 1 << 40
    ),
    Setting(
        "sessions.delta_messages",
        50,
        "New transcript messages that trigger indexing.",
        1,
        1_000_000_000,
    ),
    Setting(
        "sessions.quiet_s",
        5.0,
        "Index a grown transcript after this many quiet seconds.",
        0,
        86_400,
    ),
    Setting("sessions.include_thinking", False, "Index the agent's thinking blocks."),
    Setting(
        "sessions.tool_result_chars",
        5_000_000,
        "Cap on the indexed text of one tool result.",
        0,
        1 << 34,
    ),
    Setting(
        "sessions.embed_kinds",
        ["message", "tool_call"],
        "Transcript chunk kinds that get vectors (the others are keyword-only).",
        choices=("message", "tool_call", "tool_output"),
    ),
    Setting(
        "sessions.embed_tool_head_chars",
        300,
        "Of a tool call or output, only this many leading characters are embedded.",
        0,
        1 << 30,
    ),
    Setting(
        "sessions.max_line_bytes",
        5_242_880,
        "Longer transcript lines are skipped and counted.",
        1024,
        1 << 34,
    ),
    Setting(
        "embedding.provider",
        "auto",
        "auto|local|ollama|openai|gemini|voyage|none.",
        choices=("auto", "local", "ollama", "openai", "gemini", "voyage", "none"),
    ),
    Setting("embedding.model", "", "Model name; empty means the provider's default."),
    Setting("embedding.base_url", "", "Service URL; empty means the provider's default."),
    Setting(
        "embedding.dims",
        0,
        "Output dimensions where the service allows; 0 = model default.",
        0,
        65_536,
    ),
    Setting(
        "embedding.api_key_env", "", "Environment variable holding the key (default per provider)."
    ),
    Setting("embedding.api_key", "", "The key itself; only if you insist (prefer api_key_env)."),
    Setting("embedding.batch_size", 16, "Chunks per embedding call.", 1, 4096),
    Setting(
        "embedding.max_batch_tokens",
        8000,
        "Input-token budget of one remote request.",
        1,
        100_000_000,
    ),
    Setting("embedding.max_concurrency", 2, "Embedding requests in flight at once.", 1, 64),
    Setting("embedding.timeout_s", 30.0, "Timeout of one remote embedding request.", 0.01, 3600),
    Setting(
        "embedding.max_retries", 4, "Retries on 429/5xx/timeouts (exponential backoff).", 0, 100
    ),
    Setting(
        "embedding.threads",
        0,
        "Threads of the local models (the embedder's batches run side by side, one each); "
        "0 = one per physical core.",
        0,
        1024,
    ),
    Setting(
        "embedding.search_first",
        True,
        "Background embedding (syncs, back-fill, transcripts) waits, up to 0.5 s a batch, "
        "while a search is in flight.",
    ),
    Setting(
        "embedding.background_nice",
        10,
        "Nice value added to background embedding threads (Linux); 0 = same as searches.",
        0,
        19,
    ),
    Setting("search.max_results", 6, "Results returned by default.", 1, 50),
    Setting("search.min_score", 0.35, "Fused results under this score are dropped.", 0, 1),
    Setting("search.vector_weight", 0.2, "Weight of the vector channel in weighted fusion.", 0, 1),
    Setting("search.text_weight", 0.8, "Weight of the keyword channel in weighted fusion.", 0, 1),
    Setting(
        "search.score_norm",
        "minmax",
        "minmax|none: rescale each channel before fusing.",
        choices=("minmax", "none"),
    ),
    Setting(
        "search.candidate_multiplier", 4, "Each channel fetches max_results times this.", 1, 100
    ),
    Setting("search.snippet_chars", 700, "Maximum characters of a result's snippet.", 1, 700),
    Setting(
        "search.fusion",
        "weighted",
        "weighted|rrf|wrrf (RRF with the channel weights; retrieval.rank_fusion).",
        choices=("weighted", "rrf", "wrrf"),
    ),
    Setting("search.rrf_k", 60, "The k of reciprocal rank fusion.", 1, 100_000),
    Setting(
        "search.rrf_blend",
        0.0,
        "Share of an equal-weight RRF mixed into weighted fusion's score (0 = off).",
        0,
        1,
    ),
    Setting(
        "search.long_query_blend",
        0.0,
        "rrf_blend's share for long prose queries only (0 = off; retrieval.query_shape).",
        0,
        1,
    ),
    Setting(
        "search.long_query_vector_weight",
        0.5,
        "Vector weight for long prose queries (0 = off: their kind's weight).",
        0,
        1,
    ),
    Setting(
        "search.note_units",
        0.75,
        "Share of a short note's best chunk score each of its chunks takes per channel (0 = off).",
        0,
        1,
    ),
    Setting(
        "search.unnamed_question_vector_weight",
        0.5,
        "Vector weight for questions that name nothing, typed or as the index writes it (0 = off).",
        0,
        1,
    ),
    Setting(
        "search.unnamed_question_blend",
        0.0,
        "rrf_blend's share for questions that name nothing (0 = off; the same rule as above).",
        0,
        1,
    ),
    Setting(
        "search.long_query_words",
        9,
        "Prose words from which a question or statement is long (long_query_*).",
        1,
        1000,
    ),
    Setting(
        "search.fill_channels",
        False,
        "Each channel scores the other's candidates too (weighted fusion; channel_fill).",
    ),
    Setting(
        "search.gap_confidence",
        1.0,
        "Weight raise of a channel whose best hit stands clear of the next (0 = off).",
        0,
        10,
    ),
    Setting(
        "search.coverage_confidence",
        0.0,
        "Keyword weight lowered when no keyword hit holds the query's rare terms (0 = off).",
        0,
        1,
    ),
    Setting(
        "search.channel_guard",
        0,
        "Each channel's top N kept inside the results shown (0 = off; rank_fusion).",
        0,
        10,
    ),
    Setting(
        "search.context_weight", 1.5, "BM25 weight of a title/heading match vs the text.", 0, 100
    ),
    Setting(
        "search.max_query_chars",
        4000,
        "Longer queries are cut to this many characters.",
        1,
        100_000,
    ),
    Setting(
        "search.query_shape", True, "Weigh channels by query kind (recalld.retrieval.query_shape)."
    ),
    Setting("search.identifier_vector_weight", 0.1, "Vector weight for identifier queries.", 0, 1),
    Setting("search.question_vector_weight", 0.2, "Vector weight for questions.", 0, 1),
    Setting("search.statement_vector_weight", 0.5, "Vector weight for prose statements.", 0, 1),
    Setting(
        "search.literal_boost", 0.3, "Score raise for chunks holding the query's literals.", 0, 10
    ),
    Setting(
        "search.name_boost", 1.0, "Score raise for a file whose name or title is the query.", 0, 10
    ),
    Setting(
        "search.coordination",
        0.5,
        "Keyword credit for holding all the query's rare terms (0 = off; retrieval.coordination).",
        0,
        10,
    ),
    Setting(
        "search.doc_evidence",
        0.0,
        "Bonus of a file's best chunk from its other matches (0 = off; retrieval.doc_evidence).",
        0,
        1,
    ),
    Setting(
        "search.prf",
        0.0,
        "Weight of the keyword feedback search on prose queries (0 = off; recalld.retrieval.prf).",
        0,
        10,
    ),
    Setting("search.partial_identifiers", True, "Match identifier parts and CJK bigrams."),
    Setting(
        "search.ident_weight", 1.0, "BM25 weight of a derived identifier/CJK token match.", 0, 100
    ),
    Setting("search.dedupe", True, "Collapse near-duplicate passages into one result."),
    Setting(
        "search.dedupe_similarity", 0.8, "Shingle Jaccard at which two passages are one.", 0, 1
    ),
    Setting(
        "search.group_short_docs",
        True,
        "One result per short note (<= 4 kB, not a chat or transcript); its other matches in also.",
    ),
    Setting(
        "search.mmr_lambda", 1.0, "MMR relevance/diversity balance (1 = no diversity pass).", 0, 1
    ),
    Setting(
        "search.recency_half_life_days", 0.0, "Half-life of recency decay (0 = off).", 0, 36_500
    ),
    Setting("search.evergreen", ["MEMORY.md"], "Globs of files that never decay."),
    Setting(
        "search.max_tokens", 0, "Default token budget of a search answer (0 = none).", 0, 1_000_000
    ),
    Setting(
        "chunking.max_tokens", 256, "Chunk size cap in model tokens (MiniLM reads 256).", 2, 8192
    ),
    Setting(
        "chunking.target_tokens",
        240,
        "Chunk size bound for packing (content-defined cuts keep chunks under it).",
        1,
        8192,
    ),
    Setting(
        "chunking.front_matter",
        True,
        "Index front matter title/aliases (names) and description/tags (context) with the note.",
    ),
    Setting(
        "chunking.chat_windows",
        True,
        "Cut chat-shaped notes (speaker turns) into overlapping windows of whole turns.",
    ),
    Setting(
        "chunking.chat_window_overlap",
        0.67,
        "Share of a chat window's tokens repeated at the start of the next one.",
        0,
        0.9,
    ),
    Setting(
        "chunking.chat_window_chars",
        0,
        "Character cap of a chat window (0 = the token target only).",
        0,
        1_000_000,
    ),
    Setting(
        "chunking.message_window_overlap",
        0.5,
        "Share of the token target that a transcript chunk repeats of the one before (0 = none).",
        0,
        0.9,
    ),
    Setting(
        "search.chat_focus",
        True,
        "A chat note's hit shows (and cites) the whole turns around its best turn that fit.",
    ),
    Setting("sync.debounce_s", 1.5, "Quiet time before a changed file is re-indexed.", 0, 3600),
    Setting("sync.watch", True, "Watch memory folders for changes."),
    Setting(
        "daemon.on_demand_idle_s",
        1800.0,
        "A daemon started on demand (recalld mcp, a hook) stops after this long without a "
        "request; 0 keeps it running.",
        0,
        604_800,
    ),
    Setting(
        "sync.scan_interval_s",
        30.0,
        "How often folders that inotify cannot watch (its limits reached) are scanned.",
        1,
        86400,
    ),
    Setting(
        "sync.progress_log_s",
        5.0,
        "While a sync job runs longer than this, log its progress this often (0: never).",
        0,
        3600,
    ),
    # keyword channel at scale (recalld.retrieval.common_terms)
    Setting(
        "search.max_term_df",
        0.0,
        "OR queries drop a word found in more than this share of chunks (0: keep every word).",
        0,
        1,
    ),
    Setting(
        "search.keyword_cache_mb",
        256,
        "Memory for the postings of queried words, scored without FTS5's per-row cost (0: off).",
        0,
        65_536,
    ),
    Setting(
        "search.helper_process",
        True,
        "While searches overlap, hand some to a second process (local model, POSIX only).",
    ),
    Setting(
        "index.reader_mmap_mb",
        65_536,
        "Memory-map up to this much of the index for searches (file-backed pages shared by the "
        "read connections, reclaimable by the kernel; 0: plain reads).",
        0,
        1_048_576,
    ),
    Setting(
        "integrate.context_tokens",
        1200,
        "Budget of the memory a Claude Code session starts with (`recalld hook session-start`).",
        100,
        100_000,
    ),
    Setting(
        "rerank.provider",
        "none",
        "none|cohere|voyage|jina|ollama|onnx.",
        choices=("none", "cohere", "voyage", "jina", "ollama", "onnx"),
    ),
    Setting("rerank.model", "", "Reranker model name (or ONNX folder for onnx)."),
    Setting("rerank.base_url", "", "Reranker service URL; empty means the provider's default."),
    Setting("rerank.api_key_env", "", "Environment variable holding the reranker key."),
    Setting("rerank.top_n", 20, "Fused results that the reranker rescores.", 1, 1000),
    Setting("rerank.timeout_s", 3.0, "Time budget of one rerank call.", 0.01, 600),
    Setting("shared.url", "", "postgresql:// URL of the shared store (no password); empty: off."),
    Setting("shared.member", "", "Your name in the shared store (its role is recalld_<member>)."),
    Setting("shared.collection", "", "This machine's collection; empty: <member>@<hostname>."),
    Setting("shared.team", "", "Team that may read this collection; empty: only you."),
    Setting("shared.share", [], "Globs of notes or folders to share; transcripts only if listed."),
    Setting("shared.read", ["*"], "Collections (names or globs) searched besides the local index."),
    Setting("shared.timeout_ms", 300, "How long a search waits for the shared store.", 20, 60_000),
    Setting("shared.password_env", "RECALLD_SHARED_PASSWORD", "Variable holding the password."),
    Setting("shared.password_file", "", "File with the password (readable only by you)."),
)


def _num(bound: float) -> str:
    """A bound as people write it: 50, 0.5, 1099511627776."""
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"
