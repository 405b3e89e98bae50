"""Search stage 2, one ranking: channel scores mapped and fused (weighted or RRF) with the
keyword channel's coordination credit, document evidence, and the literal and name boosts of the
query's shape.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from recalld.config import Config
from recalld.index.store import ChunkRow, Store
from recalld.ingest.front_matter import context_names
from recalld.retrieval import channel_fill, doc_evidence, fusion, note_units, rank_fusion
from recalld.retrieval.query_shape import (
    QueryShape,
    boosted,
    index_names,
    is_long_prose,
    literal_share,
    normalise_name,
)
from recalld.retrieval.search_channels import ChannelHits

#: Keyword hits whose text tells whether a query term is a name (index_names).
NAME_HITS = 10


@dataclass
class Ranking:
    """The fused candidates, best first, with what explains them."""

    fused: list[fusion.Fused]
    rows: dict[int, ChunkRow]
    mode: str  # the mode the answer reports
    method: str  # weighted | rrf | keyword only | vector only
    weights: tuple[float, float]  # vector, keyword
    no_vector: set[int]  # keyword-only chunks by policy (no vector to miss)
    notes: dict[int, dict[str, Any]] | None  # per chunk, for --explain
    candidates: tuple[int, int]  # how many hits each channel gave: vector, keyword
    shape_weights: tuple[float, float]  # the query shape's, before the score-gap raise


def rank(
    hits: ChannelHits,
    requested_mode: str,
    store: Store,
    shape: QueryShape | None,
    cfg: Config,
    explain: bool,
) -> Ranking:
    """Fuse the channels into one list (see docs/DECISIONS.md for each step's measurements)."""
    kw, coverage = hits.keyword_scores, hits.coverage  # coordination ran with the channels
    vs = fusion.cosine_scores(hits.vector)
    rows = store.chunks(set(kw) | set(vs))
    # Keyword-only chunks (no vector by policy) are not chunks the vector channel rejected.
    no_vector = {cid for cid in kw if cid in rows and not rows[cid].embed}
    shape = _named_by_index(shape, hits, rows, cfg)
    # A channel whose best hit stands clear gets more say for this query.
    by_shape = channel_weights(shape, cfg)
    weights = rank_fusion.gap_weights(vs, kw, by_shape, cfg.float("search.gap_confidence"))
    # ... and the keyword channel less when none of its hits holds what the query asks.
    weights = rank_fusion.coverage_weights(
        weights, coverage, cfg.float("search.coverage_confidence")
    )
    share = blend_share(shape, cfg)
    fused, method = _fuse(hits, vs, kw, no_vector, weights, cfg, share)
    if cfg.float("search.note_units") > 0 and method == "weighted":
        fused = _pooled(
            vs,
            kw,
            lambda pv, pk: _fuse(hits, pv, pk, no_vector, weights, cfg, 0.0)[0],
            cfg,
            store,
            rows,
            fused,
        )
    fused = [f for f in fused if f.chunk_id in rows]
    places = {cid: (row.path, row.start_line, row.end_line) for cid, row in rows.items()}
    fused = doc_evidence.add_up(fused, places, cfg.float("search.doc_evidence"))[0]
    notes: dict[int, dict[str, Any]] | None = None
    if explain:
        notes = _channel_notes(fused, hits)
        for cid, share in coverage.items():
            if cid in notes:
                notes[cid]["coordination"] = round(share, 4)  # rare-term share held
    fused = _boost(fused, rows, shape, cfg, notes)
    mode = _answer_mode(hits, requested_mode)
    counts = (
        len(channel_fill.own(hits.vector, hits.filled[0])),
        len(channel_fill.own(hits.keyword, hits.filled[1])),
    )
    return Ranking(fused, rows, mode, method, weights, no_vector, notes, counts, by_shape)


def _named_by_index(
    shape: QueryShape | None, hits: ChannelHits, rows: dict[int, ChunkRow], cfg: Config
) -> QueryShape | None:
    """``shape``, named if the keyword channel's best hits write one of its terms as a name.

    Read only where it decides something (a question without literals or a typed name, with
    ``search.unnamed_question_vector_weight`` on): a name typed in lower case still names.
    """
    if (
        shape is None
        or shape.named
        or shape.literals
        or shape.kind != "question"
        or (
            cfg.float("search.unnamed_question_vector_weight") <= 0
            and cfg.float("search.unnamed_question_blend") <= 0
        )
        or _long_weighted(shape, cfg)  # weighed as long prose, named or not
    ):
        return shape
    texts = (rows[cid].text for cid, _ in hits.keyword[:NAME_HITS] if cid in rows)
    return replace(shape, named=True) if index_names(shape.terms, texts) else shape


def _unnamed_question(shape: QueryShape, cfg: Config) -> bool:
    """A question with no literal that names nothing and is not weighed as long prose: it asks
    about a topic, with no name for BM25 to match exactly."""
    return (
        shape.kind == "question"
        and not shape.named
        and not shape.literals
        and not _long_weighted(shape, cfg)
    )


def _long_weighted(shape: QueryShape, cfg: Config) -> bool:
    """Whether ``shape`` takes ``search.long_query_vector_weight`` (channel_weights' first rule)."""
    return cfg.float("search.long_query_vector_weight") > 0 and is_long_prose(
        shape, cfg.int("search.long_query_words")
    )


def _answer_mode(hits: ChannelHits, requested: str) -> str:
    if hits.vector and hits.keyword:
        return "hybrid" if requested == "hybrid" else requested
    if hits.vector:
        return "vector" if requested == "vector" else requested
    return "keyword" if (requested != "hybrid" or not hits.run_vector) else "hybrid"


def _fuse(
    hits: ChannelHits,
    vs: dict[int, float],
    kw: dict[int, float],
    no_vector: set[int],
    weights: tuple[float, float],
    cfg: Config,
    share: float,
) -> tuple[list[fusion.Fused], str]:
    if not hits.vector:
        # Only the keyword channel answered: its own scores, so the floor keeps its best match.
        fused = [fusion.Fused(cid, s, None, s) for cid, s in kw.items()]
        fused.sort(key=lambda f: (-f.score, f.chunk_id))
        return fused, "keyword only"
    if not hits.keyword:
        fused = [fusion.Fused(cid, s, s, None) for cid, s in vs.items()]
        fused.sort(key=lambda f: (-f.score, f.chunk_id))
        return fused, "vector only"
    if cfg.str("search.fusion") == "rrf":
        fused = fusion.rrf(
            [c for c, _ in hits.vector],
            [c for c, _ in hits.keyword],
            vs,
            kw,
            k=cfg.int("search.rrf_k"),
            no_vector=no_vector,
        )
        return fused, "rrf"
    vw, tw = weights
    k = cfg.int("search.rrf_k")
    if cfg.str("search.fusion") == "wrrf":
        wrrf = rank_fusion.weighted_rrf(
            vs, kw, vector_weight=vw, text_weight=tw, k=k, no_vector=no_vector
        )
        return wrrf, "wrrf"
    minmax = cfg.str("search.score_norm") == "minmax"
    fused = fusion.weighted(
        vs, kw, vector_weight=vw, text_weight=tw, normalise=minmax, no_vector=no_vector
    )
    if share > 0:
        # The channels' ranks, equally weighted: what the weights of the score part leave out.
        ranks = rank_fusion.weighted_rrf(
            vs, kw, vector_weight=1.0, text_weight=1.0, k=k, no_vector=no_vector
        )
        return rank_fusion.blend(fused, ranks, share), "weighted+rrf"
    return fused, "weighted"


def _pooled(
    vs: dict[int, float],
    kw: dict[int, float],
    fuse: Callable[[dict[int, float], dict[int, float]], list[fusion.Fused]],
    cfg: Config,
    store: Store,
    rows: dict[int, ChunkRow],
    fused: list[fusion.Fused],
) -> list[fusion.Fused]:
    """Fusion again with each short note's chunks pooled (note_units' rule); a note's chunks
    then tie, and its best chunk of the plain fusion stays first among them."""
    notes = note_units.note_members(rows, set(vs) | set(kw), store)
    if not notes:
        return fused
    plain = {f.chunk_id: f.score for f in fused}
    share = min(cfg.float("search.note_units"), 1.0)
    pv, pk = note_units.pool(vs, notes, share), note_units.pool(kw, notes, share)
    again = fuse(pv, pk)  # the plain fusion of this query, over the pooled scores
    out = [fusion.Fused(f.chunk_id, f.score, vs.get(f.chunk_id), kw.get(f.chunk_id)) for f in again]
    out.sort(key=lambda f: (-f.score, -plain.get(f.chunk_id, 0.0), f.chunk_id))
    return out


def blend_share(shape: QueryShape | None, cfg: Config) -> float:
    """The share of equal-weight RRF mixed into weighted fusion for this query: ``rrf_blend``,
    or ``long_query_blend`` if larger and the query is long prose (query_shape's rule), or
    ``unnamed_question_blend`` if larger and it is a question that names nothing."""
    share = cfg.float("search.rrf_blend")
    if is_long_prose(shape, cfg.int("search.long_query_words")):
        share = max(share, cfg.float("search.long_query_blend"))
    elif shape is not None and _unnamed_question(shape, cfg):
        share = max(share, cfg.float("search.unnamed_question_blend"))
    return min(max(share, 0.0), 1.0)


def channel_weights(shape: QueryShape | None, cfg: Config) -> tuple[float, float]:
    """(vector, keyword) weights for a query of this shape (query_shape's rule; a long prose
    query's are ``search.long_query_vector_weight``'s when that is set)."""
    if shape is None or shape.kind == "mixed":
        return cfg.float("search.vector_weight"), cfg.float("search.text_weight")
    vw = cfg.float(f"search.{shape.kind}_vector_weight")
    if _long_weighted(shape, cfg):
        vw = cfg.float("search.long_query_vector_weight")  # a long description, as a statement
    elif (plain_vw := cfg.float("search.unnamed_question_vector_weight")) > 0 and (
        _unnamed_question(shape, cfg)
    ):
        vw = plain_vw  # a topic asked about, no name for BM25 to match exactly
    vw = min(max(vw, 0.0), 1.0)
    return vw, 1.0 - vw


def _name_of(row: ChunkRow) -> list[str]:
    """The normalised file stem, document title and aliases of a chunk (for the name boost)."""
    base = row.path.rsplit("/", 1)[-1]
    stem = base.rsplit(".", 1)[0] if "." in base[1:] else base
    return [normalise_name(n) for n in (stem, *context_names(row.context))]


def _channel_notes(fused: list[fusion.Fused], hits: ChannelHits) -> dict[int, dict[str, Any]]:
    """Per chunk: each channel's rank and mapped score, and the fused score (for --explain).
    A score the channel gave only because the other channel found the chunk has no rank."""
    own_vector = channel_fill.own(hits.vector, hits.filled[0])
    own_keyword = channel_fill.own(hits.keyword, hits.filled[1])
    vrank = {cid: r for r, (cid, _) in enumerate(own_vector, 1)}
    krank = {cid: r for r, (cid, _) in enumerate(own_keyword, 1)}
    notes: dict[int, dict[str, Any]] = {}
    for f in fused:
        notes[f.chunk_id] = {
            "vector": None
            if f.vector is None
            else {"rank": vrank.get(f.chunk_id), "score": round(f.vector, 6)},
            "keyword": None
            if f.keyword is None
            else {"rank": krank.get(f.chunk_id), "score": round(f.keyword, 6)},
            "fused": round(f.score, 6),
        }
    return notes


def _boost(
    fused: list[fusion.Fused],
    rows: dict[int, ChunkRow],
    shape: QueryShape | None,
    cfg: Config,
    notes: dict[int, dict[str, Any]] | None,
) -> list[fusion.Fused]:
    """Literal and name boosts of query_shape's rule; returns the list re-sorted."""
    if shape is None:
        return fused
    lit_b, name_b = cfg.float("search.literal_boost"), cfg.float("search.name_boost")
    out: list[fusion.Fused] = []
    named_ids: set[int] = set()
    changed = False
    for f in fused:
        row = rows[f.chunk_id]
        score = f.score
        share = literal_share(shape.literals, row.text) if lit_b > 0 and shape.literals else 0.0
        if share:
            score = boosted(score, lit_b * share)
        named = name_b > 0 and shape.name in _name_of(row)
        if named:
            score = boosted(score, name_b)
            named_ids.add(f.chunk_id)
        if score != f.score:
            changed = True
            f = fusion.Fused(f.chunk_id, score, f.vector, f.keyword)
            if notes is not None:
                notes[f.chunk_id]["boosts"] = {"literal": round(share, 3), "name": named}
        out.append(f)
    if changed:
        # Stable: among equal scores a name match goes first, then the fused order stays.
        out.sort(key=lambda f: (-f.score, f.chunk_id not in named_ids))
    return out
