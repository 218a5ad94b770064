"""W4: one checkpoint step = append one entry and refresh the run head."""

from __future__ import annotations

from bench import data
from bench.workloads.base import Metric, Stopwatch, TrialEnv, Workload, run_ids


async def _w4(env: TrialEnv) -> dict[str, float]:
    backend, steps = env.backend, env.scale.w4_steps
    await backend.open_checkpointer()
    entries = [backend.convert_entry(data.checkpoint_entry(i)) for i in range(steps)]
    (run_id,) = run_ids(1)
    with Stopwatch() as sw:
        for turn, entry in enumerate(entries):
            await backend.checkpoint_step(run_id, entry, turn)
    return {"us_per_step": sw.seconds / steps * 1e6}


W4 = Workload(
    "W4",
    "Checkpoint step",
    "append(run_id, [entry], head) repeated {s.w4_steps:,} times on one run: µs per step "
    "(total time / steps).",
    (Metric("us_per_step", "µs/step", False, 0),),
    _w4,
)
