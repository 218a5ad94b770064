"""A prune the kill test ends with SIGKILL part-way: every session, one per transaction.

Usage: python prune_child.py URL
"""

from __future__ import annotations

import asyncio
import sys

from lovia_store.lifecycle import prune


async def main(target: str) -> None:
    await prune(target, keep_last=0, batch_size=1)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
