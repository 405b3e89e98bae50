"""What the ``recalld`` command prints: search hits, lines, status, sync reports.

Both paths use it: the full CLI (in-process or through the daemon) and the fast path of
:mod:`recalld.surfaces.cli_fast`, so their output is identical. It imports nothing heavy.
"""

from __future__ import annotations

import sys
import time

from recalld.surfaces.filter_options import STALE_NOTE
from recalld.surfaces.terminal_text import visible

TYPE_CHECKING = False  # mypy takes it as true; the fast CLI path does not import typing
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


def _json(obj: Any, **kw: Any) -> str:
    import json  # only --json needs it: the fast path's text answers do not pay for it

    return json.dumps(obj, ensure_ascii=False, **kw)


def pending_note(res: Mapping[str, Any]) -> str | None:
    """The short note of a search answer while vectors are being filled in (CLI and MCP)."""
    pending = res.get("vectors_pending")
    if not isinstance(pending, int) or pending <= 0:
        return None
    return f"{pending:,} chunks still wait for vectors: they are matched by keyword only for now"


def print_search(res: dict[str, Any], as_json: bool, max_tokens: int | None = None) -> None:
    if max_tokens is not None:
        # Fitted here, on the text printed (stdout and stderr), not on the daemon's JSON.
        from recalld.retrieval.answer_budget import fit_rendered

        def render(results: list[dict[str, Any]], report: dict[str, Any]) -> str:
            out, err = search_text({**res, "results": results, "budget": report}, as_json)
            return out + err

        res["budget"] = fit_rendered(res.get("results", []), max_tokens, render)
    out, err = search_text(res, as_json)
    sys.stdout.write(out)
    sys.stdout.flush()
    sys.stderr.write(err)


def search_text(res: dict[str, Any], as_json: bool) -> tuple[str, str]:
    """What ``search`` prints: (stdout, stderr); the text's control characters shown escaped."""
    if as_json:
        return _json(res) + "\n", ""
    out: list[str] = []
    err: list[str] = []
    if res.get("degraded"):
        err.append(f"note: {res['degraded']}")
    if note := pending_note(res):
        err.append(f"note: {note}")
    results = res.get("results", [])
    if not results and (floor := res.get("under_floor")):
        out.append(
            f"no results over the score floor {floor['min_score']:g}: {floor['candidates']} "
            f"candidates scored under it (best {floor['best_score']:.3f}); "
            f"`--min-score {floor['see_with']:g}` shows them"
        )
    elif not results:
        out.append("no results")
    for i, r in enumerate(results, 1):
        sc = r.get("scores") or {}
        parts = [
            f"{name} {sc[name]:.2f}" for name in ("vector", "keyword") if sc.get(name) is not None
        ]
        what = r["source"] if r.get("kind") in (None, "note") else f"{r['source']} {r['kind']}"
        what += f" {r['tool']}" if r.get("tool") else ""
        out.append(
            f"{i}. {r['citation']}  score {r['score']:.3f} ({', '.join(parts)}) [{what}]"
            + (f" {r['date'][:10]}" if r.get("date") else "")
            + (f" {STALE_NOTE}" if r.get("stale") else "")
        )
        out.extend(f"   also at {p['citation']} [{p['source']}]" for p in r.get("also", []))
        if "explain" in r:
            out.append(f"   explain: {explain_line(r['explain'])}")
        # The whole snippet (the daemon caps it at 700 characters; --max-tokens trims it): the
        # first four lines of 160 characters hid the line that matched, or most of a paragraph.
        out.extend(f"   {line}" for line in r["snippet"].splitlines())
    if "explain" in res:
        out.append(_answer_explain(res["explain"]))
    if "budget" in res:  # one short line: it counts against the budget too
        b = res["budget"]
        err.append(
            f"-- {res.get('mode')} · budget {b['max_tokens']}: ~{b['used_tokens']} used, "
            f"{b['snippets_trimmed']} trimmed, {b['dropped']} dropped" + _over_budget(res, b)
        )
    else:
        err.append(f"-- {res.get('mode')} · {res.get('provider')} · {res.get('took_ms')} ms")
    # Snippets, citations and tool names quote notes, transcripts and file names: a control
    # character in them (ESC, BEL) is shown, not obeyed by the terminal.
    return visible("".join(f"{line}\n" for line in out)), visible(
        "".join(f"{line}\n" for line in err)
    )


def _answer_explain(e: Mapping[str, Any]) -> str:
    """The answer-wide --explain lines: shape, fusion, the weights it got (and its shape's)."""
    w, by_shape = e.get("weights", {}), e.get("shape_weights")
    raised = f" (the shape's {by_shape['vector']} / {by_shape['keyword']})" if by_shape else ""
    return (
        f"-- query shape {e.get('shape')} ({e.get('prose_words', 0)} prose words), fusion "
        f"{e.get('fusion')}, weights vector {w.get('vector')} / keyword {w.get('keyword')}"
        f"{raised if by_shape != w else ''}, literals {e.get('literals')}, "
        f"candidates {e.get('candidates')}\n-- match: {e.get('match')}"
    )


def _over_budget(res: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """Why an answer is over its budget: the smallest one (best snippet kept) is bigger."""
    if b["used_tokens"] <= b["max_tokens"]:
        return ""
    if "explain" in res:
        return " (over it: the --explain lines alone do not fit; drop --explain or raise it)"
    return " (over it: the best result cannot be trimmed further; raise --max-tokens)"


def explain_line(e: dict[str, Any]) -> str:
    """One line of a result's explanation: channel ranks and scores, boosts, final score."""
    parts = []
    for name in ("vector", "keyword"):
        ch = e.get(name)
        if not ch:
            parts.append(f"{name} -")
        else:  # no rank: scored because the other channel found it (retrieval.channel_fill)
            rank = f"#{ch['rank']}" if ch.get("rank") else "(unranked)"
            parts.append(f"{name} {rank} {ch['score']:.3f}")
    parts.append(f"fused {e.get('fused', 0):.3f}")
    boosts = e.get("boosts")
    if boosts:
        parts.append(
            f"literal {boosts['literal']:.2f}" + (", name match" if boosts["name"] else "")
        )
    if "recency" in e:
        parts.append(f"recency x{e['recency']:.3f}")
    if e.get("collapsed"):
        parts.append(f"{e['collapsed']} duplicates collapsed")
    parts.append(f"final {e.get('final', 0):.3f}")
    floor = e.get("floor")
    if floor:  # why a score under the floor is shown (docs/DECISIONS.md)
        parts.append(f"kept: {floor['why']}")
        if e.get("final", 0) < floor["min_score"] and e.get("recency", 1) < 1:
            parts.append("recency lowered it after the floor")
    return ", ".join(parts)


def print_get(res: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(_json(res))
        return
    sys.stdout.write(visible(res["text"]) + ("\n" if res["text"] else ""))


def degraded_line(res: dict[str, Any]) -> str:
    """Why vector search is off, and whether the shared store is out of searches."""
    local = res.get("degraded")
    shared = res.get("shared") or {}
    if not (shared.get("on") and shared.get("reachable") is False):
        return str(local or "no")
    out = "shared store unreachable: searches answer from this machine only (see shared: below)"
    return f"{local}; {out}" if local else out


def print_status(res: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(_json(res, default=str))
        return
    counts = res.get("counts", {})
    last = res.get("last_sync")
    from recalld.surfaces.overview import status_head

    lines = [
        *status_head(res),  # where notes live and what is watched, first
        f"state:     {res.get('state')} ({daemon_line(res.get('daemon'))})",
        f"provider:  {res.get('provider')} — {res.get('provider_reason')}",
        f"degraded:  {degraded_line(res)}",
        f"files:     {counts.get('files', 0)} ({counts.get('memory_files', 0)} memory, "
        f"{counts.get('session_files', 0)} sessions)",
        f"chunks:    {counts.get('chunks', 0)} ({counts.get('vectors', 0)} with vectors, "
        f"{_by_policy(counts)} keyword-only by policy, "
        f"{counts.get('cached_embeddings', 0)} cached embeddings{_held_whole(counts)})",
        f"last sync: {when(last)}",
    ]
    if res.get("shared"):
        lines.extend(shared_lines(res["shared"]))
    vec = res.get("vectors") or {}
    if vec.get("vectors_pending"):
        lines.append(
            f"vectors:   {vec['vectors_pending']:,} of {vec.get('vectors_total', 0):,} chunks "
            "still wait for one (searchable by keyword meanwhile)"
        )
    tr = res.get("transcripts") or {}
    if tr.get("files"):
        lines.append(
            f"sessions:  {tr['files']} transcripts, {tr['messages']} messages, "
            f"{tr['skipped_lines']} malformed lines skipped"
        )
    red = res.get("redactions") or {}
    if red.get("indexed", {}).get("total") or red.get("served", {}).get("total"):
        lines.append(
            f"redacted:  {red['indexed']['total']} secrets indexed, {red['served']['total']} "
            "in get answers (since the daemon started)"
        )
    if started := started_line(res.get("daemon")):
        lines.append(started)
    if res.get("forgotten"):
        lines.append(
            f"forgotten: {res['forgotten']} path(s), session(s) or project(s) kept out "
            "(`recalld forget --list`)"
        )
    lines.extend(skipped_lines(res))
    if res.get("last_error"):
        lines.append(f"error:     {res['last_error']}")
    lines.extend(f"warning:   {w}" for w in res.get("warnings") or [])
    print(visible("\n".join(lines)))  # paths and errors may quote a file name's control chars


SKIPPED_SHOWN = 5  # skipped files named in the text status (--json lists up to 100)


def _by_policy(counts: Mapping[str, Any]) -> int:
    """Keyword-only chunks by policy: not the notes held whole until they are chunked."""
    return int(counts.get("keyword_only_chunks", 0)) - int(counts.get("provisional_files", 0))


def _held_whole(counts: Mapping[str, Any]) -> str:
    """``, 9,000 notes held whole until chunked`` during a big first sync's first seconds."""
    held = int(counts.get("provisional_files", 0))
    return f", {held:,} notes held whole until chunked" if held else ""


def skipped_lines(res: dict[str, Any]) -> list[str]:
    """The files the last sync could not index, the first few by name with why."""
    total = int(res.get("skipped_total") or 0)
    if not total:
        return []
    lines = [f"skipped:   {_files(total)} not indexed"]
    lines.extend(
        f"           {item['path']}: {item['reason']}"
        for item in (res.get("skipped_files") or [])[:SKIPPED_SHOWN]
    )
    if total > SKIPPED_SHOWN:
        lines.append(f"           ... {total - SKIPPED_SHOWN} more (`recalld status --json`)")
    return lines


def _files(n: int) -> str:
    return f"{n:,} file{'s' if n != 1 else ''}"


def shared_lines(shared: dict[str, Any]) -> list[str]:
    """The shared store in ``status``: on or off and why, what waits, the last failure."""
    if not shared.get("on"):
        return [f"shared:    off: {shared.get('why')}"]
    push = shared.get("push") or {}
    team = f", team {shared['team']}" if shared.get("team") else ""
    lines = [f"shared:    {shared.get('collection')} at {shared.get('url')}{team}"]
    waits = [
        f"{_files(push.get('pushed', 0))} pushed",
        f"{push.get('waiting', 0)} waiting",
    ]
    if push.get("waiting_for_vectors"):
        waits.append(f"{push['waiting_for_vectors']} waiting for their vectors")
    if push.get("unmerged_vectors"):
        waits.append(f"{push['unmerged_vectors']:,} vectors still to merge into the store's graph")
    lines.append("           " + ", ".join(waits))
    reachable = shared.get("reachable")  # asked at the status (absent from older daemons)
    if reachable is False or (reachable is None and push.get("reachable") is False):
        why = shared.get("unreachable") or push.get("last_error") or "no answer"
        retry = push.get("retry_in_s") or 0
        when = f"retrying in {retry:g} s; " if retry else ""
        lines.append(
            f"           {unreachable_line(why)} ({when}searches answer from this machine "
            "meanwhile; nothing is lost, the difference is pushed when it is back)"
        )
    elif push.get("reachable") is False:
        lines.append(
            f"           the store answers again; the last push failed ({push.get('last_error')})"
            " and is retried now"
        )
    if push.get("graph_outdated"):
        lines.append(
            "           the store's vector graph is an older build (recall@10 about 0.95 at a "
            "million vectors): an administrator's `recalld shared init` rebuilds it"
        )
    if shared.get("search_error"):
        lines.append(f"           last search of the store failed: {shared['search_error']}")
    return lines


def unreachable_line(why: str) -> str:
    """Why the shared store did not answer, "shared store unreachable" said once."""
    return why if why.startswith("shared store") else f"shared store unreachable: {why}"


def started_line(daemon: Any) -> str | None:
    """How a daemon started on demand (by ``recalld mcp``, a hook) will end, else None."""
    if not isinstance(daemon, dict) or not daemon.get("on_demand"):
        return None
    stop = daemon.get("idle_stop") or {}
    after = stop.get("after_s")
    idle = f"idle {stop.get('idle_s')} s"
    end = (
        f"stops after {after:g} s without a request ({stop.get('key')}; {idle})"
        if after
        else f"keeps running ({stop.get('key')} = 0)"
    )
    return f"started:   on demand by recalld {daemon.get('started_by')}; {end}"


def daemon_line(daemon: Any) -> str:
    if isinstance(daemon, dict):
        paused = ", watching paused" if daemon.get("paused") else ""
        return (
            f"daemon pid {daemon.get('pid')}, up {daemon.get('uptime_s')} s, "
            f"{daemon.get('pending', 0)} pending{paused}{_helper_part(daemon.get('search_helper'))}"
        )
    return "daemon not running; answered in-process"


def _helper_part(helper: Any) -> str:
    """The search helper, when it runs or failed (nothing while idle or off)."""
    if not isinstance(helper, dict):
        return ""
    state = helper.get("state")
    if state == "ready":
        return f"; search helper pid {helper.get('pid')}, {helper.get('searches', 0)} searches"
    if state == "starting":
        return "; search helper starting"
    if state == "failed":
        return f"; search helper off after failures ({helper.get('last_error')})"
    return ""


def when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "never"


def print_json_or(res: dict[str, Any], as_json: bool, what: str) -> None:
    if as_json:
        print(_json(res, default=str))
        return
    print(visible(describe_sync_report(res, what)))
    report = report_of(res)
    if report.get("embed_error"):
        print(visible(f"warning: embedding failed: {report['embed_error']}"), file=sys.stderr)


def report_of(res: dict[str, Any]) -> dict[str, Any]:
    """The report inside a daemon's answer, or the in-process report itself."""
    inner = res.get("report")
    return inner if isinstance(inner, dict) else res


def _up_to_date(n: dict[str, int], sessions: object) -> bool:
    """Nothing changed, nothing to come, and there were notes to look at."""
    quiet = not any(n.get(k) for k in ("files_changed", "files_removed", "chunks_written"))
    new_messages = isinstance(sessions, dict) and sessions.get("messages")
    return quiet and n.get("files_unchanged", 0) > 0 and not new_messages


def _count(n: int, noun: str) -> str:
    """``1 chunk``, ``2 chunks``, ``1,200 chunks``."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def describe_sync_report(res: dict[str, Any], what: str = "sync") -> str:
    """A sentence for a ``sync`` / ``reindex`` answer: an in-process report, or the daemon's
    ``{"queued": ..., "job": ..., "report": ...}``."""
    if res.get("queued"):
        return (
            f"{what} queued: the daemon runs it in the background "
            "(`recalld status --watch` shows its progress, `--wait` waits for it)"
        )
    report = report_of(res)
    if "files_changed" not in report:
        return f"{what} done"
    n = {k: int(v) for k, v in report.items() if isinstance(v, int) and not isinstance(v, bool)}
    # An older daemon's report has no files_checked: what it listed plus what it removed.
    files = n.get("files_checked", n.get("files_seen", 0) + n.get("files_removed", 0))
    text = (
        f"{what} done in {report.get('seconds', 0)} s: {_count(files, 'note file')} checked, "
        f"{n.get('files_changed', 0):,} changed, {n.get('files_unchanged', 0):,} unchanged, "
        f"{n.get('files_removed', 0):,} removed, {n.get('files_skipped', 0):,} skipped; "
        f"{_count(n.get('chunks_written', 0), 'chunk')} written, "
        f"{n.get('chunks_embedded', 0):,} embedded"
    )
    sessions = report.get("sessions")
    if isinstance(sessions, dict) and sessions.get("files"):
        text += (
            f"; {_count(sessions['files'], 'transcript')} checked, "
            f"{_count(sessions.get('messages', 0), 'new message')}, "
            f"{_count(sessions.get('chunks_written', 0), 'chunk')}"
        )
    if _up_to_date(n, sessions):
        # After `recalld start` the daemon has indexed everything before a first `sync --wait`
        # asks: "0 changed, 6 unchanged" read as if nothing had been indexed at all.
        text += "; the index was already up to date (the daemon indexes notes as they change)"
    if n.get("files_deferred"):
        text += f"; {n['files_deferred']:,} big notes are still being chunked in the background"
    if report.get("vectors_pending"):
        text += "; some chunks still wait for vectors (found by keyword until then)"
    return text + "."
