"""A prune the kill test ends with SIGKILL part-way: every session, one per transaction.
It pauses in the transaction deleting the 51st session, after its messages went, and
prints "paused" for the test to kill it there.

Usage: python prune_child.py URL
"""

from __future__ import annotations

import asyncio
import sys

from helpers import pause_forever_at
from lovia_store import Database
from lovia_store.lifecycle import prune

PAUSED_AT = 51


async def main(target: str) -> None:
    async with Database(target) as db:
        pause_forever_at(db, "DELETE FROM lovia_messages", PAUSED_AT)
        await prune(db, keep_last=0, batch_size=1)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
