"""Encrypted, a database holds no plaintext of what was stored: the SQLite file's bytes
(with its WAL) and a dump of the server's database are searched for every document's
text, written through all three APIs. The same history written without keys is found
there, so the search would see a leak."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from backends import fresh_server_database
from helpers import call, result, say, user
from lovia_store import (
    CompactedMessage,
    Database,
    RunHead,
    SQLCheckpointer,
    SQLSession,
    SQLSessionStorage,
    generate_encryption_key,
)

NEEDLES = {
    "input": "needle-input-4d1c",
    "assistant": "needle-assistant-9b2e",
    "arguments": "needle-arguments-77aa",
    "output": "needle-output-5e6f",
    "meta": "needle-meta-0c3d",
    "metadata": "needle-metadata-a8b9",
    "tags": "needle-tags-13f0",
    "summary": "needle-summary-e2d4",
    "head": "needle-head-6a7b",
    "effect": "needle-effect-f9c1",
}
OUTPUT = "".join(f"{i:4}  {NEEDLES['output']} = compute({i})\n" for i in range(200))


async def write_history(db: Database) -> None:
    session = SQLSession(db)
    for turn in range(2):  # the output twice: stored once, referred to twice
        await session.append(
            "s",
            [
                user(f"{NEEDLES['input']} {turn}"),
                call(f"c{turn}", "read_file", f'{{"path": "{NEEDLES["arguments"]}"}}'),
                result(f"c{turn}", OUTPUT),
                say(f"{NEEDLES['assistant']} {turn}"),
            ],
            meta={"note": NEEDLES["meta"]},
        )
    storage = SQLSessionStorage(db)
    await storage.append(
        "raw",
        "req-1",
        user("raw log message"),
        metadata={"who": NEEDLES["metadata"]},
        tags={"tag": NEEDLES["tags"]},
    )
    await storage.snapshot(
        "raw", CompactedMessage(content=NEEDLES["summary"]), 1, expected_version=0
    )
    checkpointer = SQLCheckpointer(db)
    head = RunHead(agent_name=NEEDLES["head"], status="running", turns=1, updated_at=1.0)
    await checkpointer.append("run", [result("c9", OUTPUT)], head, session_id="s")
    await checkpointer.run_effect(
        "run", "c9", "write", lambda _: NEEDLES["effect"], lambda v: result("c9", v)
    )


@pytest.fixture(params=["sqlite", "postgres", "mariadb"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "at-rest.sqlite3")
        return
    async with fresh_server_database(request.param) as created:
        yield created


def stored_bytes(url: str) -> bytes:
    """Every byte the database keeps: a SQLite file and its WAL, or a server's dump."""
    if "://" not in url:
        path = Path(url)
        return b"".join(
            p.read_bytes()
            for p in (path, Path(f"{path}-wal"), Path(f"{path}-journal"))
            if p.exists()
        )
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        command = [
            shutil.which("pg_dump") or "pg_dump",
            "-h",
            parsed.host or "127.0.0.1",
            "-p",
            str(parsed.port or 5432),
            "-U",
            parsed.username or "postgres",
            "--no-owner",
            parsed.database or "",
        ]
    else:
        command = [
            shutil.which("mariadb-dump") or "mysqldump",
            "-h",
            parsed.host or "127.0.0.1",
            "-P",
            str(parsed.port or 3306),
            "-u",
            parsed.username or "root",
            "--hex-blob",
            parsed.database or "",
        ]
    env = {**os.environ, "PGPASSWORD": parsed.password or "", "MYSQL_PWD": parsed.password or ""}
    return subprocess.run(command, check=True, capture_output=True, env=env, timeout=120).stdout


@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted", "in-clear"])
async def test_a_database_holds_no_plaintext_of_what_was_stored(url: str, encrypted: bool) -> None:
    keys = [generate_encryption_key()] if encrypted else None
    async with Database(url, encryption_keys=keys) as db:
        await write_history(db)
        if db.is_sqlite:  # what a reader of the file sees once the WAL is folded in, too
            with sqlite3.connect(url) as conn:
                conn.execute("PRAGMA wal_checkpoint(FULL)")
        data = stored_bytes(url)
        found = {name for name, needle in NEEDLES.items() if needle.encode() in data}
        if encrypted:
            assert found == set()
            # ... and every document still reads back.
            assert len(await SQLSession(db).load("s")) == 8
        else:
            # The search sees what is in clear: the shared output is compressed, so only
            # the short documents' text stands as written.
            assert {"input", "assistant", "arguments", "metadata", "tags", "effect"} <= found
