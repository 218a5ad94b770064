"""W6: trim_tool_results and rewind on a 300-run session."""

from __future__ import annotations

from bench import data
from bench.workloads.base import Metric, Stopwatch, TrialEnv, Workload, check


async def _w6(env: TrialEnv) -> dict[str, float]:
    backend, runs = env.backend, env.scale.w6_runs
    await backend.prefill("w6", data.runs(0, runs), 0)
    with Stopwatch() as trim:
        trimmed = await backend.trim("w6")
    check(trimmed == 3 * (runs - 1), f"W6 trimmed {trimmed} results, expected {3 * (runs - 1)}")
    with Stopwatch() as again:
        await backend.trim("w6")
    # Cut inside a run right after a tool call: that dangling call must go too.
    keep = (runs // 2) * data.ENTRIES_PER_RUN + 4
    with Stopwatch() as rewind:
        removed = await backend.rewind("w6", keep)
    expected = runs * data.ENTRIES_PER_RUN - keep + 1
    check(removed == expected, f"W6 rewind removed {removed} entries, expected {expected}")
    # The same cut on a twin session, brought to the same state first (untimed):
    # what a rewind costs once the process has run one.
    await backend.prefill("w6-twin", data.runs(0, runs), 0)
    await backend.trim("w6-twin")
    with Stopwatch() as warm:
        removed = await backend.rewind("w6-twin", keep)
    check(removed == expected, f"W6 warm rewind removed {removed} entries, expected {expected}")
    return {
        "trim_ms": trim.seconds * 1e3,
        "trim_again_ms": again.seconds * 1e3,
        "rewind_ms": rewind.seconds * 1e3,
        "rewind_warm_ms": warm.seconds * 1e3,
    }


W6 = Workload(
    "W6",
    "Maintenance: trim and rewind",
    "On a {s.w6_runs:,}-run session: trim_tool_results(keep_chars=400, keep_runs=1), the same "
    "again (idempotent no-op), then rewind to the middle of a run (cut right after a tool "
    "call); then the same rewind of a twin session, once the process has run one (warm).",
    (
        Metric("trim_ms", "trim (ms)", False),
        Metric("trim_again_ms", "trim again (ms)", False),
        Metric("rewind_ms", "rewind (ms)", False),
        Metric("rewind_warm_ms", "rewind warm (ms)", False),
    ),
    _w6,
)
