"""The seam every embedding provider implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """A provider: a kind, a model id, dimensions and one batch method.

    ``embed`` returns a float32 array of shape (len(texts), dims), each row L2-normalised, so that
    a dot product is the cosine similarity. ``key`` identifies the vector space for the embedding
    cache and the index identity (kind, base URL, model, dims) and never contains a secret.
    """

    kind: str
    model: str
    dims: int
    max_input_tokens: int

    @property
    def key(self) -> str: ...

    @property
    def label(self) -> str:
        """Human-readable ``kind/model`` shown in search results and status."""
        ...

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors: ...


def provider_key(kind: str, base_url: str, model: str, dims: int) -> str:
    """The cache/identity key of a vector space (no secrets)."""
    return f"{kind}|{base_url.rstrip('/')}|{model}|{dims}"


def normalise(vectors: npt.NDArray[np.floating]) -> Vectors:
    """L2-normalise rows (zero rows stay zero)."""
    arr = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Vectors = (arr / norms).astype(np.float32, copy=False)
    return out
