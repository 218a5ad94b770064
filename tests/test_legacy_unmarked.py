"""A lovia file without ``lovia_schema`` (lovia wrote its first session files without one)
never opens as an empty session.

The files are written by the real lovia 0.9.119, then its ``lovia_schema`` table is
dropped, which leaves exactly the layout lovia had before it kept one (its session
store has no migrations since). Tables that are exactly lovia's are converted, as a
marked file's are, with a copy kept; tables with lovia's columns and more are refused
with the adopting command named, nothing written, and lovia still reads them.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from pathlib import Path

import lovia
import pytest
from lovia.transcript import AssistantTextEntry, InputEntry

import lovia_store
from lovia_store import LegacyTableError, check, entry_to_dict, upgrade
from lovia_store.cli import main
from lovia_store.integrations import lovia as drop_in

Capsys = pytest.CaptureFixture[str]


def lovias_run(text: str) -> list[object]:
    return [
        InputEntry(role="user", content=text),
        AssistantTextEntry(content=f"re: {text}"),
    ]


async def unmarked_file(path: Path, *, extra_column: bool = False) -> list[dict[str, object]]:
    """A session file lovia wrote, without its ``lovia_schema``; what lovia reads from it."""
    store = lovia.SQLiteSession(path)
    await store.append("u1", lovias_run("My project is called Atlas."), run_id="r1")
    await store.append("u1", lovias_run("And its owner is Mia."), run_id="r2", meta={"k": 1})
    await store.append("u2", lovias_run("hello"), run_id="r1")
    seen = await lovias_view(path)
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE lovia_schema")
        if extra_column:
            conn.execute("ALTER TABLE session_runs ADD COLUMN note TEXT")
    return seen


async def lovias_view(path: Path) -> list[dict[str, object]]:
    """Every segment of u1 and u2 as the real lovia reads them (opening the file, lovia
    gives it a ``lovia_schema`` table: read a copy to keep a file unmarked)."""
    store = lovia.SQLiteSession(path)
    return [
        {
            "session": sid,
            "run_id": s.run_id,
            "entries": [repr(e) for e in s.entries],
            "meta": s.meta,
        }
        for sid in ("u1", "u2")
        for s in await store.segments(sid)
    ]


def copied(path: Path) -> Path:
    copy = path.with_name(f"lovia-reads-{path.name}")
    copy.write_bytes(path.read_bytes())
    return copy


def files(folder: Path) -> list[Path]:
    return sorted(folder.iterdir())


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tables(path: Path) -> set[str]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


async def test_exactly_lovia_s_tables_convert_and_read_back_as_lovia_shows(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    seen_by_lovia = await unmarked_file(path)
    assert "lovia_schema" not in tables(path) and len(seen_by_lovia) == 3

    async with drop_in.SQLiteSession(path) as session:
        u1 = await session.segments("u1")
        got = [
            {"run_id": s.run_id, "entries": [repr(e) for e in s.entries], "meta": s.meta}
            for s in u1
        ]
    expected = [{k: v for k, v in s.items() if k != "session"} for s in seen_by_lovia[:2]]
    assert got == expected
    assert "session_runs" not in tables(path)
    # The copy kept first is the original, which lovia still reads as before.
    (kept,) = [p for p in files(tmp_path) if ".before-lovia-store-" in p.name]
    assert await lovias_view(kept) == seen_by_lovia
    await check(path)


async def test_the_native_store_shows_the_same_history(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    await unmarked_file(path)
    async with lovia_store.SQLiteSession(path) as session:
        entries = [entry_to_dict(e) for e in await session.load("u1")]
        assert len(entries) == 4
        assert entries[0]["content"] == "My project is called Atlas."
        assert [s.run_id for s in await session.segments("u2")] == ["r1"]


async def test_tables_not_exactly_lovia_s_are_refused_untouched_and_lovia_still_reads_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "chat.db"
    seen_by_lovia = await unmarked_file(path, extra_column=True)
    before = digest(path)
    for opening in (
        lambda: drop_in.SQLiteSession(path).segments("u1"),
        lambda: lovia_store.SQLiteSession(path).load("u1"),
        lambda: upgrade(path),
    ):
        with pytest.raises(LegacyTableError) as refused:
            await opening()
        assert refused.value.tables == ["session_runs"]
        assert "lovia-store upgrade --adopt-lovia" in str(refused.value)
    assert digest(path) == before
    assert [p.name for p in files(tmp_path)] == ["chat.db"]  # no copy, no journal left
    assert await lovias_view(copied(path)) == seen_by_lovia  # lovia is not locked out


def test_the_command_line_names_and_runs_the_adopting_upgrade(
    tmp_path: Path, capsys: Capsys
) -> None:
    path = tmp_path / "chat.db"
    asyncio.run(unmarked_file(path, extra_column=True))
    capsys.readouterr()
    assert main(["upgrade", str(path)]) == 1  # needs an upgrade: the adopting one
    assert "lovia-store upgrade --adopt-lovia" in capsys.readouterr().err
    assert main(["check", str(path)]) == 1
    assert "session_runs" in capsys.readouterr().err

    assert main(["upgrade", "--adopt-lovia", str(path)]) == 0
    out = capsys.readouterr().out
    assert "converted lovia 0.9's tables: session_runs" in out
    assert "the original file is kept at" in out

    async def history() -> list[int]:
        async with lovia_store.SQLiteSession(path) as session:
            return [len(await session.load(sid)) for sid in ("u1", "u2")]

    assert asyncio.run(history()) == [4, 2]


async def test_a_host_table_that_only_shares_the_name_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "host.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE session_runs (id INTEGER PRIMARY KEY, session_id TEXT)")
        conn.execute("INSERT INTO session_runs (session_id) VALUES ('theirs')")
    async with lovia_store.SQLiteSession(path) as session:
        assert await session.load("theirs") == []
    assert "session_runs" in tables(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT session_id FROM session_runs").fetchall() == [("theirs",)]
