"""W9: four writer processes on one database (PostgreSQL, or SQLite with WAL)."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from bench import data
from bench.backends import BackendSpec, PgTarget, TrialContext, create
from bench.workloads.base import Metric, TrialEnv, Workload, run_ids

_SPAWN = multiprocessing.get_context("spawn")


def _writer(
    name: str,
    tmpdir: str,
    pg: dict[str, Any] | None,
    index: int,
    runs: int,
    barrier: Barrier,
    results: Any,
) -> None:
    """One writer process: open its own store, wait for the others, append ``runs`` runs."""
    ctx = TrialContext(Path(tmpdir), PgTarget(**pg) if pg else None)

    async def main() -> tuple[int, int, float]:
        backend = create(name, ctx)
        await backend.open()
        batch = [backend.convert_run(run) for run in data.runs(index * runs, runs)]
        ok = failed = 0
        await asyncio.to_thread(barrier.wait)
        for run, run_id in zip(batch, run_ids(runs), strict=True):
            try:
                await backend.append_run(f"w9-{index}", run, run_id)
            except Exception:  # counted; a writer goes on, as a worker would
                failed += 1
            else:
                ok += 1
        end = time.perf_counter()
        await backend.close()
        return ok, failed, end

    try:
        results.put(asyncio.run(main()))
    except BaseException as exc:  # report instead of hanging the parent on the queue
        results.put(("error", f"{type(exc).__name__}: {exc}", 0.0))


async def _w9(env: TrialEnv) -> dict[str, float]:
    scale, ctx = env.scale, env.ctx
    await env.backend.close()  # the schema now exists; the writers open their own stores
    writers = scale.w9_writers
    barrier, results = _SPAWN.Barrier(writers + 1), _SPAWN.Queue()
    pg = vars(ctx.pg) if ctx.pg else None
    procs = [
        _SPAWN.Process(
            target=_writer,
            args=(
                env.spec.name,
                str(ctx.tmpdir),
                pg,
                i,
                scale.w9_runs_per_writer,
                barrier,
                results,
            ),
        )
        for i in range(writers)
    ]
    for proc in procs:
        proc.start()
    await asyncio.to_thread(barrier.wait, scale.trial_timeout_s)
    start = time.perf_counter()
    outcomes = [await asyncio.to_thread(results.get, True, scale.trial_timeout_s) for _ in procs]
    for proc in procs:
        proc.join()
    errors = [o[1] for o in outcomes if o[0] == "error"]
    if errors:
        raise RuntimeError(f"writer failed: {errors[0]}")
    end = max(o[2] for o in outcomes)
    await env.backend.open()  # reopened so the trial can close and probe it as usual
    ok = sum(o[0] for o in outcomes)
    return {"runs_per_s": ok / (end - start), "failed_appends": float(sum(o[1] for o in outcomes))}


def _applies(spec: BackendSpec) -> bool:
    return spec.pg or spec.wal


W9 = Workload(
    "W9",
    "Four writer processes",
    "{s.w9_writers} processes (spawned) x {s.w9_runs_per_writer} runs, each with its own store "
    "object, append runs to their own sessions in one database at the same time: total runs/s "
    "from the common start to the last writer's end.",
    (
        Metric("runs_per_s", "runs/s", True),
        Metric("failed_appends", "failed appends", False, 0, ratio=False),
    ),
    _w9,
    applies=_applies,
)

__all__ = ["W9"]
