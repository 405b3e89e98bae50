"""A note's names and context from its front matter (``chunking.front_matter``).

Obsidian, Hugo, Jekyll and most static-site tools put a note's own name and summary in a YAML
block at the top of the file::

    ---
    title: About Hugo
    aliases: [/about-hugo/, Hugo overview]
    description: Learn about Hugo and its features.
    tags: [docs, intro]
    ---

(or the same in TOML between ``+++`` lines, as Hugo allows; ``tomllib`` reads it).
``title`` and ``aliases`` (``alias``) are the note's *names*: a query equal to one of them
means that note (the name boost of :mod:`recalld.retrieval.search`). ``description``, ``tags``
(``tag``) and ``keywords`` are its *context*. The indexer puts both into the FTS ``context`` column
of the note's first chunk (its *card*, see :func:`card_context`); the block's lines stay in that
chunk's text, so citations and ``get`` keep their exact line ranges.

PyYAML reads a YAML block when it is importable (tokenizers' huggingface_hub brings it);
otherwise a small reader handles the forms these keys take in practice (``key: value``, quoted
strings, ``[a, b]`` lists, ``- item`` lists, ``>``/``|`` blocks). Bad front matter never stops
indexing: the note is indexed as plain text and :attr:`FrontMatter.error` says why.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FrontMatter",
    "card_context",
    "context_names",
    "front_matter_end",
    "read_front_matter",
]

#: A bigger block is not parsed (pathological YAML must not cost the writer seconds).
MAX_BLOCK_CHARS = 64_000
#: Bounds on what one note contributes to its card, so a huge list cannot bloat the index.
MAX_VALUE_CHARS = 500
MAX_ITEMS = 50

_CLOSERS = {"---": ("---", "..."), "+++": ("+++",)}
_NAME_KEYS = ("aliases", "alias")
_TAG_KEYS = ("tags", "tag", "keywords")
_SCALAR = str | int | float  # bool is an int; dates come back as date objects (str() below)


@dataclass(frozen=True)
class FrontMatter:
    """What a note's front matter says about it (empty fields when it says nothing)."""

    title: str = ""
    aliases: tuple[str, ...] = ()
    description: str = ""
    tags: tuple[str, ...] = ()
    error: str | None = None  # why the block could not be read (the note is indexed as text)

    @property
    def empty(self) -> bool:
        return not (self.title or self.aliases or self.description or self.tags)


def front_matter_end(lines: Sequence[str]) -> int | None:
    """0-based index of the line closing the front matter, or None when there is none.

    A YAML block starts with ``---`` on the first line and ends at the next ``---`` or
    ``...``; a TOML block (Hugo) starts and ends with ``+++``. The chunker uses the same rule,
    so the block is exactly the first chunk's lines.
    """
    first = lines[0].rstrip() if lines else ""
    ends = _CLOSERS.get(first)
    if ends is None:
        return None
    for j in range(1, len(lines)):
        if lines[j].rstrip() in ends:
            return j
    return None


def read_front_matter(text: str) -> FrontMatter | None:
    """The front matter of a note's text, or None when the note has none."""
    if not text.startswith(("---", "+++")):
        return None
    lines = text.split("\n")
    end = front_matter_end(lines)
    if end is None:
        return None
    block = "\n".join(ln.rstrip("\r") for ln in lines[1:end])
    if len(block) > MAX_BLOCK_CHARS:
        return FrontMatter(error=f"front matter of {len(block)} characters is not read")
    if text.startswith("+++"):
        try:
            data: Any = tomllib.loads(block)
        except tomllib.TOMLDecodeError as exc:
            return FrontMatter(error=f"front matter is not valid TOML ({exc})")
    else:
        try:
            data = _load(block)
        except Exception as exc:  # noqa: BLE001 - any YAML problem: index the note as text
            return FrontMatter(error=f"front matter is not valid YAML ({_yaml_problem(exc)})")
    if data is None:
        return FrontMatter()
    if not isinstance(data, dict):
        return FrontMatter(error="front matter is not a key: value mapping")
    return FrontMatter(
        title=_scalar(data.get("title")),
        aliases=_items(data, _NAME_KEYS, split=False),
        description=_scalar(data.get("description")),
        tags=_items(data, _TAG_KEYS, split=True),
    )


def _load(block: str) -> Any:
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:  # PyYAML comes with huggingface_hub (tokenizers); not declared by us
        return simple_yaml(block)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(block, Loader=loader)  # a safe loader: plain data only


def _yaml_problem(exc: Exception) -> str:
    """``line N: problem`` of a YAML error (N counts the file's lines), else its first line."""
    mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
    if mark is not None and problem:
        return f"line {int(mark.line) + 2}: {problem}"  # +1: 1-based, +1: the opening ---
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _scalar(value: Any) -> str:
    """A scalar as text; anything else (a list, a mapping) is no name.

    Never ``str()`` of a container: YAML anchors can make a small block a huge structure.
    """
    if value is None or isinstance(value, list | dict | set | tuple):
        return ""
    return " ".join(str(value).split())[:MAX_VALUE_CHARS]


def _items(data: dict[Any, Any], keys: tuple[str, ...], *, split: bool) -> tuple[str, ...]:
    """The values of a list-or-string key; tags also split on commas and spaces (Obsidian)."""
    out: dict[str, None] = {}
    for key in keys:
        value = data.get(key)
        values = value if isinstance(value, list) else [value]
        for item in values[:MAX_ITEMS]:
            text = _scalar(item)
            parts = re.split(r"[,\s]+", text) if split else [text]
            for part in parts:
                part = part.lstrip("#") if split else part
                if part:
                    out.setdefault(part)
    return tuple(out)[:MAX_ITEMS]


# -- the card: how names and context ride in the FTS context column ----------------------------


def card_context(head: str, fm: FrontMatter) -> str:
    """The context of a note's first chunk: ``head`` (title > headings), names, then context.

    One line per alias after ``head``; a blank line; then the description and the tags.
    :func:`context_names` reads the names back for the name boost.
    """
    names = [a for a in fm.aliases if "\n" not in a]
    rest = [fm.description, " ".join(fm.tags)]
    extra = "\n".join(names) + "\n\n" + "\n".join(r for r in rest if r)
    return head + "\n" + extra.rstrip("\n") if extra.strip() else head


def context_names(context: str) -> list[str]:
    """The title and aliases held in a chunk's context (see :func:`card_context`)."""
    lines = context.split("\n")
    names = [lines[0].split(" > ")[0]]
    for line in lines[1:]:
        if not line:
            break
        names.append(line)
    return names


# -- fallback reader ---------------------------------------------------------------------------

_KEY = re.compile(r"([A-Za-z_][\w-]*)[ \t]*:(?:[ \t]+(.*))?$")


def simple_yaml(block: str) -> dict[str, Any]:
    """Top-level ``key: value`` pairs of a YAML block, for the keys front matter uses.

    Values: plain or quoted scalars, flow lists ``[a, "b"]``, block lists (``- a``), and
    ``>``/``|`` block scalars (folded to one line). Nested mappings are skipped.
    """
    out: dict[str, Any] = {}
    lines = block.split("\n")
    i = 0
    while i < len(lines):
        m = _KEY.match(lines[i])
        i += 1
        if m is None:
            continue
        key, raw = m.group(1), (m.group(2) or "").strip()
        body: list[str] = []
        while raw.startswith("[") and not raw.endswith("]") and i < len(lines):
            raw += " " + lines[i].strip()  # a flow list over several lines
            i += 1
        while i < len(lines) and (not lines[i].strip() or lines[i][:1] in (" ", "\t", "-")):
            body.append(lines[i].strip())
            i += 1
        if raw.startswith("[") and raw.endswith("]"):
            out[key] = [_unquote(v) for v in _split_flow(raw[1:-1])]
        elif raw[:1] in (">", "|"):
            out[key] = " ".join(b for b in body if b)
        elif raw and not raw.startswith("#"):
            out[key] = _unquote(" ".join([raw, *[b for b in body if b]]))
        elif body and all(b.startswith("-") for b in body if b):
            out[key] = [_unquote(b[1:].strip()) for b in body if b]
        else:
            out[key] = None
    return out


def _split_flow(inner: str) -> list[str]:
    """Items of a flow list, commas inside quotes kept."""
    items = re.findall(r"\s*(?:\"(?:[^\"\\]|\\.)*\"|'(?:[^']|'')*'|[^,]+)", inner)
    return [i.strip() for i in items if i.strip()]


def _unquote(value: str) -> str:
    """A scalar without its quotes or trailing comment."""
    value = value.strip()
    quote = value[:1]
    end = value.rfind(quote, 1) if quote in ("'", '"') else -1
    if end > 0:
        inner = value[1:end]
        return inner.replace('\\"', '"') if quote == '"' else inner.replace("''", "'")
    return re.sub(r"(?:^|[ \t]+)#.*$", "", value)  # a comment
