"""The ``recalld`` command. The only place that turns exceptions into exit codes.

``search``, ``get`` and ``status`` use the running daemon when there is one and otherwise answer
in-process from the same index (read-only); ``sync`` without a daemon syncs in-process. Their
common forms through a daemon take the fast path of :mod:`recalld.surfaces.cli_fast` first, which
imports only the client; what is printed lives in :mod:`recalld.surfaces.cli_output`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from recalld import __version__
from recalld.errors import BadRequest, IndexError_, RecalldError
from recalld.retrieval.answer_budget import check_budget
from recalld.surfaces import cli_memory, exit_codes, shared_cli
from recalld.surfaces.cli_output import (
    describe_sync_report as describe_sync_report,  # where callers have imported it from
)
from recalld.surfaces.cli_output import (
    print_get,
    print_json_or,
    print_search,
    print_status,
)
from recalld.surfaces.cli_paths import with_cwd_fallback
from recalld.surfaces.filter_options import add_filter_options, cli_filter_params
from recalld.surfaces.terminal_text import visible

if TYPE_CHECKING:
    import argparse

    from recalld.config import Config

# The table lives in recalld.surfaces.exit_codes; these names stay for callers and tests.
EXIT_OK, EXIT_ERROR, EXIT_USAGE = exit_codes.OK, exit_codes.ERROR, exit_codes.USAGE
EXIT_NOT_FOUND, EXIT_UNAVAILABLE = exit_codes.NOT_FOUND, exit_codes.UNAVAILABLE
EXIT_CONFIG, EXIT_INDEX = exit_codes.CONFIG, exit_codes.INDEX
STATUS_CHECK_BUDGET_S = 5.0  # in-process `status` checks the index file for damage
_JSON_HELP = "print the answer as one JSON object"


def _parser() -> argparse.ArgumentParser:
    # Imported here, like logging in main: the fast path must not pay for them.
    import argparse
    from pathlib import Path

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

    from recalld.surfaces import eval_options, init_setup, lifecycle

    init_setup.add_parser(sub)
    sub.add_parser("serve", help="run the daemon in the foreground")
    lifecycle.add_parsers(sub)

    _add_search(sub)
    _add_reading(sub)
    _add_indexing(sub)
    eval_options.add_parser(sub)
    cli_memory.add_parsers(sub)  # remember, forget
    _add_agent_surfaces(sub)
    return p


def _add_reading(sub: Any) -> None:
    """``get`` and ``status``: reading lines and the index's state."""
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


def _add_indexing(sub: Any) -> None:
    """``sync`` and ``reindex``: bringing the index up to date."""
    sy = sub.add_parser("sync", help="sync now (in-process when no daemon runs)")
    sy.add_argument(
        "--wait",
        action="store_true",
        help="wait for the daemon's sync to finish, with a progress bar on stderr",
    )
    sy.add_argument("--json", action="store_true", help=_JSON_HELP)

    r = sub.add_parser("reindex", help="full rebuild (temporary database + atomic swap)")
    r.add_argument("--json", action="store_true", help=_JSON_HELP)


def _add_agent_surfaces(sub: Any) -> None:
    """The MCP server, the tray, the shared store, the service, and agent integrations."""
    sub.add_parser(
        "mcp", help="MCP server over stdio (memory_search, memory_get, memory_write, memory_forget)"
    )
    sub.add_parser("tray", help="tray icon showing sync state")
    shared_cli.add_parser(sub)
    sv = sub.add_parser("service", help="systemd / launchd service files")
    sv.add_argument(
        "action",
        choices=["install", "uninstall", "print"],
        help="install: write the systemd user unit / launchd agent and start it; uninstall: "
        "stop and remove it; print: show the file without installing",
    )
    from recalld.surfaces import doctor, hooks
    from recalld.surfaces.integrate import command as integrate

    integrate.add_parser(sub)
    hooks.add_parser(sub)
    doctor.add_parser(sub)


#: What ``--max`` takes (the wire's ``max_results`` range).
MAX_RESULTS = 1000


def result_count(text: str) -> int:
    """``--max``'s value: an integer from 1 to :data:`MAX_RESULTS` (argparse says which flag)."""
    import argparse

    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not 1 <= n <= MAX_RESULTS:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to {MAX_RESULTS}, got {n}")
    return n


def _add_search(sub: Any) -> None:
    """The ``search`` subcommand and its options."""
    s = sub.add_parser("search", help="hybrid search of memory and sessions")
    s.add_argument("query", nargs="+", help="what to look for: words, a question, identifiers")
    s.add_argument("--max", type=result_count, dest="max_results", help="results (default 6)")
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
    add_filter_options(s)
    s.add_argument(
        "--explain", action="store_true", help="per result: channel ranks, scores, fusion"
    )
    s.add_argument("--json", action="store_true", help=_JSON_HELP)


def full_main(argv: Sequence[str], *, daemon_absent: bool = False) -> int:
    """The whole command: every subcommand, --help, in-process answers.

    ``daemon_absent``: the fast path found no daemon answering just now; do not ask again.
    """
    import logging

    args = _parser().parse_args(argv)
    args.daemon_absent = daemon_absent
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
        print(f"recalld: {visible(str(exc))}", file=sys.stderr)
        return exit_codes.for_code(exc.code)
    except Exception as exc:  # the client's exceptions, translated at this boundary
        if _damaged_index(exc):
            return EXIT_INDEX
        code = getattr(exc, "code", None)
        if code is not None or type(exc).__module__.startswith("recalld_client"):
            print(f"recalld: {visible(str(exc))}", file=sys.stderr)
            return exit_codes.for_code(code)
        raise


def _damaged_index(exc: Exception) -> bool:
    """Say so (and what to do) when an in-process command met a damaged index file."""
    from recalld.index.index_health import is_corruption

    if not is_corruption(exc):
        return False
    print(
        f"recalld: the index is damaged ({exc}): start the daemon (`recalld serve` or the "
        "service), which moves it aside and rebuilds it from your files",
        file=sys.stderr,
    )
    return True


def _load_config(args: argparse.Namespace) -> Config:
    from recalld.config import Config

    return Config.load(args.config)


def _daemon_client(args: argparse.Namespace) -> Any:
    """A connected client if a daemon runs for this home, else None (another home's daemon at
    this socket: :class:`recalld_client.WrongDaemon`)."""
    from recalld.surfaces.daemon_connect import connect

    return connect(args.config)


def _run(args: argparse.Namespace) -> int:
    cmd = args.command
    if cmd == "serve":
        return _serve(args)
    if cmd in ("init", "start", "stop"):
        from recalld.surfaces import init_setup, lifecycle

        return {"init": init_setup.run, "start": lifecycle.start, "stop": lifecycle.stop}[cmd](args)
    if cmd == "eval":
        from recalld.surfaces.evaluation import run_eval_cli

        return run_eval_cli(args)
    if cmd == "mcp":
        from recalld.surfaces.mcp_server import main as mcp_main

        return mcp_main()
    if cmd == "tray":
        from recalld.surfaces.tray import main as tray_main

        return tray_main()
    if cmd == "shared":
        return shared_cli.main(args, _load_config(args))
    if cmd == "service":
        from recalld.surfaces.service import main as service_main

        return service_main(args.action)
    if cmd in ("search", "get", "status", "sync", "reindex"):
        return _client_or_local(args)
    if cmd in ("remember", "forget"):
        return _edit_memory(args)
    if cmd == "integrate":
        from recalld.surfaces.integrate.command import run as integrate_run

        return integrate_run(args)
    if cmd == "doctor":
        from recalld.surfaces.doctor import run as doctor_run

        return doctor_run(args)
    if cmd == "hook":
        from recalld.surfaces.hooks import main as hook_main

        return hook_main([args.event])
    raise BadRequest(f"unknown command {cmd}")


def _serve(args: argparse.Namespace) -> int:
    """``recalld serve``: the daemon in the foreground, its model loading while it starts."""
    # The vector scan is one matrix-vector product per query, memory-bound; OpenBLAS's
    # worker hand-off costs more than it saves on a few cores, and the keyword channel runs
    # beside it. Must be set before numpy loads. (Setting, not reading, the environment.)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    config = _load_config(args)
    from recalld.serve.allocator import tune_allocator

    tune_allocator()  # before the model loads (serve() sets it too, for other callers)
    from recalld.embedding.local import preload, settle_preloads

    if config.str("embedding.provider").strip().lower() in ("auto", "local"):
        # The model loads while the daemon's modules import and the index opens.
        preload(
            threads=config.int("embedding.threads"),
            batch_size=config.int("embedding.batch_size"),
        )
    from recalld.serve.daemon_start import serve

    try:
        return serve(config, args.config)
    finally:
        settle_preloads()  # a refused start exits only once the model's loading thread is done


def _edit_memory(args: argparse.Namespace) -> int:
    """``remember`` and ``forget``: through the daemon when one runs, else in-process."""
    client = None if args.daemon_absent else _daemon_client(args)
    if client is None:
        return cli_memory.run(args, None)
    with client:
        return cli_memory.run(args, client)


def _client_or_local(args: argparse.Namespace) -> int:
    client = None if args.daemon_absent else _daemon_client(args)
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
    if args.max_tokens is not None:  # fitted on the printed text, see print_search
        check_budget(args.max_tokens)
    if args.explain:
        params["explain"] = True
    if args.kinds:
        params["kinds"] = args.kinds
    params.update(cli_filter_params(args))
    return params


def _via_client(args: argparse.Namespace, client: Any) -> int:
    cmd = args.command
    if cmd == "search":
        p = _search_params(args)
        query = p.pop("query")
        print_search(client.search(query, **p), args.json, args.max_tokens)
    elif cmd == "get":
        # Citations (PATH#L3-L9, PATH:3-9...) are parsed by the daemon: recalld_client.citation.
        got = with_cwd_fallback(lambda t: client.get(t, decoded=args.decoded), args.target)
        print_get(got, args.json)
    elif cmd == "status" and args.watch:
        from recalld.surfaces.progress_bar import follow_status

        return follow_status(client.watch(), sys.stdout, as_json=args.json)
    elif cmd == "status":
        print_status(client.status(), args.json)
    elif cmd in ("sync", "reindex"):
        from recalld.surfaces.progress_bar import while_watching

        wait = args.wait if cmd == "sync" else True
        call = client.sync if cmd == "sync" else client.reindex
        if wait and not args.json:
            res = while_watching(client.watch, lambda: call(wait=True))
        else:
            res = call(wait=wait)
        print_json_or(res, args.json, cmd)
    return EXIT_OK


def _local(args: argparse.Namespace) -> int:
    from recalld.engine import Engine

    config = _load_config(args)
    cmd = args.command
    if cmd == "status" and args.watch:
        from recalld.errors import Unavailable

        raise Unavailable("status --watch follows a running daemon: start it with `recalld serve`")
    if cmd in ("sync", "reindex"):
        from recalld.security import index_files, private_umask, tighten
        from recalld.surfaces.progress_bar import ProgressBar

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
            print_json_or(out, args.json, cmd)
        finally:
            engine.close()
            tighten(index_files(engine.index_path))  # a reindex swapped in a new file
        return EXIT_OK
    engine = Engine(config, writable=False)
    try:
        if cmd == "search":
            print_search(engine.searcher.search(_search_params(args)), args.json, args.max_tokens)
            _warn_if_stale(engine, config)
        elif cmd == "get":
            got = with_cwd_fallback(
                lambda t: engine.searcher.get({"path": t, "decoded": args.decoded}), args.target
            )
            print_get(got, args.json)
        elif cmd == "status":
            from recalld.index.index_health import quick_check
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
            print_status(status, args.json)
    finally:
        engine.close()
    return EXIT_OK


def _warn_if_stale(engine: Any, config: Config) -> None:
    """Without a daemon nothing indexes edits: say so when files changed since the last sync."""
    from recalld.ingest import freshness

    with engine.reader() as store:
        line = freshness.note(freshness.check(store, config))
    if line:
        print(visible(line), file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(full_main(sys.argv[1:]))
