"""W7: ten tasks append runs into the same session at once; count what fails or vanishes."""

from __future__ import annotations

import asyncio

from bench import data
from bench.workloads.base import Metric, Stopwatch, TrialEnv, Workload, run_ids


async def _w7(env: TrialEnv) -> dict[str, float]:
    backend, scale = env.backend, env.scale
    per_task = [
        [
            backend.convert_run(run)
            for run in data.runs(t * scale.w7_runs_per_task, scale.w7_runs_per_task)
        ]
        for t in range(scale.w7_tasks)
    ]

    async def task(runs: list[object]) -> tuple[int, int]:
        acknowledged = failed = 0
        for run, run_id in zip(runs, run_ids(len(runs)), strict=True):
            ok, bad = await backend.append_run_tolerant("w7", run, run_id)
            acknowledged, failed = acknowledged + ok, failed + bad
        return acknowledged, failed

    with Stopwatch() as sw:
        outcomes = await asyncio.gather(*(task(runs) for runs in per_task))
    acknowledged = sum(ok for ok, _ in outcomes)
    stored = await backend.count("w7")
    attempted = scale.w7_tasks * scale.w7_runs_per_task * data.ENTRIES_PER_RUN
    return {
        "failed_calls": float(sum(bad for _, bad in outcomes)),
        "missing_entries": float(attempted - stored),
        "silently_lost": float(acknowledged - stored),
        "elapsed_ms": sw.seconds * 1e3,
    }


W7 = Workload(
    "W7",
    "Ten writers, one session",
    "{s.w7_tasks} tasks append {s.w7_runs_per_task} run(s) each into one session at the same "
    "time through one store object (zett-agent: its own append per message, going on after a "
    "failure). failed calls = appends that raised; missing = attempted entries not stored; "
    "silently lost = acknowledged but not stored.",
    (
        Metric("failed_calls", "failed calls", False, 0, ratio=False),
        Metric("missing_entries", "missing entries", False, 0, ratio=False),
        Metric("silently_lost", "silently lost", False, 0, ratio=False),
        Metric("elapsed_ms", "elapsed (ms)", False),
    ),
    _w7,
)
