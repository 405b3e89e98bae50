"""A local ONNX cross-encoder reranker from a folder the user points to (``rerank.model``).

The folder holds ``model.onnx`` and ``tokenizer.json`` (preferred) or a WordPiece ``vocab.txt``.
Query and document are encoded as one pair, ``[CLS] query [SEP] document [SEP]``, cut to 512
tokens (the document loses tokens first), and the model's logit becomes the score. Exported
MS MARCO MiniLM / BGE rerankers have this shape.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.cpus import usable_cores
from recalld.errors import ProviderError

__all__ = ["OnnxCrossEncoder"]

log = logging.getLogger(__name__)

MAX_LENGTH = 512
BATCH = 32


class OnnxCrossEncoder:
    """``onnx``: a cross-encoder run by onnxruntime; scores are sigmoid(logit) in (0, 1)."""

    kind = "onnx"

    def __init__(self, folder: str | Path, *, threads: int = 0, max_length: int = MAX_LENGTH):
        self.folder = Path(folder).expanduser()
        self.label = f"{self.kind}/{self.folder.name}"
        model_file = self.folder / "model.onnx"
        if not model_file.is_file():
            raise ProviderError(
                f"no model.onnx in {self.folder}: set rerank.model to the folder of an exported "
                "cross-encoder (model.onnx plus tokenizer.json or vocab.txt)"
            )
        self.tokenizer = _load_tokenizer(self.folder, max_length)
        try:
            import onnxruntime as ort

            opts = ort.SessionOptions()
            # 0: the usable cores (onnxruntime's own default counts the nominal ones)
            opts.intra_op_num_threads = threads if threads > 0 else usable_cores()
            self.session = ort.InferenceSession(
                str(model_file), sess_options=opts, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own untyped errors for bad files
            raise ProviderError(f"cannot load {model_file}: {exc}") from exc
        self.input_names = {i.name for i in self.session.get_inputs()}
        if "input_ids" not in self.input_names:
            raise ProviderError(
                f"{model_file} has inputs {sorted(self.input_names)}, expected input_ids "
                "(and attention_mask, token_type_ids): is it a cross-encoder export?"
            )

    def score(self, query: str, documents: Sequence[str]) -> list[float]:
        """One score per document, in order."""
        docs = list(documents)
        out: list[float] = []
        for start in range(0, len(docs), BATCH):
            out.extend(self._score_batch(query, docs[start : start + BATCH]))
        return out

    def _score_batch(self, query: str, docs: list[str]) -> list[float]:
        encodings = self.tokenizer.encode_batch([(query, d) for d in docs])
        feeds: dict[str, npt.NDArray[np.int64]] = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        feeds = {k: v for k, v in feeds.items() if k in self.input_names}
        try:
            logits = np.asarray(self.session.run(None, feeds)[0], dtype=np.float32)
        except Exception as exc:  # onnxruntime's errors carry no useful type
            raise ProviderError(f"{self.label} failed to run: {exc}") from exc
        return [float(s) for s in _to_scores(logits, len(docs), self.label)]


def _to_scores(logits: npt.NDArray[np.float32], n: int, label: str) -> npt.NDArray[np.float32]:
    if logits.ndim == 2 and logits.shape == (n, 1):
        logits = logits[:, 0]
    if logits.ndim == 1 and logits.shape[0] == n:
        sigmoid: npt.NDArray[np.float32] = (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
        return sigmoid
    if logits.ndim == 2 and logits.shape == (n, 2):
        # Two-class heads (not relevant, relevant): the probability of "relevant".
        shifted = logits - logits.max(axis=1, keepdims=True)
        probs = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
        relevant: npt.NDArray[np.float32] = probs[:, 1].astype(np.float32)
        return relevant
    raise ProviderError(f"{label} output has shape {logits.shape}; expected ({n},) or ({n}, 1)")


def _load_tokenizer(folder: Path, max_length: int) -> Any:
    from tokenizers import BertWordPieceTokenizer, Tokenizer

    tokenizer: Any
    if (folder / "tokenizer.json").is_file():
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    elif (folder / "vocab.txt").is_file():
        tokenizer = BertWordPieceTokenizer(str(folder / "vocab.txt"), lowercase=True)
    else:
        raise ProviderError(f"no tokenizer.json or vocab.txt in {folder}")
    tokenizer.enable_truncation(max_length=max_length, strategy="longest_first")
    pad_id = tokenizer.token_to_id("[PAD]")
    tokenizer.enable_padding(pad_id=pad_id if pad_id is not None else 0, pad_token="[PAD]")
    return tokenizer
