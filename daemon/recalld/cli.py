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

from recalld import __version__
from recalld.config import Config
from recalld.errors import BadRequest, RecalldError

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_UNAVAILABLE = 0, 1, 2, 3, 4
# The configuration is invalid (a value out of range, an unknown key): fix config.toml.
EXIT_CONFIG = 5
# The index cannot be opened or written (a read-only home, a folder of another user).
EXIT_INDEX = 6
_EXIT_BY_CODE = {
    "bad_request": EXIT_USAGE,
    "not_found": EXIT_NOT_FOUND,
    "forbidden": EXIT_USAGE,
    "unavailable": EXIT_UNAVAILABLE,
    "too_many_connections": EXIT_UNAVAILABLE,
    "config": EXIT_CONFIG,
    "index": EXIT_INDEX,
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="recalld", description="Always-on memory for local AI agents.")
    p.add_argument("--version", action="version", version=f"recalld {__version__}")
    p.add_argument("--config", type=Path, help="config file (default: RECALLD_CONFIG or platform)")
    p.add_argument("-v", "--verbose", action="store_true", help="log more")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("serve", help="run the daemon in the foreground")

    s = sub.add_parser("search", help="hybrid search of memory and sessions")
    s.add_argument("query", nargs="+")
    s.add_argument("--max", type=int, dest="max_results", help="results (default 6)")
    s.add_argument("--min-score", type=float, help="score floor (default 0.35)")
    s.add_argument("--source", choices=["memory", "sessions"], action="append", dest="sources")
    s.add_argument("--path-prefix")
    s.add_argument(
        "--kind",
        choices=["note", "message", "tool_call", "tool_output"],
        action="append",
        dest="kinds",
        help="only this kind of content (repeatable)",
    )
    s.add_argument("--mode", choices=["hybrid", "keyword", "vector"], default="hybrid")
    s.add_argument("--max-tokens", type=int, help="fit the whole answer in this many tokens")
    s.add_argument(
        "--explain", action="store_true", help="per result: channel ranks, scores, fusion"
    )
    s.add_argument("--json", action="store_true")

    g = sub.add_parser("get", help="print lines of an indexed file: PATH[:FROM[-TO]]")
    g.add_argument("target")
    g.add_argument(
        "--decoded", action="store_true", help="transcripts: readable text, not raw JSON lines"
    )
    g.add_argument("--json", action="store_true")

    st = sub.add_parser("status", help="index state, provider, pending work, counts")
    st.add_argument(
        "--watch",
        action="store_true",
        help="follow the daemon: a live progress bar while it syncs (Ctrl-C to stop)",
    )
    st.add_argument("--json", action="store_true")

    sy = sub.add_parser("sync", help="sync now (in-process when no daemon runs)")
    sy.add_argument(
        "--wait",
        action="store_true",
        help="wait for the daemon's sync to finish, with a progress bar on stderr",
    )
    sy.add_argument("--json", action="store_true")

    r = sub.add_parser("reindex", help="full rebuild (temporary database + atomic swap)")
    r.add_argument("--json", action="store_true")

    e = sub.add_parser("eval", help="retrieval quality on a benchmark corpus")
    e.add_argument("--corpus", type=Path, required=True)
    e.add_argument("--queries", type=Path, required=True)
    e.add_argument("--qrels", type=Path, required=True)
    e.add_argument("--k", type=int, default=10)
    e.add_argument("--mode", choices=["hybrid", "keyword", "vector", "rrf"], default="hybrid")
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
    e.add_argument("--limit", type=int, help="only the first N queries")
    e.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key for this run (TOML value)",
    )
    e.add_argument("--json", action="store_true")

    sub.add_parser("mcp", help="MCP server over stdio (memory_search, memory_get)")
    sub.add_parser("tray", help="tray icon showing sync state")
    sv = sub.add_parser("service", help="systemd / launchd service files")
    sv.add_argument("action", choices=["install", "uninstall", "print"])
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
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except RecalldError as exc:
        print(f"recalld: {exc}", file=sys.stderr)
        return _EXIT_BY_CODE.get(exc.code, EXIT_ERROR)
    except Exception as exc:  # the client's exceptions, translated at this boundary
        if _damaged_index(exc):
            return EXIT_INDEX
        code = getattr(exc, "code", None)
        if code is not None or type(exc).__module__.startswith("recalld_client"):
            print(f"recalld: {exc}", file=sys.stderr)
            return _EXIT_BY_CODE.get(code, EXIT_ERROR) if isinstance(code, str) else EXIT_ERROR
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

        return serve(_load_config(args))
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
    if args.max_tokens is not None:
        params["max_tokens"] = args.max_tokens
    if args.explain:
        params["explain"] = True
    if args.kinds:
        params["kinds"] = args.kinds
    return params


def _get_params(target: str) -> dict[str, Any]:
    from recalld.engine import _split_range

    if os.path.exists(target):
        return {"path": target}
    path, first, count = _split_range(target, 1, None)
    params: dict[str, Any] = {"path": path, "from_line": first}
    if count is not None:
        params["lines"] = count
    return params


def _via_client(args: argparse.Namespace, client: Any) -> int:
    cmd = args.command
    if cmd == "search":
        p = _search_params(args)
        query = p.pop("query")
        _print_search(client.search(query, **p), args.json)
    elif cmd == "get":
        p = _get_params(args.target)
        got = client.get(p["path"], p.get("from_line", 1), p.get("lines"), decoded=args.decoded)
        _print_get(got, args.json)
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
            _print_search(engine.search(_search_params(args)), args.json)
        elif cmd == "get":
            params = _get_params(args.target)
            if args.decoded:
                params["decoded"] = True
            _print_get(engine.get(params), args.json)
        elif cmd == "status":
            from recalld.security import config_warnings

            status = engine.status()
            status["warnings"] = config_warnings(config)
            _print_status(status, args.json)
    finally:
        engine.close()
    return EXIT_OK


# output ---------------------------------------------------------------------------------------


def _print_search(res: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(res, ensure_ascii=False))
        return
    if res.get("degraded"):
        print(f"note: {res['degraded']}", file=sys.stderr)
    results = res.get("results", [])
    if not results:
        print("no results")
    for i, r in enumerate(results, 1):
        sc = r.get("scores") or {}
        parts = [
            f"{name} {sc[name]:.2f}" for name in ("vector", "keyword") if sc.get(name) is not None
        ]
        what = r["source"] if r.get("kind") in (None, "note") else f"{r['source']} {r['kind']}"
        what += f" {r['tool']}" if r.get("tool") else ""
        print(f"{i}. {r['citation']}  score {r['score']:.3f} ({', '.join(parts)}) [{what}]")
        for place in r.get("also", []):
            print(f"   also at {place['citation']} [{place['source']}]")
        if "explain" in r:
            print(f"   explain: {_explain_line(r['explain'])}")
        for line in r["snippet"].splitlines()[:4]:
            print(f"   {line[:160]}")
    if "explain" in res:
        e = res["explain"]
        w = e.get("weights", {})
        print(
            f"-- query shape {e.get('shape')}, fusion {e.get('fusion')}, weights vector "
            f"{w.get('vector')} / keyword {w.get('keyword')}, literals {e.get('literals')}, "
            f"candidates {e.get('candidates')}\n-- match: {e.get('match')}"
        )
    if "budget" in res:
        b = res["budget"]
        print(
            f"-- budget {b['max_tokens']} tokens: used ~{b['used_tokens']}, "
            f"{b['snippets_trimmed']} snippets trimmed, {b['dropped']} results dropped",
            file=sys.stderr,
        )
    print(
        f"-- {res.get('mode')} · {res.get('provider')} · {res.get('took_ms')} ms", file=sys.stderr
    )


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
    lines = [
        f"state:     {res.get('state')} ({_daemon_line(res.get('daemon'))})",
        f"provider:  {res.get('provider')} — {res.get('provider_reason')}",
        f"degraded:  {res.get('degraded') or 'no'}",
        f"index:     {res.get('index_path')}",
        f"files:     {counts.get('files', 0)} ({counts.get('memory_files', 0)} memory, "
        f"{counts.get('session_files', 0)} sessions)",
        f"chunks:    {counts.get('chunks', 0)} ({counts.get('vectors', 0)} with vectors, "
        f"{counts.get('keyword_only_chunks', 0)} keyword-only by policy, "
        f"{counts.get('cached_embeddings', 0)} cached embeddings)",
        f"last sync: {_when(last)}",
        f"memory:    {', '.join(res.get('memory_roots', []))}",
    ]
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
