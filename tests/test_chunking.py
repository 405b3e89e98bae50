"""Markdown chunking: caps, line ranges, headings, odd input, and content-defined stability."""

from __future__ import annotations

import base64
import random
import re
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recalld.ingest.chunking import Chunk, chunk_markdown

_PIECE = re.compile(r"\w{1,4}|[^\w\s]")


def count(text: str) -> int:
    """Stand-in for WordPiece: every punctuation char and every 4 word chars is a token.

    Like WordPiece it is additive over whitespace, and it over-counts long words.
    """
    return len(_PIECE.findall(text))


def source_lines(text: str) -> list[str]:
    """The line model of the chunker: split on \\n, no line after a final \\n, \\r dropped."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def check_invariants(
    text: str, chunks: list[Chunk], counter: Callable[[str], int] = count, max_tokens: int = 256
) -> None:
    lines = source_lines(text)
    covered: set[int] = set()
    prev: Chunk | None = None
    for c in chunks:
        assert counter(c.text) + 2 <= max_tokens, c
        assert c.text.strip(), "whitespace-only chunk"
        assert 1 <= c.start_line <= c.end_line <= len(lines)
        whole = "\n".join(lines[c.start_line - 1 : c.end_line])
        if c.text != whole:
            # Only a part of one over-long line may stand for that line.
            assert c.start_line == c.end_line and c.text in whole, c
        if prev is not None:
            if prev.end_line == c.start_line:
                assert prev.start_line == prev.end_line == c.start_line == c.end_line
            else:
                assert prev.end_line < c.start_line
        covered.update(range(c.start_line, c.end_line + 1))
        prev = c
    for i, line in enumerate(lines, 1):
        if line.strip():
            assert i in covered, f"line {i} not covered: {line!r}"


# -- document generators -----------------------------------------------------------------------

_WORD_TEXT = (
    "memory index search vector daemon chunk token query model embed cache file path line note "
    "agent session sqlite table score fusion keyword snippet config watcher socket client tray "
    "install setup build release the of and to a in is for that with on as"
)
WORDS = _WORD_TEXT.split()


def paragraph(r: random.Random, n_words: int) -> str:
    words = [r.choice(WORDS) for _ in range(n_words)]
    return "\n".join(" ".join(words[i : i + 11]) for i in range(0, len(words), 11))


def document(seed: int, *, headings: bool) -> str:
    """About 50 chunks: sections with sub-headings, or (headings=False) one long section."""
    r = random.Random(seed)
    out: list[str] = []
    for s in range(6 if headings else 1):
        if headings:
            out += [f"## Section {s} {r.choice(WORDS)}", ""]
        for p in range(14 if headings else 85):
            if headings and r.random() < 0.2:
                out += [f"### Part {s}.{p}", ""]
            if r.random() < 0.1:
                out += [
                    "```",
                    *(f"x{i} = {r.randrange(99)}" for i in range(r.randint(2, 8))),
                    "```",
                ]
                out.append("")
            out += [paragraph(r, r.randint(4, 90)), ""]
    return "\n".join(out)


def changed(old: list[Chunk], new: list[Chunk]) -> int:
    a, b = Counter(c.text for c in old), Counter(c.text for c in new)
    return max(sum((a - b).values()), sum((b - a).values()))


def edits(text: str, r: random.Random) -> list[tuple[str, str]]:
    """Single-line edits near the top: a changed word, an inserted line, a deleted line."""
    lines = text.split("\n")
    body = [i for i, ln in enumerate(lines[:40]) if ln.strip() and not ln.startswith(("#", "`"))]
    out: list[tuple[str, str]] = []
    for i in r.sample(body, 3):
        word = list(lines)
        ws = word[i].split(" ")
        ws[r.randrange(len(ws))] = "EDITED"
        word[i] = " ".join(ws)
        inserted = [*lines[:i], "a freshly inserted line of words", *lines[i:]]
        deleted = lines[:i] + lines[i + 1 :]
        for kind, new in (("word", word), ("insert", inserted), ("delete", deleted)):
            out.append((f"{kind} at line {i + 1}", "\n".join(new)))
    return out


# -- stability ---------------------------------------------------------------------------------


@pytest.mark.parametrize("headings", [True, False], ids=["sections", "one-long-section"])
@pytest.mark.parametrize("seed", range(4))
def test_edit_near_top_rechunks_locally(seed: int, headings: bool) -> None:
    text = document(seed, headings=headings)
    before = chunk_markdown(text, count)
    assert 40 <= len(before) <= 80
    check_invariants(text, before)
    for what, edited in edits(text, random.Random(seed)):
        after = chunk_markdown(edited, count)
        check_invariants(edited, after)
        assert changed(before, after) <= 3, what


def test_edit_near_top_with_real_tokenizer() -> None:
    tokens = pytest.importorskip("recalld.tokens")
    real = tokens.default_tokenizer().count
    for seed, headings in ((10, True), (11, False)):
        text = document(seed, headings=headings)
        before = chunk_markdown(text, real)
        for what, edited in edits(text, random.Random(seed)):
            assert changed(before, chunk_markdown(edited, real)) <= 3, what


def test_long_paragraph_without_blank_lines_resynchronises() -> None:
    # One 3000-token block: exploded into lines, cut by the same content-defined rule.
    r = random.Random(7)
    lines = [" ".join(r.choice(WORDS) for _ in range(r.randint(3, 14))) for _ in range(400)]
    before = chunk_markdown("\n".join(lines), count)
    assert len(before) > 20
    lines[5] = "EDITED " + lines[5]
    lines.insert(9, "one more line")
    after = chunk_markdown("\n".join(lines), count)
    assert changed(before, after) <= 3


def test_repeated_content_is_not_shredded() -> None:
    # Identical words or lines must not tie into a cut at every repeat.
    for text in (" ".join(["word"] * 5000), "\n".join(["same line here"] * 3000)):
        chunks = chunk_markdown(text, count)
        check_invariants(text, chunks)
        assert len(chunks) < count(text) / 40


# -- structure ---------------------------------------------------------------------------------


def test_heading_paths_and_sections() -> None:
    text = "\n".join(
        [
            "# Guide",
            "intro",
            "## Setup",
            "text",
            "### Install",
            "pip install",
            "",
            "Usage",
            "=====",
            "use it",
            "## Tail ##",
            "end",
        ]
    )
    chunks = chunk_markdown(text, count)
    check_invariants(text, chunks)
    got = [(c.start_line, c.heading) for c in chunks]
    assert got == [
        (1, "Guide"),
        (3, "Guide > Setup"),
        (5, "Guide > Setup > Install"),
        (8, "Usage"),
        (11, "Usage > Tail"),
    ]
    assert chunks[1].text == "## Setup\ntext"
    assert chunks[2].text == "### Install\npip install"
    # CommonMark: every line of the paragraph above an underline is part of the heading.
    chunks = chunk_markdown("one\ntwo\n---\nbody", count)
    assert [c.heading for c in chunks] == ["one two"]


def test_headings_always_start_a_chunk() -> None:
    # ...or follow only headings at the start of their chunk ("## A" then "### B" stay together).
    text = document(3, headings=True)
    lines = text.split("\n")
    chunks = chunk_markdown(text, count)
    for i, line in enumerate(lines, 1):
        if line.startswith(("## ", "### ")):
            (c,) = [c for c in chunks if c.start_line <= i <= c.end_line]
            before = lines[c.start_line - 1 : i - 1]
            assert all(not ln.strip() or ln.startswith("#") for ln in before), i


def test_multi_block_chunks_stay_within_target() -> None:
    text = document(1, headings=False)
    for c in chunk_markdown(text, count, target_tokens=100):
        assert count(c.text) <= 100 or "\n\n" not in c.text.strip()


def test_small_blocks_are_packed_together() -> None:
    r = random.Random(4)
    items = [f"- {paragraph(r, r.randint(3, 12))}" for _ in range(200)]  # a loose list
    for text in ("\n\n".join(items), "\n".join(items)):
        chunks = chunk_markdown(text, count)
        check_invariants(text, chunks)
        assert len(chunks) <= len(items) / 4
        assert all(count(c.text) <= 160 for c in chunks)


def test_heading_is_not_left_alone() -> None:
    text = "### Title\n\n" + paragraph(random.Random(1), 140)  # paragraph > target, < cap
    chunks = chunk_markdown(text, count)
    assert chunks[0].text.startswith("### Title\n\n") and chunks[0].heading == "Title"


def test_front_matter_is_its_own_chunk() -> None:
    text = "---\ntitle: x\ntags: [a]\n---\nbody text\nmore"
    chunks = chunk_markdown(text, count)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 4), (5, 6)]
    # Not closed: just text.
    assert len(chunk_markdown("---\ntitle: x\nbody", count)) == 1


def test_fence_kept_whole_and_blank_lines_inside_do_not_split() -> None:
    text = "before\n\n```python\ndef f():\n\n    return 1\n```\n\nafter"
    chunks = chunk_markdown(text, count, target_tokens=8)
    assert any(c.text == "```python\ndef f():\n\n    return 1\n```" for c in chunks)


def test_unclosed_fence_runs_to_end_but_respects_cap() -> None:
    code = "\n".join(f"value_{i} = compute({i}, {i + 1})" for i in range(500))
    text = "# Code\n\n```python\n" + code
    chunks = chunk_markdown(text, count)
    check_invariants(text, chunks)
    assert len(chunks) > 10


# -- odd input ---------------------------------------------------------------------------------


def test_empty_and_blank() -> None:
    assert chunk_markdown("", count) == []
    assert chunk_markdown("\n\n \t\n\r\n", count) == []


def test_crlf_tabs_no_trailing_newline() -> None:
    text = "# T\r\n\r\n\tindented\tline\r\nlast line"
    chunks = chunk_markdown(text, count)
    assert chunks == [Chunk(1, 4, "# T\n\n\tindented\tline\nlast line", "T")]


def test_minified_line_is_cut_by_words_then_chars() -> None:
    minified = "var a=function(b){return b*2};" * 3400  # ~100 KB, one line
    for text in (minified, "x\n" + minified.replace(" ", "") + "\ny"):
        chunks = chunk_markdown(text, count)
        check_invariants(text, chunks)
        long_no = 1 if text is minified else 2
        parts = [c for c in chunks if c.start_line == long_no]
        assert len(parts) > 20 and all(c.end_line == long_no for c in parts)


def test_base64_blob_and_long_alphanumeric_runs() -> None:
    blob = base64.b64encode(random.Random(2).randbytes(30_000)).decode()
    for text in (f"# Img\n\n![x](data:image/png;base64,{blob})\n\nafter", "z" * 5000 + ",end"):
        chunks = chunk_markdown(text, count)
        check_invariants(text, chunks)
        assert len(chunks) > 10


def test_binary_junk_never_raises() -> None:
    r = random.Random(3)
    blobs = [bytes(range(256)) * 40, bytes(r.randrange(256) for _ in range(50_000))]
    for blob in blobs:
        text = blob.decode("utf-8", errors="replace")
        check_invariants(text, chunk_markdown(text, count))
        text = blob.decode("latin-1")
        check_invariants(text, chunk_markdown(text, count))


def test_non_additive_counter_still_capped() -> None:
    # Counts each newline as a token: sums over lines under-count, the final check must catch it.
    def counter(s: str) -> int:
        return count(s) + 3 * s.count("\n")

    text = document(2, headings=False)
    chunks = chunk_markdown(text, counter, max_tokens=64, target_tokens=60)
    check_invariants(text, chunks, counter, 64)


def test_superadditive_counter_on_a_long_line_still_capped() -> None:
    # Longer strings cost extra: word counts add up below the cap, the joined slice does not.
    def counter(s: str) -> int:
        return count(s) + len(s) // 30

    text = "intro\n" + " ".join(f"w{i}" for i in range(3000)) + "\noutro"
    chunks = chunk_markdown(text, counter, max_tokens=100, target_tokens=90)
    check_invariants(text, chunks, counter, 100)


def test_tiny_caps() -> None:
    text = "hello world, this is text\n\nmore"
    assert chunk_markdown(text, count, max_tokens=2) == []
    chunks = chunk_markdown(text, count, max_tokens=3, target_tokens=0)
    check_invariants(text, chunks, count, 3)


def test_speed_one_megabyte() -> None:
    parts: list[str] = []
    seed = 0
    while sum(map(len, parts)) < 1_000_000:
        parts.append(document(seed, headings=seed % 2 == 0))
        seed += 1
    text = "\n\n".join(parts)
    counted = 0

    def counter(s: str) -> int:
        nonlocal counted
        counted += len(s)
        return count(s)

    started = time.perf_counter()
    chunks = chunk_markdown(text, counter)
    elapsed = time.perf_counter() - started
    assert len(chunks) > 1000
    assert counted <= 2.1 * len(text)  # each line once, each chunk once: no quadratic re-counting
    print(f"chunked {len(text)} chars in {elapsed:.2f} s")  # speed belongs to `make bench`


# -- properties --------------------------------------------------------------------------------

markdownish = st.lists(
    st.one_of(
        st.sampled_from(
            ["", " ", "# h1", "## h2", "### h3 ###", "---", "===", "```", "~~~", "- item", "1. x"]
        ),
        st.sampled_from(["\r", "\t", "  code", "> quote", "word " * 30, "x" * 150]),
        st.text(max_size=40),
    ),
    max_size=60,
).map("\n".join)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.one_of(st.text(), markdownish),
    max_tokens=st.integers(min_value=4, max_value=80),
    target=st.integers(min_value=-1, max_value=100),
)
def test_property_invariants(text: str, max_tokens: int, target: int) -> None:
    chunks = chunk_markdown(text, count, max_tokens=max_tokens, target_tokens=target)
    check_invariants(text, chunks, count, max_tokens)


@settings(max_examples=200, deadline=None)
@given(text=markdownish)
def test_property_deterministic(text: str) -> None:
    assert chunk_markdown(text, count, max_tokens=40) == chunk_markdown(text, count, max_tokens=40)


# -- the real tokenizer ------------------------------------------------------------------------


def test_real_wordpiece_counter_within_model_window() -> None:
    tokens = pytest.importorskip("recalld.tokens")
    real = tokens.default_tokenizer().count
    r = random.Random(5)
    texts = [
        document(0, headings=True),
        "naïve café " * 3000,
        "東京都の天気は晴れです。" * 500,
        "🙂🚀 emoji " * 2000,
        ",".join(str(i) for i in range(20_000)),
        "supercalifragilistic" * 2000,
        "".join(chr(r.randrange(32, 0x3000)) for _ in range(20_000)),
    ]
    for text in texts:
        chunks = chunk_markdown(text, real)
        assert chunks
        check_invariants(text, chunks, real, 256)


@pytest.mark.slow
def test_huge_single_line_is_chunked_in_linear_time_and_bounded_memory() -> None:
    # A 1 MB note without a line break: the words are counted once per distinct word (no
    # tokenizer pass over the whole line, no call per repeated word) and atoms are word
    # groups, not single words. Before: ~3 chars counted per char and ~120 MB per MB.
    r = random.Random(11)
    text = " ".join(r.choice(WORDS) + str(r.randrange(50)) for _ in range(150_000))
    counted = 0

    def counter(s: str) -> int:
        nonlocal counted
        counted += len(s)
        return count(s)

    tracemalloc.start()
    try:
        chunks = chunk_markdown(text, counter)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    check_invariants(text, chunks)
    assert len(chunks) > 1000
    assert counted <= 1.3 * len(text), counted / len(text)
    assert peak < 40 * len(text), peak / len(text)


@pytest.mark.parametrize(("open_", "close"), [("---", "---"), ("---", "..."), ("+++", "+++")])
def test_front_matter_is_the_first_chunk_alone(open_: str, close: str) -> None:
    """YAML (``---``) and TOML (``+++``) front matter: its own first chunk, its exact lines."""
    text = f"{open_}\ntitle: T\naliases: [a]\n{close}\nBody line one.\nBody line two.\n"
    chunks = chunk_markdown(text, count)
    check_invariants(text, chunks)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 4), (5, 6)]
    mixed = "+++\ntitle = 'T'\n---\nBody.\n"  # a TOML opener is not closed by ---
    assert chunk_markdown(mixed, count)[0].end_line == 4


def test_additive_counter_gives_the_same_chunks_without_counting_them_again() -> None:
    # WordPiece adds up over whitespace: additive=True emits on the sums of line and word counts
    # (no second count of each chunk) and must cut exactly where the checked path cuts.
    tokens = pytest.importorskip("recalld.tokens")
    real = tokens.default_tokenizer().count
    assert tokens.adds_up(real) and not tokens.adds_up(count)
    r = random.Random(5)
    minified = "var a=function(b){return b*2};" * 300
    blob = base64.b64encode(r.randbytes(3000)).decode()
    texts = [document(s, headings=s % 2 == 0) for s in range(4)] + [
        "intro\n" + " ".join(f"w{i}" for i in range(3000)) + "\noutro",
        f"x\n{minified}\n{minified.replace(' ', '')}\ny",
        f"# Img\n\n![x](data:image/png;base64,{blob})\n\nafter",
        "Alice: hi there\nBob: hello, how are you?\n" * 80,
    ]
    calls = Counter[bool]()

    def counter(additive: bool) -> Callable[[str], int]:
        def counted(s: str) -> int:
            calls[additive] += 1
            return int(real(s))

        return counted

    for text in texts:
        for cap, target in ((256, 240), (64, 40), (12, 8)):
            checked = chunk_markdown(
                text, counter(False), max_tokens=cap, target_tokens=target, chat_overlap=0.67
            )
            fast = chunk_markdown(
                text,
                counter(True),
                max_tokens=cap,
                target_tokens=target,
                chat_overlap=0.67,
                additive=True,
            )
            assert fast == checked
            check_invariants(text, fast, real, cap)
    assert calls[True] < calls[False] * 0.8
