"""What multi-primary writes cost on a MariaDB Galera cluster, beside one node, in one run.

A standalone benchmark (not one of W1-W10). On a fresh migrated database of the
three-node cluster that ``.ci/galera.sh start`` runs (ports 3311-3313), 12 writer
tasks append 8-entry runs, alternated round by round:

    one node      all 12 writers on node 1
    every node    4 writers on each of the three nodes (shared sessions: certification
                  conflicts are rolled back at COMMIT and run again)

It reports appends per second (median of the rounds) and the multi-primary ratio.
Usage: ``.venv/bin/python -m bench.galera [--scale tiny|default] [--nodes URL,URL,URL]``;
without a cluster it says so and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from sqlalchemy.engine import make_url

SCALES = {"tiny": (10, 1), "default": (60, 5)}
NODES = "mysql://root@127.0.0.1:3311,mysql://root@127.0.0.1:3312,mysql://root@127.0.0.1:3313"


async def _admin(node: str, sql: str) -> None:
    import asyncmy

    url = make_url(node)
    conn = await asyncmy.connect(
        host=url.host, port=url.port, user=url.username or "root", password="", autocommit=True
    )
    try:
        async with conn.cursor() as cursor:
            await cursor.execute(sql)
    finally:
        conn.close()


async def _appends_per_second(urls: list[str], per_writer: int) -> float:
    from lovia_store import AssistantTextEntry, Database, InputEntry, SQLSession

    entries = [
        InputEntry(role="user", content="question " * 20)
        if i % 2 == 0
        else AssistantTextEntry(content="answer " * 40)
        for i in range(8)
    ]
    databases = [Database(url, busy_timeout=30) for url in urls]
    try:

        async def writer(n: int) -> None:
            sessions = SQLSession(databases[n % len(databases)])
            for i in range(per_writer):
                await sessions.append(f"s{n % 3}", entries, run_id=f"w{n}-{i}")

        started = time.perf_counter()
        await asyncio.gather(*(writer(n) for n in range(12)))
        return 12 * per_writer / (time.perf_counter() - started)
    finally:
        for db in databases:
            await db.close()


async def _round(nodes: list[str], per_writer: int, spread: bool) -> float:
    from lovia_store import upgrade

    name = f"lovia_bench_galera_{uuid.uuid4().hex[:8]}"
    await _admin(nodes[0], f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        urls = [
            make_url(n).set(drivername="mysql+asyncmy", database=name).render_as_string(False)
            for n in nodes
        ]
        await upgrade(urls[0])
        return await _appends_per_second(urls if spread else urls[:1], per_writer)
    finally:
        await _admin(nodes[0], f"DROP DATABASE IF EXISTS `{name}`")


async def measure(nodes: list[str], per_writer: int, rounds: int) -> str:
    try:
        await _admin(nodes[0], "SELECT 1")
    except Exception as exc:
        return f"bench.galera: no cluster at {nodes[0]} ({exc}); nothing measured\n"
    one, every = [], []
    for _ in range(rounds):
        one.append(await _round(nodes, per_writer, spread=False))
        every.append(await _round(nodes, per_writer, spread=True))
    a, b = statistics.median(one), statistics.median(every)
    return (
        f"Galera, 12 writers x {per_writer} 8-entry appends to 3 shared sessions, "
        f"{rounds} alternated round(s) (median appends/s):\n\n"
        "| writers on | appends/s | ratio |\n| --- | --- | --- |\n"
        f"| one node | {a:.0f} | 1.00 |\n| every node (4 each) | {b:.0f} | {b / a:.2f} |\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="default")
    parser.add_argument("--nodes", default=NODES)
    args = parser.parse_args()
    per_writer, rounds = SCALES[args.scale]
    nodes = [n.strip() for n in args.nodes.split(",")]
    print(asyncio.run(measure(nodes, per_writer, rounds)))


if __name__ == "__main__":
    main()
