"""What row-level security costs on PostgreSQL: appends and loads with and without it, in one run.

A standalone benchmark (not one of W1-W10). Each configuration runs, round by round
alternated, on a fresh migrated database, as a role that owns none of the tables
(``lovia_rls_app``, created if missing; the tables' owner would pass the policies):

    off   no policies; ``Database(url)``: a session append is one statement without
          BEGIN/COMMIT, a load one statement too
    on    ``enable_row_level_security``; ``Database(url, row_level_security=True)``: each
          runs in a transaction whose first statement is
          ``set_config('lovia.tenant', ..., true)``, and the policy filters every row

each directly and through PgBouncer in transaction mode (``?lovia_pooler=transaction``,
where every statement already runs in a transaction). The work is the session store's
own PostgreSQL append (``append_in_one_statement``, 8 entries, one task) and its load
(the stored documents of one session, in order), run at the ``Database`` level with
``tenant=``, as the converted ``SQLSession`` runs them: medians of the rounds, and the
ratio of "on" to "off" (above 1 is slower).

Usage: ``.venv/bin/python -m bench.rls [--scale tiny|default]``; PgBouncer is expected
at 127.0.0.1:6432 (``.ci/pgbouncer.sh start``, which lists the role), reported n/a without it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

from sqlalchemy.engine import make_url

from .pooler import DIRECT, PGBOUNCER, _admin, _entries, _reachable

SCALES = {"tiny": (2, 10), "default": (15, 20)}
ROLE = "lovia_rls_app"
TENANT = "acme"


async def _prepare(url: str, *, policies: bool) -> None:
    """Our tables, the role's grants, and (``policies``) the policies, as the owner."""
    from lovia_store import Database, upgrade
    from lovia_store.db.row_security import enable_row_level_security

    await upgrade(url)
    db = Database(url)
    try:

        def tables(conn: Any) -> None:
            conn.exec_driver_sql(
                f"DO $$ BEGIN CREATE ROLE {ROLE} LOGIN; EXCEPTION WHEN duplicate_object "
                "OR unique_violation THEN NULL; END $$"
            )
            conn.exec_driver_sql(
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {ROLE}"
            )

        await db.write_unchecked(tables)
    finally:
        await db.close()
    if policies:
        await enable_row_level_security(url)


async def _pair(
    urls: dict[str, str], rounds: int, batch: int
) -> dict[str, tuple[list[float], list[float]]]:
    """Per work, the median seconds per operation (off, on), as the role: the two
    configurations' batches interleaved round by round (which goes first alternates), so
    the load other processes put on the machine weighs on both alike."""
    from sqlalchemy import bindparam, select

    from lovia_store import Database
    from lovia_store.db.tables import messages
    from lovia_store.sessions.log import append_in_one_statement, encode_run
    from lovia_store.sessions.reads import EVERY_DOCUMENT

    load = (
        select(EVERY_DOCUMENT)
        .where(messages.c.tenant == bindparam("tenant"), messages.c.session_id == bindparam("sid"))
        .order_by(messages.c.sequence)
    )
    off = Database(urls["off"], verify_only=True)
    on = Database(urls["on"], verify_only=True, row_level_security=True)
    appended = 0

    async def append(db: Database, sid: str, n: int) -> None:
        run = encode_run(_entries(n))
        statement, params = append_in_one_statement(TENANT, sid, f"r{n}", None, run)
        await db.write_one(statement, params, tenant=TENANT)

    async def appends(db: Database, count: int) -> None:
        for n in range(appended, appended + count):
            await append(db, "one", n)

    async def loads(db: Database, sid: str, count: int) -> None:
        params = {"tenant": TENANT, "sid": sid}
        for _ in range(count):
            await db.read_one(load, params, first_column=True, tenant=TENANT)

    times: dict[str, tuple[list[float], list[float]]] = {}

    async def timed(name: str, count: int, run: Any, round_: int) -> None:
        seen = times.setdefault(name, ([], []))
        for which in (0, 1) if round_ % 2 else (1, 0):
            started = time.perf_counter()
            await run((off, on)[which])
            seen[which].append((time.perf_counter() - started) / count)

    try:
        for db in (off, on):
            await append(db, "small", 0)
        for round_ in range(rounds):
            await timed("append (8 entries)", batch, lambda db: appends(db, batch), round_)
            appended += batch
        for db in (off, on):  # both hold the same rows, and the policy hid none of them
            rows = await db.read_one(load, {"tenant": TENANT, "sid": "one"}, tenant=TENANT)
            assert len(rows) == appended * 8, len(rows)
        for round_ in range(rounds):
            await timed("load, 8 entries", batch, lambda db: loads(db, "small", batch), round_)
        big = max(1, batch // 10)
        name = f"load, {appended * 8} entries"
        for round_ in range(rounds):
            await timed(name, big, lambda db: loads(db, "one", big), round_)
    finally:
        await off.close()
        await on.close()
    return times


async def _route(
    direct: str, pgbouncer: str | None, route: str, rounds: int, batch: int
) -> dict[str, tuple[list[float], list[float]]] | None:
    if route == "pgbouncer" and pgbouncer is None:
        return None
    stem = f"lovia_bench_rls_{uuid.uuid4().hex[:8]}"
    try:
        for which in ("off", "on"):
            await _admin(direct, f'CREATE DATABASE "{stem}_{which}"')
            owner = make_url(direct).set(
                drivername="postgresql+asyncpg", database=f"{stem}_{which}"
            )
            await _prepare(owner.render_as_string(False), policies=which == "on")
        url = make_url(direct).set(drivername="postgresql+asyncpg", username=ROLE)
        if route == "pgbouncer":
            assert pgbouncer is not None
            through = make_url(pgbouncer)
            url = url.set(host=through.host, port=through.port).update_query_dict(
                {"lovia_pooler": "transaction"}
            )
        urls = {w: url.set(database=f"{stem}_{w}").render_as_string(False) for w in ("off", "on")}
        return await _pair(urls, rounds, batch)
    finally:
        for which in ("off", "on"):
            await _admin(direct, f'DROP DATABASE IF EXISTS "{stem}_{which}" WITH (FORCE)')


async def measure(direct: str, pgbouncer: str, rounds: int, batch: int) -> str:
    through = pgbouncer if await _reachable(pgbouncer) else None
    lines = [
        f"Row-level security: {rounds} interleaved rounds of {batch} appends, {batch} small "
        f"and {max(1, batch // 10)} large loads, as a role owning no table "
        "(ms per operation, median and fastest round; on/off ratios):",
        "",
        "| route | work | off | on | on/off median | on/off fastest |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for route in ("direct", "pgbouncer"):
        found = await _route(direct, through, route, rounds, batch)
        if found is None:
            lines.append(f"| {route} | (unreachable) | n/a | n/a | n/a | n/a |")
            continue
        for work, (offs, ons) in found.items():
            off, on = statistics.median(offs), statistics.median(ons)
            least, most = min(offs), min(ons)
            lines.append(
                f"| {route} | {work} | {off * 1000:.3f} ({least * 1000:.3f}) | "
                f"{on * 1000:.3f} ({most * 1000:.3f}) | {on / off:.2f}x | {most / least:.2f}x |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="default")
    parser.add_argument("--direct", default=DIRECT)
    parser.add_argument("--pgbouncer", default=PGBOUNCER)
    args = parser.parse_args()
    rounds, batch = SCALES[args.scale]
    print(asyncio.run(measure(args.direct, args.pgbouncer, rounds, batch)))


if __name__ == "__main__":
    main()
