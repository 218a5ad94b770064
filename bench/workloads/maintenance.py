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
    # A second rewind of the same session, to a quarter of it (about half as many
    # entries removed): its statements are now compiled, as in a process that has
    # run one before.
    keep_again = (runs // 4) * data.ENTRIES_PER_RUN + 4
    with Stopwatch() as again_rewind:
        removed = await backend.rewind("w6", keep_again)
    expected = keep - 1 - keep_again + 1
    check(removed == expected, f"W6 second rewind removed {removed} entries, expected {expected}")
    return {
        "trim_ms": trim.seconds * 1e3,
        "trim_again_ms": again.seconds * 1e3,
        "rewind_ms": rewind.seconds * 1e3,
        "rewind_again_ms": again_rewind.seconds * 1e3,
    }


W6 = Workload(
    "W6",
    "Maintenance: trim and rewind",
    "On a {s.w6_runs:,}-run session: trim_tool_results(keep_chars=400, keep_runs=1), the same "
    "again (idempotent no-op), then rewind to the middle of a run (cut right after a tool "
    "call), then again to a quarter of the session (a second rewind, statements compiled; it "
    "removes about half as many entries).",
    (
        Metric("trim_ms", "trim (ms)", False),
        Metric("trim_again_ms", "trim again (ms)", False),
        Metric("rewind_ms", "rewind (ms)", False),
        Metric("rewind_again_ms", "rewind again (ms)", False),
    ),
    _w6,
)
