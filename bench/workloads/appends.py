"""W1 (sequential appends to one session) and W2 (20 sessions written concurrently)."""

from __future__ import annotations

import asyncio
import time

from bench import data
from bench.workloads.base import Metric, Stopwatch, TrialEnv, Workload, check, run_ids


async def _w1(env: TrialEnv) -> dict[str, float]:
    backend, n = env.backend, env.scale.w1_runs
    batch = [backend.convert_run(run) for run in data.runs(0, n)]
    ids = run_ids(n)
    with Stopwatch() as sw:
        for run, run_id in zip(batch, ids, strict=True):
            await backend.append_run("w1", run, run_id)
    stored = await backend.count("w1")
    check(
        stored == n * data.ENTRIES_PER_RUN,
        f"W1 stored {stored} entries, expected {n * data.ENTRIES_PER_RUN}",
    )
    return {"runs_per_s": n / sw.seconds}


async def _w2(env: TrialEnv) -> dict[str, float]:
    backend, scale = env.backend, env.scale
    per_session = [
        [backend.convert_run(run) for run in data.runs(s * scale.w2_runs, scale.w2_runs)]
        for s in range(scale.w2_sessions)
    ]
    failures = 0

    async def writer(index: int) -> int:
        nonlocal failures
        done = 0
        for run, run_id in zip(per_session[index], run_ids(scale.w2_runs), strict=True):
            try:
                await backend.append_run(f"w2-{index:03d}", run, run_id)
            except Exception:  # counted and reported; the other sessions go on
                failures += 1
            else:
                done += 1
        return done

    start = time.perf_counter()
    done = await asyncio.gather(*(writer(i) for i in range(scale.w2_sessions)))
    elapsed = time.perf_counter() - start
    return {"runs_per_s": sum(done) / elapsed, "failed_appends": float(failures)}


W1 = Workload(
    "W1",
    "Append runs to one session",
    "{s.w1_runs:,} runs (8 entries, ~7 KB each) appended one after the other to one session.",
    (Metric("runs_per_s", "runs/s", True),),
    _w1,
)
W2 = Workload(
    "W2",
    "Concurrent sessions",
    "{s.w2_sessions} sessions x {s.w2_runs} runs, one task per session, all tasks at once "
    "(asyncio.gather), one store object.",
    (
        Metric("runs_per_s", "runs/s", True),
        Metric("failed_appends", "failed appends", False, 0, ratio=False),
    ),
    _w2,
)
