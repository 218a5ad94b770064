"""W10: lovia's own Runner, a 10-turn tool-using run, on lovia's stores and on ours.

What a lovia user sees after changing one import: the wall time of a whole
run (the Runner, its 30 checkpoint steps, the session's load and its final
append) and the time of each ``checkpointer.append`` the Runner makes, timed
by a proxy between the Runner and the store. On lovia-store backends the
trial then measures, in the same process, what the integration's conversion
costs next to our native store (see ``lovia_conversion``).
"""

from __future__ import annotations

import time
from typing import Any

from bench import data
from bench.backends import BackendSpec, Unsupported
from bench.workloads.base import Metric, Stopwatch, TrialEnv, Workload, check, median, run_ids
from bench.workloads.lovia_conversion import CONVERSION_METRICS, Step, measure_conversion

TOOL_TURNS = 9  # then a final text: 10 model turns
ENTRIES_PER_RUN = 1 + 2 * TOOL_TURNS + 1  # input, 9 call/result pairs, the answer
FINAL_TEXT = "All nine files read; the append path is in module 8. " * 2
_BACKENDS = ("lovia-sqlite", "lovia-sqlite-wal", "store-sqlite", "store-sqlite-wal", "store-pg")


class TimedCheckpointer:
    """lovia's ``Checkpointer`` protocol around a real one, timing every ``append``.

    ``keep`` also keeps each step's arguments (for the conversion measurement).
    """

    def __init__(self, inner: Any, *, keep: bool) -> None:
        self.inner = inner
        self.keep = keep
        self.seconds: list[float] = []
        self.steps: list[Step] = []

    async def append(self, run_id: str, entries: list[Any], head: Any) -> None:
        start = time.perf_counter()
        await self.inner.append(run_id, entries, head)
        self.seconds.append(time.perf_counter() - start)
        if self.keep:
            self.steps.append(Step(run_id, list(entries), head))

    async def load(self, run_id: str) -> Any:
        return await self.inner.load(run_id)

    async def delete(self, run_id: str) -> None:
        await self.inner.delete(run_id)


def _agent(index: int) -> Any:
    """An agent whose ScriptedProvider plays 9 tool-call turns, then a text."""
    from lovia import Agent, tool
    from lovia.testing import ScriptedProvider, call, text

    @tool
    def read_file(path: str) -> str:
        """Read a file of the project."""
        return f"{path}\n" + data.blob(len(path) + index)

    script = [
        call("read_file", {"path": f"src/module_{index}_{k}.py"}, call_id=f"call_{index}_{k}")
        for k in range(TOOL_TURNS)
    ]
    return Agent(
        name="bench",
        instructions="Read the files, then answer.",
        model=ScriptedProvider([*script, text(FINAL_TEXT)]),
        tools=[read_file],
    )


async def _run(session: Any, checkpointer: Any, index: int, run_id: str) -> float:
    """One whole run on ``session_id=run_id``; its wall time in seconds."""
    from lovia import CheckpointOptions, Runner

    agent = _agent(index)
    prompt = f"[run {index}] Where is the append path? " + data.blob(index)[:300]
    options = CheckpointOptions(checkpointer, run_id)
    with Stopwatch() as sw:
        result = await Runner.run(
            agent, prompt, session=session, session_id=run_id, checkpoint=options
        )
    check(result.output == FINAL_TEXT, f"run {run_id}: output {result.output!r}")
    return sw.seconds


async def _w10(env: TrialEnv) -> dict[str, float]:
    try:
        import lovia  # noqa: F401
    except ImportError as exc:
        raise Unsupported(f"lovia not installed: {exc}") from exc
    session, checkpointer = await env.backend.open_lovia_stores()
    ours = env.spec.family == "lovia-store"
    # One untimed run first: a long-lived worker's steady state, on both sides alike.
    await _run(session, checkpointer, -1, "warmup-run")
    timed = TimedCheckpointer(checkpointer, keep=ours)
    ids = run_ids(env.scale.w10_runs)
    walls = [await _run(session, timed, index, run_id) for index, run_id in enumerate(ids)]
    snapshot = await checkpointer.load(ids[-1])
    check(
        snapshot is not None
        and snapshot.status == "completed"
        and len(snapshot.entries) == ENTRIES_PER_RUN,
        f"the last run's checkpoint is not the completed {ENTRIES_PER_RUN}-entry run",
    )
    stored = await session.load(ids[-1])
    check(len(stored) == ENTRIES_PER_RUN, f"the session holds {len(stored)} entries")
    steps = len(timed.seconds)
    metrics = {
        "run_ms": median(walls) * 1e3,
        "us_per_step": sum(timed.seconds) / steps * 1e6,
        "us_per_step_median": median(timed.seconds) * 1e6,
        "steps_per_run": steps / len(ids),
    }
    if ours:
        metrics |= await measure_conversion(checkpointer, timed.steps)
    return metrics


def _applies(spec: BackendSpec) -> bool:
    return spec.name in _BACKENDS


W10 = Workload(
    "W10",
    "lovia's Runner, 10 turns with tools",
    "lovia 0.9.119's own `Runner.run` with `lovia.testing.ScriptedProvider` (9 turns calling a "
    "trivial tool that returns ~1.8 KB, then a text answer), a session and a checkpointer "
    "(lovia's `SQLiteSession`/`SQLiteCheckpointer`, or ours from "
    "`lovia_store.integrations.lovia`, leases on as by default), {s.w10_runs:,} runs after one "
    "untimed, each with a fresh run_id and session_id: median wall time per run, and the cost of "
    "each `checkpointer.append` the Runner makes (a timing proxy in between; mean over all steps, "
    "lease acquisition and release included, and median). On lovia-store, in the same process: "
    "the integration's conversion per step (`encode_entries` + the head's `to_dict` and JSON; "
    "best of 5 passes over the run's steps) as a % of our native `SQLCheckpointer.append` of the "
    "same steps as native entries (no lease); the same steps stored again through the "
    "integration over those stored natively under a lease (its own cost beyond our calls; "
    "the three replays alternate run by run, steps back to back: on PostgreSQL cheaper than "
    "the Runner's, which come between model turns and tool calls); and the read side "
    "(`decode_entries` + `RunHead.from_dict` of a stored run) as a % of the native `load`.",
    (
        Metric("run_ms", "ms/run", False, 1),
        Metric("us_per_step", "µs/step (mean)", False, 0),
        Metric("us_per_step_median", "µs/step (median)", False, 0),
        Metric("steps_per_run", "steps/run", False, 0, ratio=False),
        *CONVERSION_METRICS,
    ),
    _w10,
    applies=_applies,
    cross_pairs=(("lovia-sqlite-wal", "store-pg"), ("lovia-sqlite", "store-pg")),
)

__all__ = ["W10"]
