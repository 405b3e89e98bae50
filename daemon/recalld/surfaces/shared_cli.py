"""``recalld shared up|down|status|init|add-member|compact``: try, set up, look at and compact a
shared store."""

from __future__ import annotations

import argparse
import json
import os
import secrets
from typing import Any

from recalld.config import Config
from recalld.errors import BadRequest, ConfigError, Forbidden, RecalldError, Unavailable
from recalld.surfaces import exit_codes


def add_parser(sub: Any) -> None:
    """The ``shared`` subcommand and its actions."""
    sh = sub.add_parser("shared", help="a shared store on PostgreSQL + pgvector (machines, teams)")
    sh.add_argument(
        "action",
        choices=["up", "down", "status", "init", "add-member", "compact"],
        help="up/down/status: an embedded PostgreSQL under the data dir; init: create the schema "
        "in a database you run (--admin-url); add-member NAME: a login for a person; compact: "
        "rewrite the store's tables so deleted and forgotten text leaves its files (locks each "
        "table while it runs)",
    )
    sh.add_argument("name", nargs="?", help="the member's name (add-member)")
    sh.add_argument("--team", action="append", default=[], help="a team of the member")
    sh.add_argument("--listen", default="127.0.0.1", help="address the embedded server listens on")
    sh.add_argument("--port", type=int, default=None, help="port of the embedded server")
    sh.add_argument(
        "--admin-url",
        default=None,
        help="an administrator's postgresql:// URL (password in RECALLD_SHARED_ADMIN_PASSWORD); "
        "default: the embedded server's",
    )
    sh.add_argument("--password-file", default=None, help="add-member: write the password here")
    sh.add_argument(
        "--reset-password",
        action="store_true",
        help="add-member for an existing member: give it a new password (its other machines "
        "need it too) and, with --team, new teams",
    )
    sh.add_argument("--json", action="store_true", help="print JSON")


def main(args: argparse.Namespace, config: Config) -> int:
    """Run one ``shared`` action."""
    from recalld.shared import embedded

    base = config.base_dir
    if args.action == "up":
        info = embedded.up(base, listen=args.listen, port=args.port)
        _print(
            args,
            info,
            [
                f"shared store running: {info['url']} (data in {info['data']})",
                "add each person:  recalld shared add-member NAME --team TEAM",
                'then in their config.toml:  [shared] url = "' + info["url"] + '"  member = "NAME"',
            ],
        )
        return exit_codes.OK
    if args.action == "down":
        stopped = embedded.down(base)
        print("stopped" if stopped else "the embedded shared store was not running")
        return exit_codes.OK
    if args.action == "status":
        info = embedded.status(base)
        if info["running"]:
            line = f"the embedded shared store runs: {info['url']} (data in {info['data']})"
        else:
            line = f"the embedded shared store is not running (`recalld shared up`; {info['data']})"
        _print(args, info, [line])
        return exit_codes.OK
    admin = _admin_url(args, base)
    try:
        return _administer(args, admin)
    except ImportError as exc:
        raise ConfigError(
            f"psycopg is not installed ({exc.name}): pip install 'recalld[shared]'"
        ) from None
    except Exception as exc:  # noqa: BLE001 - PostgreSQL's errors said as recalld's own
        raise _store_error(admin, exc) from None


def _administer(args: argparse.Namespace, admin: str) -> int:
    """``init``, ``add-member`` or ``compact`` with the administrator's URL."""
    if args.action == "init":
        _init(admin)
        print("the recalld schema is ready")
        return exit_codes.OK
    if args.action == "compact":
        return _compact(args, admin)
    return _add_member(args, admin)


def _store_error(admin: str, exc: Exception) -> Exception:
    """A store's error as recalld's own: unreachable, not allowed, or what PostgreSQL said."""
    import psycopg

    from recalld.shared.settings import redact_url

    if isinstance(exc, RecalldError) or not isinstance(exc, psycopg.Error):
        return exc
    if isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return Unavailable(f"cannot reach the shared store at {redact_url(admin)}: {first}")
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return Forbidden(f"the shared store refused: {str(exc).strip().splitlines()[0]}")
    return RecalldError(f"the shared store failed: {str(exc).strip().splitlines()[0]}")


def _compact(args: argparse.Namespace, admin: str) -> int:
    import sys

    from recalld.shared.compact import compact, summary

    info = compact(admin, say=lambda line: print(line, file=sys.stderr, flush=True))
    _print(args, info, summary(info))
    return exit_codes.UNAVAILABLE if info["busy"] else exit_codes.OK


def _admin_url(args: argparse.Namespace, base: Any) -> str:
    from recalld.shared import embedded
    from recalld.shared.settings import with_login

    if args.admin_url:
        from urllib.parse import urlsplit

        user = urlsplit(args.admin_url).username
        return with_login(args.admin_url, user, os.environ.get("RECALLD_SHARED_ADMIN_PASSWORD"))
    return embedded.Embedded(base).admin_url()


def _init(admin_url: str) -> None:
    import psycopg

    from recalld.shared.schema import migrate

    with psycopg.connect(admin_url, connect_timeout=10, autocommit=True) as conn:
        migrate(conn, say=lambda line: print(line, flush=True))


def _add_member(args: argparse.Namespace, admin_url: str) -> int:
    import psycopg

    from recalld.shared.schema import add_member

    if not args.name:
        raise BadRequest("add-member needs the member's NAME")
    password = secrets.token_urlsafe(18)
    teams = list(args.team) if args.team or not args.reset_password else None
    with psycopg.connect(admin_url, connect_timeout=10, autocommit=True) as conn:
        role, teams = add_member(
            conn, args.name, password, teams, reset_password=args.reset_password
        )
    if args.password_file:
        fd = os.open(args.password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(password + "\n")
    elif not args.json:
        print(f"password of {role} (shown once; give it to {args.name}): {password}")
    info: dict[str, Any] = {"member": args.name, "role": role, "teams": teams}
    info["password_reset"] = bool(args.reset_password)
    if args.json and not args.password_file:
        info["password"] = password
    lines = [
        f'{args.name} can now set [shared] member = "{args.name}" and keep the password in '
        "RECALLD_SHARED_PASSWORD or a chmod-600 file named by shared.password_file"
    ]
    if args.reset_password:
        lines = [
            f"{args.name}'s password was reset (teams: {', '.join(teams) or 'none'}): the old "
            f"one no longer works; give the new one to every machine of {args.name}'s "
            "(RECALLD_SHARED_PASSWORD or the file named by shared.password_file)"
        ]
    _print(args, info, lines)
    return exit_codes.OK


def _print(args: argparse.Namespace, info: dict[str, Any], lines: list[str] | None) -> None:
    if args.json or lines is None:
        print(json.dumps(info, indent=None if args.json else 1))
    else:
        print("\n".join(lines))
