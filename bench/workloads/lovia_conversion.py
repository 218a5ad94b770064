"""W10's conversion measurement: what ``integrations.lovia`` adds to our native store.

The integration turns lovia's objects into our stored JSON (``encode_entries``
and the head's ``to_dict`` + JSON) and back (``decode_entries``,
``RunHead.from_dict``). Both are timed on the very steps lovia's Runner made in
this trial, against our native ``SQLCheckpointer`` storing the same steps as
native entries on the same database: the issue wants the conversion under 10%
of our own step cost. The native steps are also stored under a lease, as the
integration's are, so that what the integration costs beyond our own calls
(conversion and bookkeeping) shows apart from what the lease costs.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.workloads.base import Metric, median

_PASSES = 5  # CPU-only timings: best of 5, as timeit does
_LOADS = 7


@dataclass(frozen=True)
class Step:
    """One ``checkpointer.append`` lovia's Runner made: its run, new entries and head."""

    run_id: str
    entries: list[Any]
    head: Any


CONVERSION_METRICS = (
    Metric("conv_us", "conversion µs/step", False, 1, ratio=False),
    Metric("native_us", "native append µs/step", False, 0, ratio=False),
    Metric("conv_pct", "conversion % of native step", False, 2, ratio=False),
    Metric("fenced_us", "native leased µs/step", False, 0, ratio=False),
    Metric("vs_fenced", "integration / native leased (replayed)", False, 2, ratio=False),
    Metric("decode_us", "decode µs/load (20 entries)", False, 1, ratio=False),
    Metric("decode_pct", "decode % of native load", False, 1, ratio=False),
)


def _best_of(passes: int, work: Callable[[], None]) -> float:
    """Fastest of ``passes`` runs of ``work``, in seconds, with the GC off (as timeit)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        times = []
        for _ in range(passes):
            start = time.perf_counter()
            work()
            times.append(time.perf_counter() - start)
        return min(times)
    finally:
        if enabled:
            gc.enable()


def _head_json(integration: Any) -> Callable[[Any], str]:
    """The integration's own head encoder (its ``_dump``), or the same call spelled out."""
    dump = getattr(integration, "_dump", None)
    if dump is not None:
        return lambda head: str(dump(head.to_dict(), "head"))
    return lambda head: json.dumps(
        head.to_dict(), ensure_ascii=False, allow_nan=False, separators=(",", ":")
    )


async def _native_run(native: Any, run_id: str, steps: Sequence[Step], *, leased: bool) -> float:
    """One run's steps through the native store; seconds (lease taking and release included)."""
    start = time.perf_counter()
    lease = await native.acquire_lease(run_id, ttl=30.0) if leased else None
    for step in steps:
        await native.append(run_id, step.entries, step.head, lease=lease)
    if lease is not None:
        await native.release_lease(lease)
    return time.perf_counter() - start


async def _integration_run(checkpointer: Any, run_id: str, steps: Sequence[Step]) -> float:
    """The same run's lovia steps through the integration (its lease comes and goes itself)."""
    start = time.perf_counter()
    for step in steps:
        await checkpointer.append(run_id, step.entries, step.head)
    return time.perf_counter() - start


async def measure_conversion(checkpointer: Any, steps: Sequence[Step]) -> dict[str, float]:
    """Write and read conversion next to the native store, on ``checkpointer``'s database."""
    from lovia.checkpointer import RunHead, RunSnapshot
    from lovia.transcript import entry_to_dict

    import lovia_store
    from lovia_store.integrations import lovia as integration

    encode, head_json = integration.encode_entries, _head_json(integration)

    def convert_all() -> None:
        for step in steps:
            encode(step.entries)
            head_json(step.head)

    conv_us = _best_of(_PASSES, convert_all) / len(steps) * 1e6

    # Our own step cost: the same steps as native objects (built before the clock) stored by
    # the native SQLCheckpointer on the same database, without a lease and under one
    # (taken before the run's first step and released after its last, as the integration
    # does). The integration stores the lovia steps once more the same way, so that its own
    # cost beyond our calls compares like for like: the Runner's steps come between model
    # turns and tool calls, and on PostgreSQL they cost more than steps stored back to back.
    # The three alternate run by run, in rotating order.
    native = lovia_store.SQLCheckpointer(checkpointer.database)  # borrows; closes nothing
    runs: dict[str, tuple[list[Step], list[Step]]] = {}
    for step in steps:
        entries = [lovia_store.entry_from_dict(entry_to_dict(entry)) for entry in step.entries]
        head = lovia_store.RunHead.model_validate(step.head.to_dict())
        theirs, ours = runs.setdefault(step.run_id, ([], []))
        theirs.append(step)
        ours.append(Step(step.run_id, entries, head))
    spent = {"plain": 0.0, "leased": 0.0, "integration": 0.0}
    kinds = list(spent)
    for index, (run_id, (theirs, ours)) in enumerate(runs.items()):
        for kind in kinds[index % 3 :] + kinds[: index % 3]:
            if kind == "integration":
                spent[kind] += await _integration_run(checkpointer, f"again-{run_id}", theirs)
            else:
                leased = kind == "leased"
                spent[kind] += await _native_run(native, f"{kind}-{run_id}", ours, leased=leased)
    per_step = {kind: seconds / len(steps) * 1e6 for kind, seconds in spent.items()}

    # Read side: one stored 20-entry run, decoded as the integration's load does.
    run_id = steps[-1].run_id
    stored = await native.load_documents(run_id)
    assert stored is not None
    head_text, documents = stored

    def decode() -> None:
        head = RunHead.from_dict(json.loads(head_text))
        RunSnapshot.from_parts(run_id, integration.decode_entries(documents), head)

    decode_us = _best_of(_PASSES, decode) * 1e6
    loads = []
    for _ in range(_LOADS):
        start = time.perf_counter()
        await native.load(run_id)
        loads.append(time.perf_counter() - start)
    native_load_us = median(loads) * 1e6
    return {
        "conv_us": conv_us,
        "native_us": per_step["plain"],
        "conv_pct": conv_us / per_step["plain"] * 100,
        "fenced_us": per_step["leased"],
        "vs_fenced": per_step["integration"] / per_step["leased"],
        "decode_us": decode_us,
        "decode_pct": decode_us / native_load_us * 100,
    }
