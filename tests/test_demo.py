"""``lovia-store demo``, the README's main job: a run killed mid-way resumes and lands once."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from lovia_store import SQLiteCheckpointer, SQLiteSession
from lovia_store.demo import RUN_ID, SESSION


def test_demo_crashes_resumes_and_replays(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("lovia-store")
    done = subprocess.run(
        [str(script), "demo"], cwd=tmp_path, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "worker exit status: -9" in out
    assert "send_email [call-3]: NO RESULT (dangling)" in out
    assert "model calls: 1" in out and "Tools executed again: send_email." in out
    assert "duplicate suppressed by idempotency key" in out
    assert "replayed=True, model calls=0, same output: True" in out

    async def stored() -> tuple[int, int, object]:
        path = tmp_path / "lovia-store.sqlite3"
        async with SQLiteSession(path) as session, SQLiteCheckpointer(path) as cp:
            segments = await session.segments(SESSION)
            snapshot = await cp.load(RUN_ID)
        assert snapshot is not None
        return len(segments), len(segments[0].entries), snapshot.status

    assert asyncio.run(stored()) == (1, 9, "completed")
