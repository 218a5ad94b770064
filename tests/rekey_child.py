"""A rekey the kill test ends with SIGKILL part-way: keys rotated (NEW first, OLD still
opening), ten rows a transaction, each report of its progress printed as it comes.

Usage: python rekey_child.py URL NEW_KEY OLD_KEY
"""

from __future__ import annotations

import asyncio
import sys

from lovia_store import Database
from lovia_store.lifecycle import rekey


def report(task: str, done: int, total: int | None) -> None:
    print(task, done, total, flush=True)


async def main(url: str, new: str, old: str) -> None:
    async with Database(url, compression_threshold=64, encryption_keys=[new, old]) as db:
        await rekey(db, all_tenants=True, batch_size=10, progress=report)
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
