"""The command line on a real terminal and in real pipes.

Every test here runs the installed ``lovia-store`` console script as a process:
on a pseudo-terminal (``pty``) to see what a person sees (styled tables, the
progress display, stored escape sequences neutralised), and into pipes to see what a
script sees (no styling, a reader that leaves early, JSON that round-trips).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import lovia_store
from helpers import a_run, call, result, say, user
from lovia_store import Database, SQLiteSession, SQLSession, TranscriptEntry, entry_to_dict
from lovia_store.db import progress

SCRIPT = Path(sys.executable).with_name("lovia-store")

# Stored content a model or an attacker chose: a window-title OSC, clear-screen, colours,
# an 8-bit CSI (C1), a bell, a backspace and a right-to-left override.
EVIL_ID = "evil\x1b]0;pwned\x07-\u202eid"
EVIL_TEXT = "\x1b[2J\x1b[31mRED\x1b[0m \x9b31mC1 back\x08space"
EVIL_RUN: list[TranscriptEntry] = [
    user(EVIL_TEXT),
    call("c\x1b[8m1", name="hide\x1b[8m", arguments='{"x": "\x1b[5m"}'),
    result("c\x1b[8m1", "out\x1b]52;c;Y2xpcGJvYXJk\x07"),
    say("bye\u202e"),
]
RAW_ESCAPES = [b"\x1b]0;", b"\x1b[2J", b"\x1b[31mRED", b"\x1b[8m", b"\x1b]52;", b"\x07"]
RAW_ESCAPES += ["\x9b".encode(), "\u202e".encode()]
LONG_ID = "a-session-id-far-longer-than-the-terminal-is-wide-" * 2
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


def clean_env(**extra: str) -> dict[str, str]:
    drop = ("LOVIA_STORE_URL", "NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "TTY_COMPATIBLE")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


def on_terminal(*args: str, cwd: Path, columns: int = 100) -> tuple[int, bytes]:
    """Run ``lovia-store ARGS`` with stdin, stdout and stderr on a new pseudo-terminal."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    process = subprocess.Popen(
        [str(SCRIPT), *args],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        cwd=cwd,
        env=clean_env(TERM="xterm-256color"),
        start_new_session=True,
    )
    os.close(follower)
    received = bytearray()
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: every end of the terminal is closed, the process is done
                break
            if not chunk:
                break
            received += chunk
    finally:
        os.close(leader)
    return process.wait(timeout=60), bytes(received)


def piped(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(SCRIPT), *args], cwd=cwd, env=clean_env(), capture_output=True, timeout=120
    )


def visible(screen: bytes) -> str:
    """What the terminal shows, styling removed."""
    return ANSI.sub(b"", screen).decode().replace("\r\n", "\n")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database whose stored ids and text carry terminal escape sequences."""
    path = tmp_path_factory.mktemp("hostile") / "store.sqlite3"

    async def write() -> None:
        async with SQLiteSession(path) as store:
            await store.append(EVIL_ID, EVIL_RUN, run_id="run\x1b[1m-1")
            await store.append(LONG_ID, a_run("x"), run_id="r1")

    asyncio.run(write())
    return path


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,500 sessions and one 600-run session: more output than a pipe buffers (64 KiB)."""
    path = tmp_path_factory.mktemp("crowded") / "store.sqlite3"

    async def write() -> None:
        async with Database(path, wal=True, synchronous="normal") as db:
            store = SQLSession(db)
            for n in range(600):  # about 200 bytes a run, as `show` prints it
                run = [user(f"question {n} " + "x" * 150), say("answer")]
                await store.append("long", run, run_id=f"r{n}")
            for n in range(1500):  # about 100 bytes a row in `sessions`
                await store.append(f"session-{n:05}-" + "x" * 50, [user("hi")], run_id="r")

    asyncio.run(write())
    return path


# -- a reader that leaves early ------------------------------------------------------------------


@pytest.mark.parametrize("command", ["sessions", "show", "demo"])
def test_a_reader_that_leaves_early_ends_it_quietly(
    command: str, crowded: Path, tmp_path: Path
) -> None:
    """``lovia-store sessions | head -1``: no BrokenPipeError, the exit status of SIGPIPE,
    and the demo still removes its temporary database."""
    args = {
        "sessions": ["sessions", "--limit", "0", str(crowded)],
        "show": ["show", "long", str(crowded)],
        "demo": ["demo"],
    }[command]
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    process = subprocess.Popen(
        [str(SCRIPT), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=clean_env(TMPDIR=str(scratch)),
    )
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()
    process.stdout.close()  # what `head -1` does after its line
    errors = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141, errors
    assert first.strip(), "nothing was printed before the reader left"
    assert "Traceback" not in errors and "BrokenPipe" not in errors and "Exception" not in errors
    assert list(scratch.iterdir()) == []


# -- stored escape sequences -----------------------------------------------------------------


def test_stored_escape_sequences_are_printed_escaped(hostile: Path, tmp_path: Path) -> None:
    """``sessions`` and ``show`` write control characters out (``\\x1b``), never raw."""
    listed = piped("sessions", str(hostile), cwd=tmp_path)
    shown = piped("show", EVIL_ID, str(hostile), cwd=tmp_path)
    for done in (listed, shown):
        assert done.returncode == 0, done.stderr
        assert b"\x1b" not in done.stdout  # no styling into a pipe, and no stored escapes
        for raw in RAW_ESCAPES:
            assert raw not in done.stdout, raw
    assert "evil\\x1b]0;pwned\\x07-\\u202eid" in listed.stdout.decode()
    text = shown.stdout.decode()
    assert "── run 1: run\\x1b[1m-1" in text
    assert "user: \\x1b[2J\\x1b[31mRED\\x1b[0m \\x9b31mC1 back\\x08space" in text
    assert "tool> hide\\x1b[8m(" in text and "[c\\x1b[8m1]" in text
    assert "out\\x1b]52;c;Y2xpcGJvYXJk\\x07" in text and "bye\\u202e" in text


def test_json_gives_back_the_exact_strings_and_no_raw_controls(
    hostile: Path, tmp_path: Path
) -> None:
    """``--json`` is safe on a terminal too, and decodes to exactly what is stored."""
    listed = piped("sessions", "--json", str(hostile), cwd=tmp_path)
    shown = piped("show", "--json", EVIL_ID, str(hostile), cwd=tmp_path)
    for done in (listed, shown):
        assert done.returncode == 0, done.stderr
        for raw in [b"\x1b", *RAW_ESCAPES]:
            assert raw not in done.stdout, raw
    sessions = json.loads(listed.stdout)["sessions"]
    assert {s["session_id"] for s in sessions} == {EVIL_ID, LONG_ID}
    (run,) = json.loads(shown.stdout)["runs"]
    assert run["run_id"] == "run\x1b[1m-1"
    assert run["entries"] == [entry_to_dict(e) for e in EVIL_RUN]


# -- on a terminal ---------------------------------------------------------------------------


def test_on_a_terminal_tables_are_styled_fit_and_stay_neutralised(
    hostile: Path, tmp_path: Path
) -> None:
    code, screen = on_terminal("sessions", str(hostile), cwd=tmp_path, columns=60)
    assert code == 0, screen
    assert b"\x1b[1m" in screen  # the header is bold: rich styles a terminal's table
    for raw in RAW_ESCAPES:
        assert raw not in screen, raw
    lines = visible(screen).splitlines()
    assert all(len(line.rstrip()) <= 60 for line in lines), lines
    assert "─" * 20 in lines[1]
    text = "".join(line.split()[0] for line in lines[2:] if line.strip())
    assert LONG_ID in text  # folded over several lines, every character kept
    assert "evil\\x1b]0;pwned\\x07-\\u202eid" in text

    code, screen = on_terminal("show", EVIL_ID, str(hostile), cwd=tmp_path)
    assert code == 0, screen
    for raw in RAW_ESCAPES:
        assert raw not in screen, raw
    assert "user: \\x1b[2J\\x1b[31mRED" in visible(screen)


REVISIONS = len(list((Path(lovia_store.__file__).parent / "migrations" / "versions").glob("0*.py")))


def test_upgrade_shows_its_progress_on_a_terminal_only(
    legacy_copy: Callable[[str], Path], tmp_path: Path
) -> None:
    """A lovia 0.9 conversion on a terminal shows a live display: a bar for the schema's
    revisions and one for the sessions and checkpoints it converts, each to its end.
    Into a pipe, or with --json, nothing of it."""
    on_tty = legacy_copy("lovia-0.9.119.sqlite3")
    code, screen = on_terminal("upgrade", str(on_tty), cwd=tmp_path, columns=120)
    assert code == 0, screen
    assert b"\x1b[?25l" in screen and b"\x1b[?25h" in screen  # a live display ran
    shown = visible(screen)
    assert "upgrading " in shown
    assert re.search(rf"schema revisions\s+━+\s+{REVISIONS}/{REVISIONS}", shown), shown
    assert re.search(r"lovia 0\.9 sessions\s+━+\s+2/2", shown), shown  # alice and bob
    assert re.search(r"lovia 0\.9 checkpoints\s+━+\s+(\d+)/\1", shown), shown
    assert "converted lovia 0.9's tables: session_runs" in shown

    done = piped("upgrade", str(legacy_copy("lovia-0.9.119.sqlite3")), cwd=tmp_path)  # afresh
    assert done.returncode == 0, done.stderr
    assert done.stderr == b""
    assert b"\x1b" not in done.stdout and b"revisions" not in done.stdout
    assert b"converted lovia 0.9's tables" in done.stdout

    as_json = legacy_copy("lovia-0.9.119.sqlite3")  # afresh, on a terminal, as JSON
    code, screen = on_terminal("upgrade", "--json", str(as_json), cwd=tmp_path)
    assert code == 0, screen
    assert b"\x1b[?25l" not in screen and b"revisions" not in screen
    assert json.loads(visible(screen))["converted"] == {
        "lovia 0.9": ["session_runs", "snapshot_heads", "snapshot_turns"]
    }


def test_a_zett_conversion_shows_its_sessions_and_messages(
    legacy_copy: Callable[[str], Path], tmp_path: Path
) -> None:
    code, screen = on_terminal("upgrade", str(legacy_copy("zett-0.2.1.sqlite3")), cwd=tmp_path)
    assert code == 0, screen
    shown = visible(screen)
    assert re.search(r"zett-agent sessions\s+━+\s+(\d+)/\1", shown), shown
    assert "zett-agent messages" in shown
    assert "converted zett-agent's tables" in shown


# -- the reports the bars are drawn from -------------------------------------------------------


async def test_an_upgrade_reports_its_steps_to_whoever_asked(
    legacy_copy: Callable[[str], Path],
) -> None:
    """``lovia_store.db.progress.reporting``: each revision and each converted session, in
    order, from the SQLite writer thread; the library reports to nobody otherwise."""
    reports: list[tuple[str, int, int | None]] = []
    with progress.reporting(lambda *report: reports.append(report)):
        await lovia_store.upgrade(legacy_copy("lovia-0.9.119.sqlite3"))
    revisions = [r for r in reports if r[0] == "schema revisions"]
    assert revisions == [("schema revisions", n, REVISIONS) for n in range(REVISIONS + 1)]
    sessions = [r for r in reports if r[0] == "lovia 0.9 sessions"]
    assert sessions == [("lovia 0.9 sessions", n, 2) for n in range(3)]
    assert reports.index(sessions[-1]) < reports.index(revisions[1])  # inside revision 0001
    assert progress.current() is None
    before = len(reports)
    await lovia_store.upgrade(legacy_copy("lovia-0.9.119.sqlite3"))  # afresh, nobody asked
    assert len(reports) == before


@pytest.mark.postgres
async def test_a_server_upgrade_reports_its_revisions(pg_url: str) -> None:
    reports: list[tuple[str, int, int | None]] = []
    with progress.reporting(lambda *report: reports.append(report)):
        await lovia_store.upgrade(pg_url)
    assert reports == [("schema revisions", n, REVISIONS) for n in range(REVISIONS + 1)]
