"""W8: does the cost of an append or a load grow with the session?"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Awaitable, Callable

from bench import data
from bench.backends import Unsupported
from bench.config import Scale
from bench.workloads.base import Metric, Stopwatch, TrialEnv, Workload, check, median, run_ids


def _label(n: int) -> str:
    return f"{n:,}"


def _metrics(scale: Scale) -> tuple[Metric, ...]:
    appends = [
        Metric(f"append_{k}_ms", f"append #{_label(k)} (ms)", False, 2)
        for k in scale.w8_append_points
    ]
    loads = []
    for size in scale.w8_load_sizes:
        loads.append(Metric(f"load_{size}_ms", f"load {_label(size)} (ms)", False, 1))
        loads.append(Metric(f"peak_{size}_mib", f"peak {_label(size)} (MiB)", False, 1))
    streams = []
    for size in scale.w8_load_sizes:
        streams.append(Metric(f"stream_{size}_ms", f"stream {_label(size)} (ms)", False, 1))
        streams.append(
            Metric(f"stream_peak_{size}_mib", f"stream peak {_label(size)} (MiB)", False, 1)
        )
    return (*appends, *loads, *streams)


async def _appends(env: TrialEnv) -> dict[str, float]:
    """Time run k (k = 1, 1,000, 10,000...): the 1st alone, later ones as a window median."""
    backend, scale, result = env.backend, env.scale, {}
    stored = 0
    for point in scale.w8_append_points:
        await backend.prefill("w8", data.runs(stored, point - 1 - stored), stored)
        window = 1 if point == 1 else scale.w8_window
        batch = [backend.convert_run(run) for run in data.runs(point - 1, window)]
        times = []
        for run, run_id in zip(batch, run_ids(window), strict=True):
            with Stopwatch() as sw:
                await backend.append_run("w8", run, run_id)
            times.append(sw.seconds * 1e3)
        stored = point - 1 + window
        result[f"append_{point}_ms"] = median(times)
    check(await backend.count("w8") == stored * data.ENTRIES_PER_RUN, "W8 lost appended entries")
    return result


_READS = 3


async def _timed(call: Callable[[], Awaitable[int]], size: int, what: str) -> tuple[float, float]:
    """The median of ``_READS`` timed calls, then one more under tracemalloc: (ms, peak MiB).

    Each read starts from a collected heap (``gc.collect()`` first, untimed): a
    10,000-entry read allocates enough to set off a full garbage collection, which
    walks the entries built so far (50-80 ms, as much as the read), and whether it
    fell inside one timed call depended on every allocation the process had made
    before, so a change anywhere in the package moved it in or out.
    """
    times = []
    for _ in range(_READS):
        gc.collect()
        with Stopwatch() as sw:
            got = await call()
        check(got == size, f"W8 {what} returned {got} entries, expected {size}")
        times.append(sw.seconds * 1e3)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        await call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return median(times), peak / 2**20


async def _loads(env: TrialEnv) -> dict[str, float]:
    """Per size: a whole load, then a streaming read (where the backend has one)."""
    backend, result = env.backend, {}
    for size in env.scale.w8_load_sizes:
        session = f"w8-load-{size}"
        await backend.prefill(session, data.runs(0, size // data.ENTRIES_PER_RUN), 0)
        ms, peak = await _timed(lambda s=session: backend.load(s), size, "load")
        result[f"load_{size}_ms"], result[f"peak_{size}_mib"] = ms, peak
        try:
            ms, peak = await _timed(lambda s=session: backend.stream(s), size, "stream")
        except Unsupported as exc:
            if f"stream: {exc}" not in env.notes:
                env.notes.append(f"stream: {exc}")
            continue
        result[f"stream_{size}_ms"], result[f"stream_peak_{size}_mib"] = ms, peak
    return result


async def _w8(env: TrialEnv) -> dict[str, float]:
    return {**await _appends(env), **await _loads(env)}


W8 = Workload(
    "W8",
    "Scaling with session size",
    "Cost of appending run #k to one session for k in {points} (#1: that append alone; later: "
    "median of {s.w8_window} consecutive appends from there; the runs before are untimed "
    "setup), and reading sessions of {sizes} entries, whole (load) and streamed in keyset pages "
    "of 1,000 (lovia-store: SQLSession.iter_entries; raw floors: the same pages by hand): the "
    "median of 3 timed reads (each after an untimed gc.collect()), then one more under "
    "tracemalloc for the peak of Python allocations (driver C buffers not counted). "
    "--scale full goes to run #10,000 and 100,000 entries.",
    (),
    _w8,
    metrics_for=_metrics,
)
