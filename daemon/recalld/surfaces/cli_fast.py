"""The fast path of ``recalld search|get|status``: a running daemon, the client, nothing else.

Agents shell out to ``recalld search`` many times a session; through the full CLI each call paid
for argparse's whole tree, the config machinery and (via the in-process fallback's imports)
numpy and apsw, while the daemon answers in milliseconds. This module reads the common forms of
those three commands by hand, asks the daemon through :mod:`recalld_client`, and prints with
:mod:`recalld.surfaces.cli_output`, the printer the full CLI uses, so the output and exit codes are
the same. Anything else (another command, ``--help``, an option it does not know, a value argparse
would reject) goes to the full CLI, which answers as before; so does a call no daemon answers,
and the full CLI then answers in-process without asking the daemon again.
"""

from __future__ import annotations

import sys

from recalld.surfaces import exit_codes

TYPE_CHECKING = False  # mypy takes it as true; typing costs ~3 ms of `recalld search` start-up
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

COMMANDS = ("search", "get", "status")
NO_DAEMON = "no daemon"  # what run() says when no daemon answered hello

# option -> (parameter, kind); kind: "flag", "int", "count" (1-1000: --max), "float", "str", or
# a tuple of choices.
# Values go through the same conversions argparse applies (int(), float(), the choices).
_SEARCH: dict[str, tuple[str, Any]] = {
    "--max": ("max_results", "count"),
    "--min-score": ("min_score", "float"),
    "--source": ("sources", ("memory", "sessions")),
    "--path-prefix": ("path_prefix", "str"),
    "--kind": ("kinds", ("note", "message", "tool_call", "tool_output")),
    "--tag": ("tags", "str"),
    "--since": ("since", "str"),
    "--until": ("until", "str"),
    "--project": ("project", "str"),
    "--session": ("session", "str"),
    "--mode": ("mode", ("hybrid", "keyword", "vector")),
    "--max-tokens": ("max_tokens", "int"),
    "--explain": ("explain", "flag"),
    "--json": ("json", "flag"),
}
_GET: dict[str, tuple[str, Any]] = {"--decoded": ("decoded", "flag"), "--json": ("json", "flag")}
_STATUS: dict[str, tuple[str, Any]] = {"--json": ("json", "flag")}
_OPTIONS = {"search": _SEARCH, "get": _GET, "status": _STATUS}
_REPEATED = ("sources", "kinds", "tags")  # action="append" in the full parser


def main(argv: Sequence[str] | None = None) -> int:
    """The ``recalld`` console script: this fast path, else the full CLI (:mod:`.cli`)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["hook"] and len(args) == 2:  # runs at every agent session start: no argparse
        from recalld.surfaces.hooks import main as hook_main

        return hook_main(args[1:])
    code = run(args)
    if isinstance(code, int):
        return code
    from recalld.surfaces.cli import full_main

    # No daemon answered: the full CLI answers in-process without asking (and waiting) again.
    return full_main(args, daemon_absent=code == NO_DAEMON)


def parse(argv: Sequence[str]) -> dict[str, Any] | None:
    """The command and its options, or None when only the full parser can judge ``argv``."""
    if not argv or argv[0] not in COMMANDS:
        return None  # includes global options (--config, -v, --help) before the command
    command, options = argv[0], _OPTIONS[argv[0]]
    out: dict[str, Any] = {"command": command, "json": False}
    words: list[str] = []
    words_ended = False  # argparse takes one run of positional words; a second run is an error
    i = 1
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-") or arg == "-":
            if words_ended:
                return None
            words.append(arg)
        else:
            if words:
                words_ended = True
            name, eq, inline = arg.partition("=")
            spec = options.get(name)
            if spec is None:  # --help, abbreviations, "--", negative numbers, typos
                return None
            dest, kind = spec
            if kind == "flag":
                if eq:
                    return None
                out[dest] = True
            else:
                if eq:
                    raw = inline
                elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                    i += 1
                    raw = argv[i]
                else:
                    return None
                value = _convert(raw, kind)
                if value is None:
                    return None
                if dest in _REPEATED:
                    out.setdefault(dest, []).append(value)
                else:
                    out[dest] = value
        i += 1
    if command == "status":
        return None if words else out
    if command == "get":
        if len(words) != 1:
            return None
        out["target"] = words[0]
        return out
    if not words:
        return None
    out["query"] = " ".join(words)
    return out


def _convert(raw: str, kind: Any) -> Any:
    """``raw`` as argparse would convert it, or None where argparse would complain."""
    try:
        if kind == "int":
            return int(raw)
        if kind == "count":  # out of range: the full CLI's argparse says so
            return n if 1 <= (n := int(raw)) <= 1000 else None
        if kind == "float":
            return float(raw)
    except ValueError:
        return None
    if isinstance(kind, tuple):
        return raw if raw in kind else None
    return raw


def run(argv: Sequence[str]) -> int | str | None:
    """Answer ``argv`` through a running daemon: the exit code, or :data:`NO_DAEMON` when none
    answered, or None when only the full CLI can judge ``argv``."""
    opts = parse(argv)
    if opts is None:
        return None
    client = None
    try:
        from recalld.surfaces.daemon_connect import connect

        client = connect()
        if client is None:
            return NO_DAEMON  # none (or none that answers): the in-process path
        return _answer(client, opts)
    except KeyboardInterrupt:
        return exit_codes.INTERRUPTED
    except BrokenPipeError:
        return exit_codes.OK
    except Exception as exc:  # the client's and the daemon's errors, as the full CLI maps them
        code = getattr(exc, "code", None)
        if code is None and not type(exc).__module__.startswith("recalld_client"):
            raise
        if _damaged(exc):
            print(
                f"recalld: the index is damaged ({exc}): start the daemon (`recalld serve` or "
                "the service), which moves it aside and rebuilds it from your files",
                file=sys.stderr,
            )
            return exit_codes.INDEX
        from recalld.surfaces.terminal_text import visible  # errors quote paths and queries

        print(f"recalld: {visible(str(exc))}", file=sys.stderr)
        return exit_codes.for_code(code)
    finally:
        if client is not None:
            client.close()


def _answer(client: Any, opts: dict[str, Any]) -> int:
    from recalld.surfaces import cli_output

    command, as_json = opts["command"], opts["json"]
    if command == "search":
        max_tokens = opts.get("max_tokens")
        if max_tokens is not None:
            from recalld.retrieval.answer_budget import check_budget  # imports json

            check_budget(max_tokens)
        params = {k: v for k, v in opts.items() if k not in ("command", "json", "max_tokens")}
        if not params.get("path_prefix"):
            params.pop("path_prefix", None)  # as the full CLI: an empty prefix is no filter
        params.setdefault("mode", "hybrid")  # the full parser's default
        query = params.pop("query")
        cli_output.print_search(client.search(query, **params), as_json, max_tokens)
    elif command == "get":
        from recalld.surfaces.cli_paths import with_cwd_fallback

        decoded = opts.get("decoded", False)
        res = with_cwd_fallback(lambda t: client.get(t, decoded=decoded), opts["target"])
        cli_output.print_get(res, as_json)
    else:
        cli_output.print_status(client.status(), as_json)
    return exit_codes.OK


def _damaged(exc: BaseException) -> bool:
    """The text test of recalld.index.index_health.is_corruption (which needs apsw to import)."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return False
        text = str(seen)
        if "database disk image is malformed" in text or "file is not a database" in text:
            return True
        seen = seen.__cause__ or seen.__context__
    return False
