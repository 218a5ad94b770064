"""What transaction-pooler mode costs: appends direct and through PgBouncer, in one run.

A standalone benchmark (not one of W1-W10). For each driver (asyncpg, psycopg) it
times the same work in three configurations, alternated round by round, each on a
fresh migrated database:

    direct           PostgreSQL on 5432, the default mode (lone statements without
                     BEGIN/COMMIT, asyncpg's prepared statements cached)
    direct, pooled   the same server with ?lovia_pooler=transaction
    pgbouncer        through PgBouncer in transaction mode, ?lovia_pooler=transaction

The work: ``--appends`` 8-entry appends from one task, then the same number spread over
8 tasks, then as many checkpoint steps from one task; medians of the rounds, and each
configuration's ratio to "direct" (above 1 is slower).

Usage: ``.venv/bin/python -m bench.pooler [--scale tiny|default] [--pgbouncer URL]``; PgBouncer
is expected at 127.0.0.1:6432 (``.ci/pgbouncer.sh start``), and reported n/a without it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

from sqlalchemy.engine import make_url

SCALES = {"tiny": (20, 1), "default": (300, 5)}
DIRECT = "postgresql://postgres@127.0.0.1:5432/postgres"
PGBOUNCER = "postgresql://postgres@127.0.0.1:6432/postgres"


async def _admin(url: str, sql: str) -> None:
    import asyncpg

    parsed = make_url(url)
    conn = await asyncpg.connect(
        host=parsed.host, port=parsed.port, user=parsed.username, database=parsed.database
    )
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def _entries(n: int) -> list[Any]:
    from lovia_store import AssistantTextEntry, InputEntry

    return [
        InputEntry(role="user", content=f"question {n} " * 20)
        if i % 2 == 0
        else AssistantTextEntry(content=f"answer {n} " * 40)
        for i in range(8)
    ]


async def _work(url: str, appends: int) -> dict[str, float]:
    """Seconds per operation of each kind on ``url``."""
    from lovia_store import RunHead, SQLCheckpointer, SQLSession

    found: dict[str, float] = {}
    async with SQLSession(url) as sessions, SQLCheckpointer(sessions.database) as runs:
        started = time.perf_counter()
        for n in range(appends):
            await sessions.append("one", _entries(n), run_id=f"r{n}")
        found["append, one task"] = (time.perf_counter() - started) / appends

        async def task(k: int) -> None:
            for n in range(appends // 8):
                await sessions.append(f"t{k}", _entries(n), run_id=f"r{n}")

        started = time.perf_counter()
        await asyncio.gather(*(task(k) for k in range(8)))
        found["append, 8 tasks"] = (time.perf_counter() - started) / (appends // 8 * 8)

        head = RunHead(agent_name="bench")
        started = time.perf_counter()
        for n in range(appends):
            await runs.append("run", _entries(n)[:2], head.model_copy(update={"turns": n}))
        found["checkpoint step"] = (time.perf_counter() - started) / appends
    return found


async def _configuration(
    direct: str, pgbouncer: str | None, driver: str, which: str, appends: int
) -> dict[str, float] | None:
    from lovia_store import upgrade

    name = f"lovia_bench_pooler_{uuid.uuid4().hex[:8]}"
    await _admin(direct, f'CREATE DATABASE "{name}"')
    try:
        base = make_url(direct).set(drivername=f"postgresql+{driver}", database=name)
        await upgrade(base.set(drivername="postgresql+asyncpg").render_as_string(False))
        if which == "direct":
            url = base
        elif which == "direct, pooled":
            url = base.update_query_dict({"lovia_pooler": "transaction"})
        else:
            if pgbouncer is None:
                return None
            through = make_url(pgbouncer)
            url = base.set(host=through.host, port=through.port).update_query_dict(
                {"lovia_pooler": "transaction"}
            )
        return await _work(url.render_as_string(False), appends)
    finally:
        await _admin(direct, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _reachable(url: str) -> bool:
    try:
        await _admin(url, "SELECT 1")
    except Exception:
        return False
    return True


async def measure(direct: str, pgbouncer: str, appends: int, rounds: int) -> str:
    through = pgbouncer if await _reachable(pgbouncer) else None
    configurations = ("direct", "direct, pooled", "pgbouncer")
    lines = [
        f"Transaction-pooler mode, {rounds} alternated round(s), {appends} operations each "
        "(median ms per operation; ratio to direct):",
        "",
        "| driver | work | " + " | ".join(configurations) + " |",
        "| --- | --- | " + " | ".join("---" for _ in configurations) + " |",
    ]
    for driver in ("asyncpg", "psycopg"):
        seen: dict[str, list[dict[str, float]]] = {c: [] for c in configurations}
        for _ in range(rounds):
            for which in configurations:
                found = await _configuration(direct, through, driver, which, appends)
                if found is not None:
                    seen[which].append(found)
        for work in ("append, one task", "append, 8 tasks", "checkpoint step"):
            cells = ratio_cells(seen, work, configurations)
            lines.append(f"| {driver} | {work} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def ratio_cells(
    seen: dict[str, list[dict[str, float]]], work: str, configurations: tuple[str, ...]
) -> list[str]:
    """Each configuration's median ms for ``work`` and its ratio to the first's."""
    base = statistics.median(r[work] for r in seen[configurations[0]])
    cells = []
    for which in configurations:
        if not seen[which]:
            cells.append("n/a")
            continue
        value = statistics.median(r[work] for r in seen[which])
        cells.append(f"{value * 1000:.2f} ({value / base:.2f}x)")
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="default")
    parser.add_argument("--direct", default=DIRECT)
    parser.add_argument("--pgbouncer", default=PGBOUNCER)
    args = parser.parse_args()
    appends, rounds = SCALES[args.scale]
    print(asyncio.run(measure(args.direct, args.pgbouncer, appends, rounds)))


if __name__ == "__main__":
    main()
