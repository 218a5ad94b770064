"""A worker for the effect-mode crash tests: one tool call, maybe killed inside the tool.

Usage: python effects_child.py URL MODE KILL LOG. MODE is at_least_once, at_most_once,
keyed or transactional (an at-least-once tool whose effect is a row written through
``ctx.transaction``). KILL is ``none``, ``before_effect`` (the tool started, no effect
yet), ``after_effect`` (the effect happened, the result never reached the checkpoint)
or, for transactional, ``in_transaction`` (inside the transaction, before commit).
LOG gets one line per event: ``start KEY``, ``effect KEY``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

from sqlalchemy import text

from lovia_store import (
    Agent,
    AssistantTextEntry,
    CheckpointOptions,
    Database,
    Runner,
    ScriptedModel,
    SQLCheckpointer,
    SQLSession,
    ToolCallEntry,
    ToolContext,
    entry_to_dict,
    function_tool,
)


def log_line(path: str, line: str) -> None:
    with open(path, "a") as log:
        log.write(line + "\n")
        log.flush()
        os.fsync(log.fileno())


async def main(url: str, mode: str, kill: str, log: str) -> None:
    def maybe_die(point: str) -> None:
        if kill == point:
            os.kill(os.getpid(), signal.SIGKILL)

    async def charge_row(ctx: ToolContext) -> Any:
        def work(conn: Any) -> dict[str, str]:
            conn.execute(
                text("INSERT INTO host_charges (charge_key) VALUES (:key)"),
                {"key": ctx.idempotency_key},
            )
            log_line(log, f"effect {ctx.idempotency_key}")
            maybe_die("in_transaction")
            return {"charged": ctx.idempotency_key}

        return await ctx.transaction(work)

    effect = "at_least_once" if mode == "transactional" else mode

    @function_tool(effect=effect)
    async def charge(ctx: ToolContext, amount: int) -> Any:
        log_line(log, f"start {ctx.idempotency_key}")
        maybe_die("before_effect")
        if mode == "transactional":
            value = await charge_row(ctx)
        else:
            log_line(log, f"effect {ctx.idempotency_key}")
            value = {"charged": amount, "key": ctx.idempotency_key}
        maybe_die("after_effect")
        return value

    db = Database(url, wal=url.startswith("sqlite"))

    def host_table(conn: Any) -> None:
        conn.execute(
            text("CREATE TABLE IF NOT EXISTS host_charges (charge_key VARCHAR(200) PRIMARY KEY)")
        )

    await db.write(host_table)
    model = ScriptedModel(
        [
            [ToolCallEntry(call_id="pay", name="charge", arguments='{"amount": 5}')],
            [AssistantTextEntry(content="charged")],
        ]
    )
    result = await Runner.run(
        Agent("cashier", model, tools=[charge]),
        "charge 5",
        session=SQLSession(db),
        session_id="s",
        checkpoint=CheckpointOptions(SQLCheckpointer(db), "pay-run"),
    )
    print(json.dumps({"entries": [entry_to_dict(e) for e in result.entries]}))
    await db.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
