"""The ``recalld`` command. The only place that turns exceptions into exit codes.

``search``, ``get`` and ``status`` use the running daemon when there is one and otherwise answer
in-process from the same index (read-only); ``sync`` without a daemon syncs in-process.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recalld import __version__, exit_codes
from recalld.config import Config
from recalld.errors import BadRequest, IndexError_, RecalldError
from recalld.vector_backfill import pending_note

# The table lives in recalld.exit_codes; these names stay for callers and tests.
EXIT_OK, EXIT_ERROR, EXIT_USAGE = exit_codes.OK, exit_codes.ERROR, exit_codes.USAGE
EXIT_NOT_FOUND, EXIT_UNAVAILABLE = exit_codes.NOT_FOUND, exit_codes.UNAVAILABLE
EXIT_CONFIG, EXIT_INDEX = exit_codes.CONFIG, exit_codes.INDEX
STATUS_CHECK_BUDGET_S = 5.0  # in-process `status` checks the index file for damage
_JSON_HELP = "print the answer as one JSON object"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="recalld",
        description="Always-on memory for local AI agents.",
        epilog=exit_codes.HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"recalld {__version__}")
    p.add_argument("--config", type=Path, help="config file (default: RECALLD_CONFIG or platform)")
    p.add_argument("-v", "--verbose", action="store_true", help="log more")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("serve", help="run the daemon in the foreground")

    s = sub.add_parser("search", help="hybrid search of memory and sessions")
    s.add_argument("query", nargs="+", help="what to look for: words, a question, identifiers")
    s.add_argument("--max", type=int, dest="max_results", help="results (default 6)")
    s.add_argument("--min-score", type=float, help="score floor (default 0.35)")
    s.add_argument(
        "--source",
        choices=["memory", "sessions"],
        action="append",
        dest="sources",
        help="only notes (memory) or only agent transcripts (sessions); repeat for both",
    )
    s.add_argument(
        "--path-prefix",
        metavar="FOLDER",
        help="only files under FOLDER (relative to the first memory folder, or absolute)",
    )
    s.add_argument(
        "--kind",
        choices=["note", "message", "tool_call", "tool_output"],
        action="append",
        dest="kinds",
        help="only this kind of content (repeatable)",
    )
    s.add_argument(
        "--mode",
        choices=["hybrid", "keyword", "vector"],
        default="hybrid",
        help="hybrid (default): keyword and semantic fused; keyword: BM25 only; "
        "vector: embeddings only",
    )
    s.add_argument(
        "--max-tokens",
        type=int,
        help="fit what is printed in this many tokens (at least 100): the best result whole, "
        "the others trimmed, the lowest dropped",
    )
    s.add_argument(
        "--explain", action="store_true", help="per result: channel ranks, scores, fusion"
    )
    s.add_argument("--json", action="store_true", help=_JSON_HELP)

    g = sub.add_parser("get", help="print lines of an indexed file: PATH[:FROM[-TO]]")
    g.add_argument(
        "target",
        metavar="PATH[:FROM[-TO]]",
        help="a file (absolute, or relative to a memory folder) with an optional line range: "
        "PATH:FROM-TO, PATH:FROM (to the end), or a citation as search prints it, PATH#Lx-Ly",
    )
    g.add_argument(
        "--decoded", action="store_true", help="transcripts: readable text, not raw JSON lines"
    )
    g.add_argument("--json", action="store_true", help=_JSON_HELP)

    st = sub.add_parser("status", help="index state, provider, pending work, counts")
    st.add_argument(
        "--watch",
        action="store_true",
        help="follow the daemon: a live progress bar while it syncs (Ctrl-C to stop)",
    )
    st.add_argument("--json", action="store_true", help=_JSON_HELP)

    sy = sub.add_parser("sync", help="sync now (in-process when no daemon runs)")
    sy.add_argument(
        "--wait",
        action="store_true",
        help="wait for the daemon's sync to finish, with a progress bar on stderr",
    )
    sy.add_argument("--json", action="store_true", help=_JSON_HELP)

    r = sub.add_parser("reindex", help="full rebuild (temporary database + atomic swap)")
    r.add_argument("--json", action="store_true", help=_JSON_HELP)

    e = sub.add_parser("eval", help="retrieval quality on a benchmark corpus")
    e.add_argument(
        "--corpus", type=Path, required=True, help="folder of the notes to index (Markdown)"
    )
    e.add_argument(
        "--queries",
        type=Path,
        required=True,
        help='queries.jsonl: one {"id": "q1", "text": "..."} object a line '
        '(optional "scope", "tags")',
    )
    e.add_argument(
        "--qrels",
        type=Path,
        required=True,
        help="qrels.tsv: query id <TAB> path relative to the corpus <TAB> line (0: the whole "
        "file) [<TAB> grade, default 1]",
    )
    e.add_argument("--k", type=int, default=10, help="results per query scored (default 10)")
    e.add_argument(
        "--mode",
        choices=["hybrid", "keyword", "vector", "rrf"],
        default="hybrid",
        help="channel(s) to evaluate; rrf: hybrid with reciprocal rank fusion",
    )
    e.add_argument(
        "--min-score",
        type=float,
        default=0.0,
        help="score floor during eval (default 0: rank quality of the top k)",
    )
    e.add_argument(
        "--home",
        type=Path,
        help="where the throwaway index and its embedding cache live "
        "(default: eval/<corpus-name> in the data dir)",
    )
    e.add_argument("--limit", type=int, metavar="N", help="only the first N queries")
    e.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key for this run (TOML value)",
    )
    e.add_argument("--json", action="store_true", help=_JSON_HELP)

    sub.add_parser("mcp", help="MCP server over stdio (memory_search, memory_get)")
    sub.add_parser("tray", help="tray icon showing sync state")
    sv = sub.add_parser("service", help="systemd / launchd service files")
    sv.add_argument(
        "action",
        choices=["install", "uninstall", "print"],
        help="install: write the systemd user unit / launchd agent and start it; uninstall: "
        "stop and remove it; print: show the file without installing",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``recalld`` console script."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG
        if args.verbose
        else logging.INFO
        if args.command == "serve"
        else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return _run(args)
    except KeyboardInterrupt:
        return exit_codes.INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except RecalldError as exc:
        print(f"recalld: {exc}", file=sys.stderr)
        return exit_codes.for_code(exc.code)
    except Exception as exc:  # the client's exceptions, translated at this boundary
        if _damaged_index(exc):
            return EXIT_INDEX
        code = getattr(exc, "code", None)
        if code is not None or type(exc).__module__.startswith("recalld_client"):
            print(f"recalld: {exc}", file=sys.stderr)
            return exit_codes.for_code(code)
        raise


def _damaged_index(exc: Exception) -> bool:
    """Say so (and what to do) when an in-process command met a damaged index file."""
    from recalld.index_health import is_corruption

    if not is_corruption(exc):
        return False
    print(
        f"recalld: the index is damaged ({exc}): start the daemon (`recalld serve` or the "
        "service), which moves it aside and rebuilds it from your files",
        file=sys.stderr,
    )
    return True


def _load_config(args: argparse.Namespace) -> Config:
    return Config.load(args.config)


def _daemon_client() -> Any:
    """A connected client if a daemon runs for this home, else None."""
    try:
        from recalld_client import Client, is_running
    except ImportError:
        return None
    if not is_running():
        return None
    return Client()


def _run(args: argparse.Namespace) -> int:
    cmd = args.command
    if cmd == "serve":
        # The vector scan is one matrix-vector product per query, memory-bound; OpenBLAS's
        # worker hand-off costs more than it saves on a few cores, and the keyword channel runs
        # beside it. Must be set before numpy loads. (Setting, not reading, the environment.)
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        from recalld.daemon import serve

        return serve(_load_config(args), args.config)
    if cmd == "eval":
        from recalld.evaluation import run_eval_cli

        return run_eval_cli(args)
    if cmd == "mcp":
        from recalld.mcp_server import main as mcp_main

        return mcp_main()
    if cmd == "tray":
        from recalld.tray import main as tray_main

        return tray_main()
    if cmd == "service":
        from recalld.service import main as service_main

        return service_main(args.action)
    if cmd in ("search", "get", "status", "sync", "reindex"):
        return _client_or_local(args)
    raise BadRequest(f"unknown command {cmd}")


def _client_or_local(args: argparse.Namespace) -> int:
    client = _daemon_client()
    if client is not None:
        with client:
            return _via_client(args, client)
    return _local(args)


def _search_params(args: argparse.Namespace) -> dict[str, Any]:
    params: dict[str, Any] = {"query": " ".join(args.query), "mode": args.mode}
    if args.max_results is not None:
        params["max_results"] = args.max_results
    if args.min_score is not None:
        params["min_score"] = args.min_score
    if args.sources:
        params["sources"] = args.sources
    if args.path_prefix:
        params["path_prefix"] = args.path_prefix
    if args.max_tokens is not None:  # fitted on the printed text, see _print_search
        _check_budget(args.max_tokens)
    if args.explain:
        params["explain"] = True
    if args.kinds:
        params["kinds"] = args.kinds
    return params


def _check_budget(max_tokens: int) -> None:
    from recalld.answer_budget import MIN_BUDGET_TOKENS

    if not MIN_BUDGET_TOKENS <= max_tokens <= 1_000_000:
        raise BadRequest(
            f"--max-tokens must be an integer from {MIN_BUDGET_TOKENS} to 1000000, got {max_tokens}"
        )


def _via_client(args: argparse.Namespace, client: Any) -> int:
    cmd = args.command
    if cmd == "search":
        p = _search_params(args)
        query = p.pop("query")
        _print_search(client.search(query, **p), args.json, args.max_tokens)
    elif cmd == "get":
        # Citations (PATH#L3-L9, PATH:3-9...) are parsed by the daemon: recalld_client.citation.
        _print_get(client.get(args.target, decoded=args.decoded), args.json)
    elif cmd == "status" and args.watch:
        from recalld.progress_bar import follow_status

        return follow_status(client.watch(), sys.stdout, as_json=args.json)
    elif cmd == "status":
        _print_status(client.status(), args.json)
    elif cmd in ("sync", "reindex"):
        from recalld.progress_bar import while_watching

        wait = args.wait if cmd == "sync" else True
        call = client.sync if cmd == "sync" else client.reindex
        if wait and not args.json:
            res = while_watching(client.watch, lambda: call(wait=True))
        else:
            res = call(wait=wait)
        _print_json_or(res, args.json, cmd)
    return EXIT_OK


def _local(args: argparse.Namespace) -> int:
    from recalld.engine import Engine

    config = _load_config(args)
    cmd = args.command
    if cmd == "status" and args.watch:
        from recalld.errors import Unavailable

        raise Unavailable("status --watch follows a running daemon: start it with `recalld serve`")
    if cmd in ("sync", "reindex"):
        from recalld.progress_bar import ProgressBar
        from recalld.security import index_files, private_umask, tighten

        with private_umask():  # the index holds every note: readable by its owner only
            engine = Engine(config, writable=True)
        try:
            bar = None if args.json else ProgressBar()
            if bar is not None:
                engine.on_progress = lambda progress: bar.update(progress.as_dict())
            report = engine.sync() if cmd == "sync" else engine.reindex()
            if bar is not None:
                bar.close()
            out = report.as_dict()
            out["status"] = {
                k: v for k, v in engine.status().items() if k in ("provider", "degraded", "counts")
            }
            _print_json_or(out, args.json, cmd)
        finally:
            engine.close()
            tighten(index_files(engine.index_path))  # a reindex swapped in a new file
        return EXIT_OK
    engine = Engine(config, writable=False)
    try:
        if cmd == "search":
            _print_search(engine.search(_search_params(args)), args.json, args.max_tokens)
            _warn_if_stale(engine, config)
        elif cmd == "get":
            params: dict[str, Any] = {"path": args.target}
            if args.decoded:
                params["decoded"] = True
            _print_get(engine.get(params), args.json)
        elif cmd == "status":
            from recalld.index_health import quick_check
            from recalld.security import config_warnings

            # Without a daemon, status is how a user checks the index: a damaged page that the
            # counts happen not to read must still be found (bounded: ~1 s per 100k chunks).
            if problem := quick_check(engine.index_path, budget_s=STATUS_CHECK_BUDGET_S):
                raise IndexError_(
                    f"the index is damaged ({engine.index_path}: {' '.join(problem.split())}): "
                    "start the daemon "
                    "(`recalld serve` or the service), which moves it aside and rebuilds it "
                    "from your files"
                )
            status = engine.status()
            status["warnings"] = config_warnings(config)
            _print_status(status, args.json)
    finally:
        engine.close()
    return EXIT_OK


def _warn_if_stale(engine: Any, config: Config) -> None:
    """Without a daemon nothing indexes edits: say so when files changed since the last sync."""
    from recalld import freshness

    with engine.reader() as store:
        line = freshness.note(freshness.check(store, config))
    if line:
        print(line, file=sys.stderr)


# output ---------------------------------------------------------------------------------------


def _print_search(res: dict[str, Any], as_json: bool, max_tokens: int | None = None) -> None:
    if max_tokens is not None:
        # Fitted here, on the text printed (stdout and stderr), not on the daemon's JSON.
        from recalld.answer_budget import fit_rendered

        def render(results: list[dict[str, Any]], report: dict[str, Any]) -> str:
            out, err = _search_text({**res, "results": results, "budget": report}, as_json)
            return out + err

        res["budget"] = fit_rendered(res.get("results", []), max_tokens, render)
    out, err = _search_text(res, as_json)
    sys.stdout.write(out)
    sys.stdout.flush()
    sys.stderr.write(err)


def _search_text(res: dict[str, Any], as_json: bool) -> tuple[str, str]:
    """What ``search`` prints: (stdout, stderr)."""
    if as_json:
        return json.dumps(res, ensure_ascii=False) + "\n", ""
    out: list[str] = []
    err: list[str] = []
    if res.get("degraded"):
        err.append(f"note: {res['degraded']}")
    if note := pending_note(res):
        err.append(f"note: {note}")
    results = res.get("results", [])
    if not results:
        out.append("no results")
    for i, r in enumerate(results, 1):
        sc = r.get("scores") or {}
        parts = [
            f"{name} {sc[name]:.2f}" for name in ("vector", "keyword") if sc.get(name) is not None
        ]
        what = r["source"] if r.get("kind") in (None, "note") else f"{r['source']} {r['kind']}"
        what += f" {r['tool']}" if r.get("tool") else ""
        out.append(f"{i}. {r['citation']}  score {r['score']:.3f} ({', '.join(parts)}) [{what}]")
        out.extend(f"   also at {p['citation']} [{p['source']}]" for p in r.get("also", []))
        if "explain" in r:
            out.append(f"   explain: {_explain_line(r['explain'])}")
        out.extend(f"   {line[:160]}" for line in r["snippet"].splitlines()[:4])
    if "explain" in res:
        e = res["explain"]
        w = e.get("weights", {})
        out.append(
            f"-- query shape {e.get('shape')}, fusion {e.get('fusion')}, weights vector "
            f"{w.get('vector')} / keyword {w.get('keyword')}, literals {e.get('literals')}, "
            f"candidates {e.get('candidates')}\n-- match: {e.get('match')}"
        )
    if "budget" in res:  # one short line: it counts against the budget too
        b = res["budget"]
        err.append(
            f"-- {res.get('mode')} · budget {b['max_tokens']}: ~{b['used_tokens']} used, "
            f"{b['snippets_trimmed']} trimmed, {b['dropped']} dropped"
        )
    else:
        err.append(f"-- {res.get('mode')} · {res.get('provider')} · {res.get('took_ms')} ms")
    return "".join(f"{line}\n" for line in out), "".join(f"{line}\n" for line in err)


def _explain_line(e: dict[str, Any]) -> str:
    """One line of a result's explanation: channel ranks and scores, boosts, final score."""
    parts = []
    for name in ("vector", "keyword"):
        ch = e.get(name)
        parts.append(f"{name} #{ch['rank']} {ch['score']:.3f}" if ch else f"{name} -")
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


def _print_get(res: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(res, ensure_ascii=False))
        return
    sys.stdout.write(res["text"] + ("\n" if res["text"] else ""))


def _print_status(res: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(res, ensure_ascii=False, default=str))
        return
    counts = res.get("counts", {})
    last = res.get("last_sync")
    from recalld.overview import status_head

    lines = [
        *status_head(res),  # where notes live and what is watched, first
        f"state:     {res.get('state')} ({_daemon_line(res.get('daemon'))})",
        f"provider:  {res.get('provider')} — {res.get('provider_reason')}",
        f"degraded:  {res.get('degraded') or 'no'}",
        f"files:     {counts.get('files', 0)} ({counts.get('memory_files', 0)} memory, "
        f"{counts.get('session_files', 0)} sessions)",
        f"chunks:    {counts.get('chunks', 0)} ({counts.get('vectors', 0)} with vectors, "
        f"{counts.get('keyword_only_chunks', 0)} keyword-only by policy, "
        f"{counts.get('cached_embeddings', 0)} cached embeddings)",
        f"last sync: {_when(last)}",
    ]
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
    if res.get("last_error"):
        lines.append(f"error:     {res['last_error']}")
    lines.extend(f"warning:   {w}" for w in res.get("warnings") or [])
    print("\n".join(lines))


def _daemon_line(daemon: Any) -> str:
    if isinstance(daemon, dict):
        paused = ", watching paused" if daemon.get("paused") else ""
        return (
            f"daemon pid {daemon.get('pid')}, up {daemon.get('uptime_s')} s, "
            f"{daemon.get('pending', 0)} pending{paused}"
        )
    return "daemon not running; answered in-process"


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "never"


def _print_json_or(res: dict[str, Any], as_json: bool, what: str) -> None:
    if as_json:
        print(json.dumps(res, ensure_ascii=False, default=str))
        return
    print(describe_sync_report(res, what))
    report = _report_of(res)
    if report.get("embed_error"):
        print(f"warning: embedding failed: {report['embed_error']}", file=sys.stderr)


def _report_of(res: dict[str, Any]) -> dict[str, Any]:
    """The report inside a daemon's answer, or the in-process report itself."""
    inner = res.get("report")
    return inner if isinstance(inner, dict) else res


def describe_sync_report(res: dict[str, Any], what: str = "sync") -> str:
    """A sentence for a ``sync`` / ``reindex`` answer: an in-process report, or the daemon's
    ``{"queued": ..., "job": ..., "report": ...}``."""
    if res.get("queued"):
        return (
            f"{what} queued: the daemon runs it in the background "
            "(`recalld status --watch` shows its progress, `--wait` waits for it)"
        )
    report = _report_of(res)
    if "files_changed" not in report:
        return f"{what} done"
    n = {k: int(v) for k, v in report.items() if isinstance(v, int) and not isinstance(v, bool)}
    files = n.get("files_seen", 0) + n.get("files_removed", 0)
    text = (
        f"{what} done in {report.get('seconds', 0)} s: {files:,} note files checked, "
        f"{n.get('files_changed', 0):,} changed, {n.get('files_unchanged', 0):,} unchanged, "
        f"{n.get('files_removed', 0):,} removed, {n.get('files_skipped', 0):,} skipped; "
        f"{n.get('chunks_written', 0):,} chunks written, {n.get('chunks_embedded', 0):,} embedded"
    )
    sessions = report.get("sessions")
    if isinstance(sessions, dict) and sessions.get("files"):
        text += (
            f"; {sessions['files']:,} transcripts checked, {sessions.get('messages', 0):,} new "
            f"messages, {sessions.get('chunks_written', 0):,} chunks"
        )
    if n.get("files_deferred"):
        text += f"; {n['files_deferred']:,} big notes are still being chunked in the background"
    if report.get("vectors_pending"):
        text += "; some chunks still wait for vectors (found by keyword until then)"
    return text + "."


if __name__ == "__main__":
    raise SystemExit(main())
