"""A rekey the kill test ends with SIGKILL part-way: keys rotated (NEW first, OLD still
opening), ten rows a transaction, each report of its progress printed as it comes. It
pauses inside the transaction rewriting lovia_messages' 61st batch and prints "paused"
for the test to kill it there.

Usage: python rekey_child.py URL NEW_KEY OLD_KEY
"""

from __future__ import annotations

import asyncio
import sys

from helpers import pause_forever_at
from lovia_store import Database
from lovia_store.lifecycle import rekey

PAUSED_AT = 61


def report(task: str, done: int, total: int | None) -> None:
    print(task, done, total, flush=True)


async def main(url: str, new: str, old: str) -> None:
    async with Database(url, compression_threshold=64, encryption_keys=[new, old]) as db:
        pause_forever_at(db, "UPDATE lovia_messages", PAUSED_AT)
        await rekey(db, all_tenants=True, batch_size=10, progress=report)
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
