"""Crash tests with real processes: a worker is SIGKILLed at every boundary of a run.

The boundaries: after each checkpoint write (the input, each model turn, each tool
result, the finalization, which is also "between finalization and the session
append") and after the session append (before ``delete_on_success``). After each
kill, re-issuing the same call must finish the run: the session holds it exactly
once, no entry is duplicated, no tool call ran twice, and the result equals an
uninterrupted run's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from backends import create_pg_database, drop_pg_database
from lovia_store import Database, SQLCheckpointer, SQLSession, entry_to_dict

CHILD = Path(__file__).with_name("crash_child.py")
CHECKPOINT_WRITES = 8  # input, turn 1, 2 results, turn 2, 1 result, turn 3, finalization
KILL_POINTS = [f"cp:{n}" for n in range(1, CHECKPOINT_WRITES + 1)] + ["session"]

pytestmark = pytest.mark.slow


def child(url: str, kill: str, log: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), url, kill, str(log)],
        capture_output=True,
        text=True,
        timeout=120,
    )


async def stored(url: str) -> tuple[list[Any], object]:
    async with Database(url) as db:
        segments = await SQLSession(db).segments("crash-session")
        snapshot = await SQLCheckpointer(db).load("crash-run")
    return segments, snapshot


@pytest.fixture(params=["sqlite", "postgres"])
async def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A factory of fresh databases of one kind (one per kill point)."""
    made: list[str] = []

    async def make(name: str) -> str:
        if request.param == "sqlite":
            return str(tmp_path / f"{name}.sqlite3")
        url = await create_pg_database()
        made.append(url)
        return url

    yield make
    for url in made:
        await drop_pg_database(url)


async def test_every_kill_point_heals_on_reissue(fresh_url: Any, tmp_path: Path) -> None:
    reference_url = await fresh_url("reference")
    reference_log = tmp_path / "reference.log"
    clean = child(reference_url, "none", reference_log)
    assert clean.returncode == 0, clean.stderr
    expected = json.loads(clean.stdout)
    assert expected["appends"] == CHECKPOINT_WRITES
    assert Counter(reference_log.read_text().split()) == {"a": 1, "b": 1, "c": 1}

    for point in KILL_POINTS:
        url = await fresh_url(point.replace(":", "-"))
        log = tmp_path / f"{point.replace(':', '-')}.log"
        killed = child(url, point, log)
        assert killed.returncode == -9, f"{point}: {killed.stderr}"
        segments, _ = await stored(url)
        finished = point in ("cp:8", "session")  # past the finalization only the append remains
        if point != "session":
            assert segments == [], f"{point}: an interrupted run reached the session"

        healed = child(url, "none", log)
        assert healed.returncode == 0, f"{point}: {healed.stderr}"
        result = json.loads(healed.stdout)
        assert result["output"] == expected["output"], point
        assert result["entries"] == expected["entries"], point
        assert result["replayed"] is finished, point
        segments, snapshot = await stored(url)
        assert [s.run_id for s in segments] == ["crash-run"], point
        assert [entry_to_dict(e) for e in segments[0].entries] == expected["entries"], point
        timing = segments[0].meta["timing"]
        assert timing["started_at"] <= timing["finished_at"], point
        assert snapshot is None, f"{point}: delete_on_success left the snapshot"
        runs = Counter(log.read_text().split())
        assert runs == {"a": 1, "b": 1, "c": 1}, f"{point}: tools ran {dict(runs)}"
