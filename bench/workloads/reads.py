"""W3 (load a whole session) and W5 (page the raw message log)."""

from __future__ import annotations

from bench import data
from bench.workloads.base import Metric, Stopwatch, TrialEnv, Workload, check, median

_LOAD_REPEATS = 5
_PAGE = 50


async def _w3(env: TrialEnv) -> dict[str, float]:
    backend, entries = env.backend, env.scale.w3_entries
    await backend.prefill("w3", data.runs(0, entries // data.ENTRIES_PER_RUN), 0)
    check(
        await backend.load("w3") == entries, "W3 loaded the wrong number of entries"
    )  # also warms caches
    times = []
    for _ in range(_LOAD_REPEATS):
        with Stopwatch() as sw:
            await backend.load("w3")
        times.append(sw.seconds * 1e3)
    return {"load_ms": median(times)}


async def _w5(env: TrialEnv) -> dict[str, float]:
    backend, scale = env.backend, env.scale
    await backend.open_raw_log()  # before the prefill: a backend without paging is skipped fast
    await backend.prefill("w5", data.runs(0, scale.w5_messages // data.ENTRIES_PER_RUN), 0)
    queries = {
        "offset0_ms": {"offset": 0, "after_sequence": 0},
        "deep_offset_ms": {"offset": scale.w5_deep_offset, "after_sequence": 0},
        "after_seq_ms": {"offset": 0, "after_sequence": scale.w5_deep_offset},
    }
    result = {}
    for key, query in queries.items():
        got = await backend.page("w5", limit=_PAGE, **query)  # warm-up and check
        check(got == _PAGE, f"W5 {key} returned {got} rows, expected {_PAGE}")
        times = []
        for _ in range(scale.w5_repeats):
            with Stopwatch() as sw:
                await backend.page("w5", limit=_PAGE, **query)
            times.append(sw.seconds * 1e3)
        result[key] = median(times)
    return result


W3 = Workload(
    "W3",
    "Load a session",
    "Load a {s.w3_entries:,}-entry session; median of 5 loads after one warm-up.",
    (Metric("load_ms", "load (ms)", False, 2),),
    _w3,
)
W5 = Workload(
    "W5",
    "Page the raw message log",
    "A page of 50 raw messages from a {s.w5_messages:,}-message session at offset 0, at offset "
    "{s.w5_deep_offset:,}, and with after_sequence={s.w5_deep_offset:,}; median ms of "
    "{s.w5_repeats} reads. The session is written with the Session API (runs) and read with "
    "the Raw Log API (lovia-store: SQLSessionStorage.list_raw_messages; zett-agent: "
    "list_raw_messages).",
    (
        Metric("offset0_ms", "offset 0 (ms)", False, 2),
        Metric("deep_offset_ms", "deep offset (ms)", False, 2),
        Metric("after_seq_ms", "after_sequence (ms)", False, 2),
    ),
    _w5,
)
