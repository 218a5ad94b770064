"""What synchronous replication costs, and what a read replica's lag check costs, in one run.

A standalone benchmark (not one of W1-W10). It times the same work (``bench.pooler``'s:
appends from one task and from 8, checkpoint steps) on a lone PostgreSQL (5432) and on a
primary whose every COMMIT waits for a synchronous hot standby's flush (5434, its
standby on 5435: ``.ci/pg-standby.sh start``), alternated round by round, each on a
fresh migrated database; both clusters fsync, so durability on the primary is equal and
the standby's copy is what the second pays for. Then one page of ``list_sessions`` on
the primary, and the same page through ``read_replicas=[standby]`` (the replica measures
its own lag in the read's transaction). Medians of the rounds; ratios to the first column.

Usage: ``.venv/bin/python -m bench.replication [--scale tiny|default]``; without the pair
the replicated columns are n/a.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

from sqlalchemy.engine import make_url

from bench.pooler import _admin, _reachable, _work, ratio_cells

SCALES = {"tiny": (20, 1), "default": (300, 5)}
LONE = "postgresql://postgres@127.0.0.1:5432/postgres"
PRIMARY = "postgresql://postgres@127.0.0.1:5434/postgres"
STANDBY = "postgresql://postgres@127.0.0.1:5435/postgres"
LISTINGS = 200


async def _on(server: str, appends: int, standby: str | None = None) -> dict[str, float]:
    from lovia_store import Database, SQLSessionStorage, upgrade

    name = f"lovia_bench_repl_{uuid.uuid4().hex[:8]}"
    await _admin(server, f'CREATE DATABASE "{name}"')
    try:
        url = make_url(server).set(database=name).render_as_string(False)
        await upgrade(url)
        found = await _work(url, appends)
        replicas = [] if standby is None else [make_url(standby).set(database=name)]
        async with Database(url, read_replicas=[str(r) for r in replicas]) as db:
            storage = SQLSessionStorage(db)
            await storage.list_sessions(limit=50)  # connections open, statements prepared
            started = time.perf_counter()
            for _ in range(LISTINGS):
                await storage.list_sessions(limit=50)
            found["list_sessions (50)"] = (time.perf_counter() - started) / LISTINGS
        return found
    finally:
        await _admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def measure(appends: int, rounds: int) -> str:
    paired = await _reachable(PRIMARY) and await _reachable(STANDBY)
    configurations = ("lone server", "sync standby", "sync standby, replica reads")
    seen: dict[str, list[dict[str, float]]] = {c: [] for c in configurations}
    for _ in range(rounds):
        seen["lone server"].append(await _on(LONE, appends))
        if paired:
            seen["sync standby"].append(await _on(PRIMARY, appends))
            seen["sync standby, replica reads"].append(await _on(PRIMARY, appends, STANDBY))
    lines = [
        f"Synchronous replication, {rounds} alternated round(s), {appends} operations each "
        "(median ms per operation; ratio to the lone server):",
        "",
        "| work | " + " | ".join(configurations) + " |",
        "| --- | " + " | ".join("---" for _ in configurations) + " |",
    ]
    works = ("append, one task", "append, 8 tasks", "checkpoint step", "list_sessions (50)")
    for work in works:
        lines.append(f"| {work} | " + " | ".join(ratio_cells(seen, work, configurations)) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="default")
    args = parser.parse_args()
    appends, rounds = SCALES[args.scale]
    print(asyncio.run(measure(appends, rounds)))


if __name__ == "__main__":
    main()
