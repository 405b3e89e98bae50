"""Conversation windows: chat-shaped notes are scored and shown as windows of whole turns.

On a chat the question's words sit in one turn and the answer often in the next, so a chunk cut
by size alone splits the pair. A note is *chat-shaped* when its content says so (see
:func:`speaker_turns`): most of its body lines open with a speaker label (``**Ann**: hi``,
``Ann: hi``, ``- [10:02] Ann: hi``), at least two speakers take several turns each, and the
speaker changes often. Such a note is chunked into windows of whole turns that overlap, so every
pair of adjacent turns shares at least one window that both channels score
(:func:`turn_windows`). A hit on a window is shown as the turns around its best turn that fit
the snippet budget, and its line range is exactly those turns (:func:`focus`).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from recalld.index.store import ChunkRow

__all__ = ["Focus", "Unit", "focus", "focus_result", "is_turn", "speaker_turns", "turn_windows"]

# A speaker label at the start of a line: optional list/quote mark, optional [time], the name
# (1-4 words, optionally bold), a colon, then text.
_SPEAKER = re.compile(
    r" {0,3}(?:[-*+>] +)?(?:\[[^\]\n]{1,40}\] *)?(?:\*\*|__)?"
    r"(?P<name>[A-Za-z][\w'.-]{0,30}(?: [\w'.-]{1,30}){0,3}?)"
    r"(?:\*\*|__)? *:(?:\*\*|__)? +\S"
)
_WORD = re.compile(r"[^\W_]+")
#: Fewest turns, and fewest turns of each of two speakers, for a note to be chat-shaped.
MIN_TURNS = 4
MIN_TURNS_EACH = 2
#: Share of the body lines (non-blank, not headings) that open a turn or continue one.
MIN_TURN_SHARE = 0.6
#: Share of adjacent turn pairs where the speaker changes.
MIN_ALTERNATION = 0.3
#: A chat has few speakers for its turns (of those with two turns or more, at most one per
#: this many turns; two always allowed)
#: and says sentences. Records of ``Key: value`` lines have many keys and short values.
TURNS_PER_SPEAKER = 4
MIN_MEAN_TURN_CHARS = 24


def _speaker(line: str) -> str | None:
    if ":" not in line:  # a label ends in one: most prose lines are out at C speed
        return None
    m = _SPEAKER.match(line)
    return m.group("name").lower() if m else None


def is_turn(line: str) -> bool:
    """Whether ``line`` opens a speaker turn."""
    return _SPEAKER.match(line) is not None


def _is_heading(line: str) -> bool:
    return line.lstrip(" ").startswith("#")


def speaker_turns(lines: Sequence[str]) -> list[tuple[int, int]] | None:
    """The turns of a chat-shaped text as 0-based inclusive line ranges, or None if not a chat.

    A turn is a line with a speaker label plus the non-blank, non-heading lines that follow it.
    Blank lines and headings end a turn.
    """
    turns: list[tuple[int, int]] = []
    speakers: list[str] = []
    body = 0
    in_turn = 0  # body lines that open or continue a turn
    for i, line in enumerate(lines):
        if not line.strip() or _is_heading(line):
            if turns and turns[-1][1] == -1:
                turns[-1] = (turns[-1][0], i - 1)
            continue
        body += 1
        name = _speaker(line)
        if name is not None:
            if turns and turns[-1][1] == -1:
                turns[-1] = (turns[-1][0], i - 1)
            turns.append((i, -1))
            speakers.append(name)
            in_turn += 1
        elif turns and turns[-1][1] == -1:
            in_turn += 1
    if turns and turns[-1][1] == -1:
        turns[-1] = (turns[-1][0], len(lines) - 1)
    if len(turns) < MIN_TURNS or in_turn < MIN_TURN_SHARE * body:
        return None
    counts: dict[str, int] = {}
    for name in speakers:
        counts[name] = counts.get(name, 0) + 1
    if sum(1 for n in counts.values() if n >= MIN_TURNS_EACH) < 2:
        return None
    if sum(1 for n in counts.values() if n > 1) > max(2, len(turns) // TURNS_PER_SPEAKER):
        return None
    changes = sum(1 for a, b in itertools.pairwise(speakers) if a != b)
    if changes < MIN_ALTERNATION * (len(speakers) - 1):
        return None
    chars = sum(len(lines[a]) for a, _ in turns)
    if chars < MIN_MEAN_TURN_CHARS * len(turns):
        return None
    return turns


@dataclass(frozen=True, slots=True)
class Unit:
    """A run of lines packed whole into windows (a turn, or a block between turns)."""

    line0: int  # 0-based, inclusive
    line1: int
    tokens: int
    chars: int = 0


def turn_windows(
    units: Sequence[Unit], target: int, overlap: float, max_chars: int = 0
) -> list[tuple[int, int]]:
    """Windows over ``units`` as (first, last) unit indexes, inclusive.

    Each window takes whole units while they fit in ``target`` tokens and, when ``max_chars``
    is set, in that many characters (a unit over either stands alone). The next window starts
    at the earliest unit such that the units it shares with this one hold at most ``overlap``
    of this window's tokens, and always one unit later at least, so that every pair of
    adjacent units shares a window when ``overlap`` > 0. Windows depend only on the units
    before and in them: appended turns never change an earlier window.
    """
    out: list[tuple[int, int]] = []
    n = len(units)
    start = 0
    room = max_chars if max_chars > 0 else 1 << 62
    while start < n:
        end, size, chars = start, units[start].tokens, units[start].chars
        while (
            end + 1 < n
            and size + units[end + 1].tokens <= target
            and chars + 1 + units[end + 1].chars <= room
        ):
            end += 1
            size += units[end].tokens
            chars += 1 + units[end].chars
        out.append((start, end))
        if end == n - 1:
            break
        nxt, shared, share = end + 1, 0, max(overlap, 0.0) * size
        while nxt - 1 > start and shared + units[nxt - 1].tokens <= share:
            nxt -= 1
            shared += units[nxt].tokens
        start = nxt
    return out


@dataclass(frozen=True, slots=True)
class Focus:
    """The lines of a hit to show: offsets into its text's lines, inclusive, and their text."""

    first: int
    last: int
    text: str


def _turn_scores(turn_texts: Sequence[str], terms: Sequence[str]) -> list[float]:
    """Per turn, the query terms it holds, each weighted by how few of the window's turns do
    (a speaker's name that labels every turn counts for little)."""
    words = [set(_WORD.findall(t.lower())) for t in turn_texts]
    wanted = [t for t in dict.fromkeys(terms) if t]
    weight: dict[str, float] = {}
    for t in wanted:
        df = sum(1 for w in words if t in w)
        weight[t] = math.log(1 + len(words) / df) if df else 0.0
    return [sum(weight[t] for t in wanted if t in w) for w in words]


def focus(text: str, terms: Sequence[str], limit: int) -> Focus | None:
    """The whole turns of a chat window to show within ``limit`` characters, or None.

    None when the text is not a run of turns (or its best turn alone is over ``limit``); all of
    it when it fits. The shown turns start at the turn with the most query terms and take the
    turns after it while they fit (the reply usually answers it), then the turns before it.
    """
    lines = text.split("\n")
    turns = _chunk_turns(lines)
    if turns is None:
        return None
    if len(text) <= limit:
        return Focus(0, len(lines) - 1, text)
    texts = ["\n".join(lines[a : b + 1]) for a, b in turns]
    sizes = [len(t) for t in texts]
    scores = _turn_scores(texts, terms)
    best = max(range(len(turns)), key=lambda i: (scores[i], -i))
    if sizes[best] > limit:
        return None
    lo = hi = best
    used = sizes[best]
    while hi + 1 < len(turns) and used + 1 + sizes[hi + 1] <= limit:
        hi += 1
        used += 1 + sizes[hi]
    while lo > 0 and used + 1 + sizes[lo - 1] <= limit:
        lo -= 1
        used += 1 + sizes[lo]
    a, b = turns[lo][0], turns[hi][1]
    while b > a and not lines[b].strip():
        b -= 1  # a unit ends with the blank lines before the next turn
    return Focus(a, b, "\n".join(lines[a : b + 1]))


def _chunk_turns(lines: Sequence[str]) -> list[tuple[int, int]] | None:
    """A chat window's lines as units that tile it: any lines before the first turn, then each
    turn with the lines up to the next one. None unless the window itself reads as a chat (by
    :func:`speaker_turns`): a page with a ``See also:`` and a ``More information:`` line is not.
    """
    turns = speaker_turns(lines)
    if turns is None:
        return None
    opens = [a for a, _ in turns]
    units = [(0, opens[0] - 1)] if opens[0] > 0 else []
    for j, a in enumerate(opens):
        units.append((a, opens[j + 1] - 1 if j + 1 < len(opens) else len(lines) - 1))
    return units


def focus_result(res: dict[str, Any], row: ChunkRow, terms: Sequence[str], limit: int) -> bool:
    """Show a chat window's hit (a search result) as its focused turns, cited line for line.

    Returns whether the hit is a run of turns (shown whole when it fits).
    """
    if row.kind != "note":
        return False  # a transcript chunk's lines are rendered messages, not file lines
    shown = focus(row.text, terms, limit)
    if shown is None:
        return False
    start, end = row.start_line + shown.first, row.start_line + shown.last
    res.update(
        start_line=start,
        end_line=end,
        snippet=shown.text,
        citation=f"{row.path}#L{start}-L{end}",
    )
    return True
