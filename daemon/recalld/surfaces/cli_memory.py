"""``recalld remember`` and ``recalld forget``: the CLI side of writing and forgetting.

Through the running daemon when there is one; otherwise in-process on a writable engine (the
write, its index and the forget happen in this process, as ``recalld sync`` does).
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any, cast

from recalld.errors import BadRequest
from recalld.surfaces.cli_paths import with_cwd_fallback

if TYPE_CHECKING:
    import argparse

_JSON_HELP = "print the answer as one JSON object"
#: Texts longer than this are checked here before they go to the daemon: a shorter one fits in
#: a request (at most 4 UTF-8 bytes a character, well under the daemon's 1 MiB cap).
PRECHECK_CHARS = 64_000


def add_parsers(sub: Any) -> None:
    """The ``remember`` and ``forget`` subcommands."""
    r = sub.add_parser(
        "remember",
        help="write an entry into memory (today's daily note by default)",
        description="Append a timestamped entry to a memory note; when this returns, every "
        "client's search finds it. Secrets are redacted before anything is written.",
    )
    r.add_argument("text", metavar="TEXT|-", nargs="+", help="the text, or - to read stdin")
    r.add_argument("--note", metavar="NAME", help="a note such as MEMORY.md or projects/x.md")
    r.add_argument(
        "--tag", action="append", dest="tags", default=[], metavar="T", help="a tag (repeatable)"
    )
    r.add_argument(
        "--replace", metavar="CITATION", help="correct an earlier entry in place (PATH#Lx-Ly)"
    )
    r.add_argument("--json", action="store_true", help=_JSON_HELP)

    f = sub.add_parser(
        "forget",
        help="remove lines from a note, or keep files, sessions or projects out of the index",
        description="A citation (PATH#Lx-Ly) removes those lines from the note, refused if "
        "they changed since cited. A path, folder or glob, --session or --project keeps them "
        "out of the index (the files are not touched) until --undo.",
    )
    f.add_argument(
        "target",
        nargs="?",
        metavar="CITATION|PATH|GLOB",
        help="PATH#Lx-Ly: remove those lines from the note; a file, folder or glob (relative "
        "to the first memory folder, else to this folder, or absolute): keep it out of the "
        "index",
    )
    f.add_argument("--session", metavar="ID", help="a transcript's session id")
    f.add_argument("--project", metavar="NAME", help="a project (transcripts' cwd, a top folder)")
    f.add_argument("--undo", action="store_true", help="bring a forgotten path/session back")
    f.add_argument("--list", action="store_true", help="show what is forgotten")
    f.add_argument("--json", action="store_true", help=_JSON_HELP)


def params_of(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The wire method and parameters of a parsed command."""
    if args.command == "remember":
        words = args.text
        text = sys.stdin.read() if words == ["-"] else " ".join(words)
        params: dict[str, Any] = {"text": text}
        if args.note:
            params["note"] = args.note
        if args.tags:
            params["tags"] = args.tags
        if args.replace:
            params["replace"] = args.replace
        return "write", params
    if args.list:
        return "forget", {"list": True}
    named = {
        k: v
        for k, v in (("target", args.target), ("session", args.session), ("project", args.project))
        if v
    }
    if len(named) != 1:
        raise BadRequest(
            "forget takes one of CITATION|PATH|GLOB, --session ID or --project NAME (or --list)"
        )
    return "forget", {**named, "undo": args.undo}


def run(args: argparse.Namespace, client: Any | None) -> int:
    """Answer through ``client`` (a running daemon) or in-process."""
    method, params = params_of(args)
    if client is not None and method == "write":
        _check_length(args, params["text"])

    def call(target: str | None) -> dict[str, Any]:
        sent = params if target is None else {**params, "target": target}
        if client is not None:
            return cast(
                "dict[str, Any]",
                client.call(method, sent, timeout=None if method == "forget" else 180.0),
            )
        return _in_process(args, method, sent)

    target = params.get("target")
    result = call(None) if target is None else with_cwd_fallback(call, target)
    print_result(method, params, result, args.json)
    return 0


def _check_length(args: argparse.Namespace, text: str) -> None:
    """Refuse a long text as the daemon would (``memory.max_entry_chars``), before it is sent:
    over the daemon's 1 MiB cap of requests it would be turned away unread, with another error
    and exit code than ``remember`` without a daemon gives."""
    if len(text) <= PRECHECK_CHARS:
        return  # the daemon checks it (the config is not read for every remember)
    from recalld.config import Config
    from recalld.ingest.memory_write import entry_text

    entry_text(text, Config.load(args.config).int("memory.max_entry_chars"))


def _in_process(args: argparse.Namespace, method: str, params: dict[str, Any]) -> dict[str, Any]:
    from recalld.config import Config
    from recalld.engine import Engine
    from recalld.memory_edits import MemoryEdits
    from recalld.security import index_files, private_umask, tighten

    config = Config.load(args.config)
    with private_umask():  # the index holds every note: readable by its owner only
        engine = Engine(config, writable=True)
    try:

        def resync() -> None:  # an undo: what the tombstone kept out is indexed again now
            engine.sync()

        edits = MemoryEdits(engine, lambda fn: fn(), resync=resync, shared=_shared_scope(config))
        return edits.write(params) if method == "write" else edits.forget(params)
    finally:
        engine.close()
        tighten(index_files(engine.index_path))


def _shared_scope(config: Any) -> Any:
    """Whether an indexed file is shared, as the daemon's pusher decides it (None: sharing off
    or unreadable, which the daemon reports): a forget without a daemon says so too."""
    from recalld.errors import RecalldError

    try:
        from recalld.shared.push import Scope
        from recalld.shared.settings import load

        settings = load(config)
    except (ImportError, RecalldError):
        return None
    if settings is None:
        return None
    scope = Scope(settings.share, config.memory_roots())
    return lambda path, source: scope.key(path, source) is not None


def print_result(method: str, params: dict[str, Any], res: dict[str, Any], as_json: bool) -> None:
    """The answer as JSON, or as a line or two for people."""
    if as_json:
        print(json.dumps(res, ensure_ascii=False, sort_keys=True))
        return
    if method == "write":
        note = " (already there: not written again)" if res.get("duplicate") else ""
        _say(f"{res['citation']}{note}")
        if res.get("redacted"):
            _say(f"{res['redacted']} secret(s) redacted before writing", file=sys.stderr)
        return
    if "forgotten" in res and isinstance(res["forgotten"], list):
        if not res["forgotten"]:
            _say("nothing is forgotten")
        for stone in res["forgotten"]:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(stone["created_at"]))
            _say(f"{stone['kind']:8} {stone['value']}  (since {when})")
        return
    if res.get("undone"):
        _say(f"{res['forgotten']} {res['value']} is no longer forgotten: it is indexed again")
    elif res.get("forgotten") == "lines":
        _say(f"removed {res['lines_removed']} line(s): {res['value']}")
    else:
        _say(
            f"forgot {res['forgotten']} {res['value']}: {res['files_removed']} file(s), "
            f"{res['chunks_removed']} chunk(s) out of the index (files untouched)"
        )
    if res.get("shared_files"):
        _say(shared_note(res))


def shared_note(res: dict[str, Any]) -> str:
    """What a forget of shared notes leaves behind in the shared store, and how it goes."""
    if res.get("forgotten") == "lines":
        head = "the note is shared: the shared store gets it without those lines at the next push"
    else:
        head = f"{res['shared_files']} of them shared: the shared store drops them at the next push"
    return (
        f"{head}; the old text stays in PostgreSQL's files until its administrator runs "
        "`recalld shared compact`"
    )


def _say(text: str, **kw: Any) -> None:
    """Print a line for people: a citation or path's control characters shown, not obeyed."""
    from recalld.surfaces.terminal_text import visible

    print(visible(text), **kw)
