"""Markdown chunking with content-defined boundaries.

The text is split into blocks (front matter, headings, fenced code, paragraphs/lists separated by
blank lines). A heading of level 1-2 starts a new *section*; sections are chunked independently.
Inside a section the blocks ("atoms") are packed into chunks of at most ``target_tokens`` by a
rule that depends only on nearby content, so an edit re-chunks only its neighbourhood (greedy
packing from the top would shift every later chunk after an insert):

* every boundary between two atoms gets a priority ``(class, key)``: the class prefers cuts
  between blocks over cuts between lines over cuts inside a line; the key hashes the first
  ``_KEY_CHARS`` chars of the atom after it (editing the rest of a block leaves it alone);
* some boundaries are *walls*, always cut and never crossed: before a sub-heading, and where
  the key is below a threshold proportional to the next atom's size (see ``_priorities``);
* any other boundary is a cut iff its *domain* -- the atoms between the nearest boundary of
  higher priority on either side -- holds more than ``target_tokens`` tokens.

The last rule is the Cartesian-tree view of "split a too-big range at its strongest boundary,
recurse": every range without a cut fits in ``target_tokens`` unless it is a single atom, and the
decision looks at most ``target_tokens`` away. The walls keep domains short, so a changed key
cannot cascade through a chain of boundaries. Measured: changing a word, inserting or deleting a
line changes at most 3 chunks in all but ~1 in 2000 random edits (most often 1).

A heading is glued to the atom after it. Blocks over the cap are exploded into lines, lines over
the cap into groups of words, words over the cap into content-defined segments (see
:mod:`recalld.ingest.line_pieces`).
Exception to the line contract: chunks cut from a single over-long line report that line as both
``start_line`` and ``end_line``, and their ``text`` is a (stripped) slice of that line.
Lines are split on ``"\\n"`` only (a trailing ``"\\r"`` is dropped), as editors number them.

Token counts are taken once per line (per word/segment for over-long lines) and added up, which
is exact for WordPiece. With ``additive`` (a counter whose counts add up over whitespace, as
WordPiece's do) a chunk of whole lines or whole words is emitted on that sum; any other chunk (one
that joins pieces of a word, or any chunk of a counter that is not additive) is counted once before
it is emitted, and split further if that count is over the cap.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from recalld.ingest.conversation_windows import Unit, is_turn, speaker_turns, turn_windows
from recalld.ingest.front_matter import front_matter_end
from recalld.ingest.line_pieces import LinePieces, char_runs

__all__ = ["Chunk", "chunk_markdown"]

Counter = Callable[[str], int]


@dataclass(frozen=True)
class Chunk:
    """A chunk of a Markdown file (line numbers are 1-based and inclusive)."""

    start_line: int
    end_line: int
    text: str
    heading: str


_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]|$)")
_ATX_CLOSE = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)$")
_LIST = re.compile(r"[ \t]*(?:[-+*]|\d{1,9}[.)])(?:[ \t]|$)")
_QUOTE = re.compile(r" {0,3}>")
# An atom's key hashes only its first chars: editing the rest of a paragraph then changes its
# token count but not the priority of the boundary before it, which keeps re-chunking local.
_KEY_CHARS = 32

# Boundary classes: a bigger class is a preferred cut (a heading, _C_HEADING and up, is always a
# wall). _C_WORD must be the lowest and never a wall: then the boundaries around an over-long
# line always cut (their domain holds the whole line), so no chunk mixes a slice of a line with
# other lines.
_C_WORD, _C_LINE, _C_LINE_SOFT, _C_BLOCK, _C_HEADING = 0, 1, 2, 3, 4
_MASK = (1 << 64) - 1
_WALL = 1 << 128  # priority of a wall: above every (class, key)
# An atom of t tokens gets a wall before it with probability min(1, 1.5 * t / limit): more walls
# mean smaller chunks but fewer chunks changed by an edit (1.5 measured as a good middle).
_WALL_RATE_NUM, _WALL_RATE_DEN = 3, 2


@dataclass(slots=True)
class _Block:
    start: int  # 0-based line index, inclusive
    end: int
    kind: str  # "front" | "heading" | "fence" | "para"
    level: int = 0
    title: str = ""


@dataclass(slots=True)
class _Atom:
    line0: int
    line1: int
    tok: int
    key: int  # hash of the start of the atom's text
    cls: int  # class of the boundary *before* this atom
    block: int  # index of the block holding line0 (for the heading path)
    c0: int = -1  # char slice of line0 when the atom is part of an over-long line
    c1: int = -1
    heading: bool = False


def _hash(text: str) -> int:
    raw = text.encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big")


def _mix(a: int, b: int) -> int:
    """Combine two 64-bit hashes (splitmix64 finaliser)."""
    z = (a * 0x9E3779B97F4A7C15 + b + 0x632BE59BD9B4E019) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def _priorities(atoms: list[_Atom], limit: int) -> list[int]:
    """Priority of the boundary before each atom: ``_WALL``, or its class and then its key.

    Walls are unconditional cuts that no domain crosses: before every sub-heading, and before
    an atom whose key falls below a threshold proportional to its size (so a wall comes about
    every ``limit / 1.5`` tokens, however long the blocks are). They keep the domains
    short, so a changed priority cannot cascade through many boundaries. Not between the words
    of one line: those must stay inside the line's boundaries.

    When the same key recurs within the last 8 atoms (repeated lines or words) its occurrence
    number is mixed in, so that repeats do not tie: ties would make every repeat a cut and
    shred periodic text into tiny chunks.
    """
    prio: list[int] = []
    reps: list[int] = []
    for i, a in enumerate(atoms):
        rep = 0
        for d in range(1, min(8, i) + 1):
            if atoms[i - d].key == a.key:
                rep = reps[i - d] + 1
                break
        reps.append(rep)
        key = _mix(a.key, rep) if rep else a.key
        # key / 2**64 < rate * tok / limit, in integers
        sized = key * limit * _WALL_RATE_DEN < (_WALL_RATE_NUM * a.tok) << 64
        if a.cls >= _C_HEADING or (a.cls > _C_WORD and sized):
            prio.append(_WALL)
        else:
            prio.append((a.cls << 64) | key)
    return prio


def _is_blank(line: str) -> bool:
    return not line.strip()


def _closes_fence(line: str, mark: str) -> bool:
    """True if ``line`` closes a fence opened with ``mark`` (same char, at least as long)."""
    m = _FENCE.match(line)
    if m is None or m.group(2).strip():
        return False
    return m.group(1)[0] == mark[0] and len(m.group(1)) >= len(mark)


def _parse_blocks(lines: list[str]) -> list[_Block]:
    """Split lines into blocks; blank lines are separators and belong to no block."""
    blocks: list[_Block] = []
    n = len(lines)
    i = 0
    front = front_matter_end(lines)
    if front is not None:
        blocks.append(_Block(0, front, "front"))
        i = front + 1
    para = -1  # start of the open paragraph, -1 when none

    def flush(end: int) -> None:
        nonlocal para
        if para >= 0:
            blocks.append(_Block(para, end, "para"))
            para = -1

    while i < n:
        line = lines[i]
        if _is_blank(line):
            flush(i - 1)
            i += 1
            continue
        m = _FENCE.match(line)
        if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
            flush(i - 1)
            mark = m.group(1)
            j = i + 1
            while j < n and not _closes_fence(lines[j], mark):
                j += 1
            # An unclosed fence runs to the end of the file (as CommonMark renders it).
            end = min(j, n - 1)
            blocks.append(_Block(i, end, "fence"))
            i = end + 1
            continue
        m = _ATX.match(line)
        if m:
            flush(i - 1)
            title = _ATX_CLOSE.sub("", line.strip()[len(m.group(1)) :].strip()).strip()
            blocks.append(_Block(i, i, "heading", len(m.group(1)), title))
            i += 1
            continue
        m = _SETEXT.match(line)
        if m and para >= 0 and not _LIST.match(lines[para]) and not _QUOTE.match(lines[para]):
            title = " ".join(s.strip() for s in lines[para:i])
            blocks.append(_Block(para, i, "heading", 1 if m.group(1)[0] == "=" else 2, title))
            para = -1
            i += 1
            continue
        if para < 0:
            para = i
        i += 1
    flush(n - 1)
    return blocks


def _heading_paths(blocks: list[_Block]) -> list[str]:
    """The heading path in effect at each block (a heading is part of its own path)."""
    stack: list[tuple[int, str]] = []
    paths: list[str] = []
    for b in blocks:
        if b.kind == "heading":
            while stack and stack[-1][0] >= b.level:
                stack.pop()
            stack.append((b.level, b.title))
        paths.append(" > ".join(t for _, t in stack if t))
    return paths


class _Chunker:
    def __init__(
        self,
        text: str,
        count: Counter,
        max_tokens: int,
        target_tokens: int,
        chat_overlap: float | None = None,
        chat_chars: int = 0,
        additive: bool = False,
    ) -> None:
        self.count = count
        self.additive = additive
        self.chat_overlap = chat_overlap
        self.chat_chars = chat_chars
        self.chat = False
        self.cap = max_tokens - 2
        self.limit = min(target_tokens, self.cap) if target_tokens > 0 else self.cap
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the final newline ends the last line, it does not start one
        self.lines = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
        self.long_lines = LinePieces(count, self.cap, self.limit)
        tokens = self.long_lines.line_tokens
        self.ltok = [tokens(ln) if ln.strip() else 0 for ln in self.lines]  # blank: 0
        self.paths: list[str] = []  # heading path per block
        self.out: list[Chunk] = []

    def fits(self, s: str) -> bool:
        return self.count(s) <= self.cap

    def run(self) -> list[Chunk]:
        if self.cap < 1 or not self.lines:
            return []
        blocks = _parse_blocks(self.lines)
        self.paths = _heading_paths(blocks)
        if self.chat_overlap is not None:
            # Front matter is not conversation: the note's body decides whether it is a chat.
            body = blocks[0].end + 1 if blocks and blocks[0].kind == "front" else 0
            self.chat = speaker_turns(self.lines[body:]) is not None
        section: list[int] = []
        for bi, b in enumerate(blocks):
            hard = b.kind == "front" or (b.kind == "heading" and b.level <= 2)
            if hard and section:
                self._section(blocks, section)
                section = []
            section.append(bi)
            if b.kind == "front":
                self._section(blocks, section)
                section = []
        if section:
            self._section(blocks, section)
        return self.out

    # -- atoms -----------------------------------------------------------------------------

    def _block_atoms(self, bi: int, b: _Block) -> list[_Atom]:
        tok = sum(self.ltok[b.start : b.end + 1])
        cls = _C_HEADING if b.kind == "heading" else _C_BLOCK
        if tok <= self.cap:
            key = _hash(self._head(b.start, b.end))
            return [_Atom(b.start, b.end, tok, key, cls, bi, heading=b.kind == "heading")]
        atoms: list[_Atom] = []
        for k in range(b.start, b.end + 1):
            line = self.lines[k]
            if k > b.start:
                soft = _is_blank(self.lines[k - 1]) or _LIST.match(line) is not None
                cls = _C_LINE_SOFT if soft else _C_LINE
            if self.ltok[k] <= self.cap:
                atoms.append(_Atom(k, k, self.ltok[k], _hash(line[:_KEY_CHARS]), cls, bi))
            else:
                for j, (c0, c1, t) in enumerate(self.long_lines.split(line, self.ltok[k])):
                    key = _hash(line[c0:c1])
                    atoms.append(_Atom(k, k, t, key, cls if j == 0 else _C_WORD, bi, c0, c1))
        return atoms

    def _head(self, lo: int, hi: int) -> str:
        """The first ``_KEY_CHARS`` chars of lines ``lo..hi`` joined (what an atom's key hashes)."""
        parts: list[str] = []
        size = 0
        for k in range(lo, hi + 1):
            parts.append(self.lines[k][: _KEY_CHARS - size])
            size += len(parts[-1]) + 1
            if size >= _KEY_CHARS:
                break
        return "\n".join(parts)

    def _glue_headings(self, atoms: list[_Atom]) -> list[_Atom]:
        """Attach a heading to the atom after it, so a heading never ends up alone."""
        out: list[_Atom] = []
        for a in atoms:
            prev = out[-1] if out else None
            if prev is not None and prev.heading and a.c0 < 0 and prev.tok + a.tok <= self.cap:
                prev.line1 = a.line1
                prev.tok += a.tok
                prev.key = _mix(prev.key, a.key)
                prev.heading = a.heading
            else:
                out.append(a)
        return out

    # -- packing ---------------------------------------------------------------------------

    def _section(self, blocks: list[_Block], section: list[int]) -> None:
        if self.chat and blocks[section[0]].kind != "front":
            self._chat_section(blocks, section)
            return
        atoms: list[_Atom] = []
        for bi in section:
            atoms.extend(self._block_atoms(bi, blocks[bi]))
        atoms = self._glue_headings(atoms)
        cuts = _cuts([a.tok for a in atoms], _priorities(atoms, self.limit), self.limit)
        first = 0
        for i in range(1, len(atoms) + 1):
            # A run never mixes whole lines with slices of a line (guaranteed by the classes,
            # checked here so that a violation could only cost an extra cut).
            a, b = atoms[first], atoms[min(i, len(atoms) - 1)]
            mixed = (a.c0 < 0) != (b.c0 < 0) or (a.c0 >= 0 and a.line0 != b.line0)
            if i == len(atoms) or cuts[i] or mixed:
                self._emit(atoms[first:i])
                first = i

    def _chat_section(self, blocks: list[_Block], section: list[int]) -> None:
        """A chat's section as overlapping windows of whole turns (ingest.conversation_windows)."""
        units: list[Unit] = []
        for bi in section:
            b = blocks[bi]
            first = b.start
            for k in range(b.start + 1, b.end + 1):
                if b.kind == "para" and is_turn(self.lines[k]):
                    units.append(self._unit(first, k - 1))
                    first = k
            units.append(self._unit(first, b.end))
        assert self.chat_overlap is not None
        for i, j in turn_windows(units, self.limit, self.chat_overlap, self.chat_chars):
            path = self.paths[next(bi for bi in section if blocks[bi].end >= units[i].line0)]
            lo, hi = units[i].line0, units[j].line1
            while lo <= hi and _is_blank(self.lines[lo]):
                lo += 1
            while hi >= lo and _is_blank(self.lines[hi]):
                hi -= 1
            if lo <= hi:
                self._emit_lines(lo, hi, path)

    def _unit(self, lo: int, hi: int) -> Unit:
        # The blank lines before a block are in a window that joins it to the one before: its
        # characters count them (a window's first unit over-counts by those few characters).
        gap = lo
        while gap > 0 and _is_blank(self.lines[gap - 1]):
            gap -= 1
        chars = sum(len(line) + 1 for line in self.lines[gap : hi + 1]) - 1
        return Unit(lo, hi, sum(self.ltok[lo : hi + 1]), chars)

    def _emit(self, run: list[_Atom]) -> None:
        head = run[0]
        path = self.paths[head.block]
        if head.c0 >= 0:
            line = self.lines[head.line0]
            # Pieces that meet at whitespace: the slice counts what its pieces add up to.
            whole = self.additive and all(line[a.c1 - 1].isspace() for a in run[:-1])
            tok = sum(a.tok for a in run) if whole else None
            self._emit_slice(head.line0, line, run[0].c0, run[-1].c1, path, tok)
            return
        lo, hi = head.line0, run[-1].line1
        while lo <= hi and _is_blank(self.lines[lo]):
            lo += 1
        while hi >= lo and _is_blank(self.lines[hi]):
            hi -= 1
        if lo <= hi:
            self._emit_lines(lo, hi, path)

    def _emit_lines(self, lo: int, hi: int, path: str) -> None:
        text = "\n".join(self.lines[lo : hi + 1])
        # Additive: lines that add up to the cap fit (each was counted exactly: a line counted
        # as just over the cap never adds up to it). Anything else is counted.
        if (self.additive and sum(self.ltok[lo : hi + 1]) <= self.cap) or self.fits(text):
            self.out.append(Chunk(lo + 1, hi + 1, text, path))
        elif lo == hi:
            self._emit_slice(lo, text, 0, len(text), path)
        else:
            # Only reached with a counter that is not additive over lines: halve until it fits.
            mid = (lo + hi) // 2
            for a, b in ((lo, mid), (mid + 1, hi)):
                while a <= b and _is_blank(self.lines[a]):
                    a += 1
                while b >= a and _is_blank(self.lines[b]):
                    b -= 1
                if a <= b:
                    self._emit_lines(a, b, path)

    def _emit_slice(
        self, k: int, line: str, c0: int, c1: int, path: str, tok: int | None = None
    ) -> None:
        """Emit ``line[c0:c1]`` stripped, cut further if over the cap (``tok``: what its
        pieces add up to, when they meet at whitespace; else it is counted)."""
        text = line[c0:c1].strip()
        if not text:
            return
        if (tok is not None and tok <= self.cap) or self.fits(text):
            self.out.append(Chunk(k + 1, k + 1, text, path))
            return
        off = c0 + (len(line[c0:c1]) - len(line[c0:c1].lstrip()))
        for a, b in char_runs(line, off, off + len(text), self.fits):
            part = line[a:b].strip()
            if part:
                self.out.append(Chunk(k + 1, k + 1, part, path))


def _cuts(tok: list[int], prio: list[int], limit: int) -> list[bool]:
    """``cut[i]``: a chunk starts at atom ``i`` (``prio[i]`` is the boundary before atom ``i``).

    The boundary before atom ``i`` is cut iff it is a wall, or the atoms between the nearest
    boundary on the left with priority >= its own and the nearest on the right with priority >
    its own hold more than ``limit`` tokens (ties go to the leftmost, as in a Cartesian tree).
    """
    n = len(tok)
    prefix = [0] * (n + 1)
    for i, t in enumerate(tok):
        prefix[i + 1] = prefix[i] + t
    left = [0] * n  # the domain starts at this atom
    stack: list[int] = []
    for i in range(1, n):
        while stack and prio[stack[-1]] < prio[i]:
            stack.pop()
        left[i] = stack[-1] if stack else 0
        stack.append(i)
    right = [n] * n  # the domain ends before this atom
    stack = []
    for i in range(n - 1, 0, -1):
        while stack and prio[stack[-1]] <= prio[i]:
            stack.pop()
        right[i] = stack[-1] if stack else n
        stack.append(i)
    cut = [False] * n
    for i in range(1, n):
        cut[i] = prio[i] == _WALL or prefix[right[i]] - prefix[left[i]] > limit
    return cut


def chunk_markdown(
    text: str,
    count_tokens: Counter,
    *,
    max_tokens: int = 256,
    target_tokens: int = 160,
    chat_overlap: float | None = None,
    chat_chars: int = 0,
    additive: bool = False,
) -> list[Chunk]:
    """Chunk Markdown ``text`` so that ``count_tokens(chunk.text) + 2 <= max_tokens`` always.

    Multi-block chunks hold at most ``target_tokens``; boundaries are content-defined (see the
    module docstring). Whitespace-only chunks are skipped; an empty text gives no chunks. With
    ``chat_overlap`` set, a chat-shaped note is cut into overlapping windows of whole turns
    instead (:mod:`recalld.ingest.conversation_windows`), of at most ``chat_chars`` characters when
    set. ``additive``: ``count_tokens`` adds up over whitespace (the count of lines joined by
    newlines, or of whole words, is the sum of theirs, as for WordPiece), so a chunk of whole lines
    or words is not counted again (see the module docstring).
    """
    return _Chunker(
        text, count_tokens, max_tokens, target_tokens, chat_overlap, chat_chars, additive
    ).run()
