"""A file written by lovia 0.9.119 migrates in place and reads back exactly as its manifest says."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

from backends import LOVIA_MANIFEST
from lovia_store import SQLiteSession, check, entry_to_dict
from lovia_store.db.schema import KNOWN_VERSIONS

MANIFEST = LOVIA_MANIFEST


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


async def test_every_session_reads_back_as_the_manifest_says(
    legacy_copy: Callable[[str], Path],
) -> None:
    path = legacy_copy("lovia-0.9.119.sqlite3")
    async with SQLiteSession(path, wal=True) as store:
        for session in MANIFEST["sessions"]:
            segments = await store.segments(session["session_id"])
            expected = session["runs"]
            assert [s.run_id for s in segments] == [run["run_id"] for run in expected]
            for segment, run in zip(segments, expected, strict=True):
                assert [entry_to_dict(e) for e in segment.entries] == run["entries"]
                assert segment.meta == run["meta"]
            flat = [entry_to_dict(e) for e in await store.load(session["session_id"])]
            assert flat == [entry for run in expected for entry in run["entries"]]
    await check(path)


async def test_migration_replaces_lovia_tables_and_records_versions(
    legacy_copy: Callable[[str], Path],
) -> None:
    path = legacy_copy("lovia-0.9.119.sqlite3")
    assert {"session_runs", "snapshot_heads", "snapshot_turns", "lovia_schema"} <= tables(path)
    async with SQLiteSession(path) as store:
        await store.load("alice")
    after = tables(path)
    assert not {"session_runs", "snapshot_heads", "snapshot_turns"} & after
    assert {"lovia_messages", "lovia_session_runs", "lovia_run_heads", "lovia_run_entries"} <= after
    with sqlite3.connect(path) as conn:
        versions = dict(conn.execute("SELECT store, version FROM lovia_schema"))
        assert versions == KNOWN_VERSIONS == {"session": 1, "checkpoint": 3, "raw_log": 1}
        # Checkpoints are carried over, not dropped: every head and every entry.
        heads = dict(conn.execute("SELECT run_id, entry_count FROM lovia_run_heads"))
        expected = {
            c["run_id"]: sum(row["entry_count"] for row in c["turn_rows"])
            for c in MANIFEST["checkpoints"]
        }
        assert heads == expected
        stored = conn.execute(
            "SELECT run_id, entry_json FROM lovia_run_entries ORDER BY run_id, position"
        )
        by_run: dict[str, list[object]] = {}
        for run_id, document in stored:
            by_run.setdefault(run_id, []).append(json.loads(document))
        for checkpoint in MANIFEST["checkpoints"]:
            assert by_run.get(checkpoint["run_id"], []) == checkpoint["snapshot"]["entries"]


async def test_appending_after_migration_continues_the_sessions(
    legacy_copy: Callable[[str], Path],
) -> None:
    from helpers import a_run

    path = legacy_copy("lovia-0.9.119.sqlite3")
    async with SQLiteSession(path) as store:
        await store.append("alice", a_run("new"), run_id="run-alice-0005")
        await store.append("alice", a_run("dup"), run_id="run-alice-0001")  # already stored
        segments = await store.segments("alice")
        assert [s.run_id for s in segments][-2:] == ["run-alice-0004", "run-alice-0005"]
        assert len(segments) == 5
        assert segments[-1].entries == a_run("new")
