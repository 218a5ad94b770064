"""Deterministic synthetic transcripts in lovia's serialized entry shape.

A *run* is 8 entries, about 7 KB of JSON: a user input, three tool_call /
tool_result pairs (each result about 2 KB) and a final assistant text.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from functools import lru_cache

Entry = dict[str, object]
Run = list[Entry]

ENTRIES_PER_RUN = 8
_VOCABULARY = (
    "agent session checkpoint transcript durable append segment tool result assistant input "
    "schema index query commit rollback latency throughput sqlite postgres engine pool "
    "cursor vacuum journal page offset sequence résumé naïve café — “quoted” data 数据 value "
    "field record"
)
_WORDS = _VOCABULARY.split()


@lru_cache(maxsize=1)
def _pool() -> tuple[str, ...]:
    """A few hundred distinct ~2 KB text blobs, built once per process."""
    rng = random.Random(20240611)
    blobs = []
    for _ in range(257):
        text = " ".join(rng.choice(_WORDS) for _ in range(340))
        blobs.append(text[:1_750])
    return tuple(blobs)


def blob(index: int) -> str:
    """One of the ~1.8 KB texts the runs' tool results are made of."""
    pool = _pool()
    return pool[index % len(pool)]


def make_run(index: int) -> Run:
    """Return run number ``index`` (deterministic, distinct per index)."""
    pool = _pool()
    run: Run = [
        {
            "type": "input",
            "role": "user",
            "content": f"[run {index}] Please look into this: " + pool[index % len(pool)][:300],
        }
    ]
    for k in range(3):
        call_id = f"call_{index}_{k}"
        run.append(
            {
                "type": "tool_call",
                "call_id": call_id,
                "name": ("read_file", "grep", "run_tests")[k],
                "arguments": json.dumps(
                    {"path": f"src/module_{index}_{k}.py", "pattern": "def .*append", "limit": 50}
                ),
            }
        )
        run.append(
            {
                "type": "tool_result",
                "call_id": call_id,
                "output": f"result {index}.{k}\n" + pool[(index * 3 + k) % len(pool)],
                "is_error": False,
                "raw": None,
            }
        )
    run.append(
        {
            "type": "assistant_text",
            "content": f"Done with run {index}. " + pool[(index * 7) % len(pool)][:500],
            "id": None,
        }
    )
    return run


def runs(start: int, count: int) -> Iterator[Run]:
    """Yield ``count`` consecutive runs starting at index ``start``."""
    for index in range(start, start + count):
        yield make_run(index)


def checkpoint_entry(step: int) -> Entry:
    """One entry appended per checkpoint step (W4): alternating call and result."""
    run = make_run(step // ENTRIES_PER_RUN)
    return run[step % ENTRIES_PER_RUN]


def run_bytes() -> int:
    """Serialized size of one run, for the report."""
    return len(json.dumps(make_run(1), ensure_ascii=False).encode())
