"""A Raw Log append's idempotency key, on every SQL backend: a re-issued keyed append
returns the stored sequence and writes nothing; without a key, nothing changes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from backends import Backend
from lovia_store import AssistantTextEntry, InputEntry, UserError


def said(text: str) -> AssistantTextEntry:
    return AssistantTextEntry(content=text)


async def test_a_re_issued_key_returns_the_stored_sequence(sql_backend: Backend) -> None:
    async with sql_backend.storage() as storage:
        first = await storage.append("s", "q1", said("one"), idempotency_key="k1")
        assert await storage.append("s", "q1", said("one"), idempotency_key="k1") == first
        # Whatever the re-issue says: the key names the append.
        assert await storage.append("s", "q9", said("other"), idempotency_key="k1") == first
        second = await storage.append("s", "q2", said("two"), idempotency_key="k2")
        assert second == first + 1
        # Keys are per session; without a key, every append is a message.
        assert await storage.append("t", "q1", said("one"), idempotency_key="k1") == 1
        assert await storage.append("s", "q3", said("three")) == second + 1
        assert await storage.append("s", "q3", said("three")) == second + 2
        records = await storage.list_raw_messages("s")
        assert [(r.sequence, r.request_id) for r in records] == [
            (1, "q1"),
            (2, "q2"),
            (3, "q3"),
            (4, "q3"),
        ]
        assert await storage.count_messages("s") == 4


async def test_racing_re_issues_store_one_message(sql_backend: Backend) -> None:
    async with sql_backend.storage() as storage:
        await storage.append("s", "q0", said("before"))
        sequences = await asyncio.gather(
            *(
                storage.append(
                    "s", "q1", InputEntry(role="user", content="hi"), idempotency_key="k"
                )
                for _ in range(8)
            )
        )
        assert set(sequences) == {2}
        assert [r.sequence for r in await storage.list_raw_messages("s")] == [1, 2]


@pytest.mark.parametrize("key", ["", "x" * 256, 7, b"k", "a\0b"])
async def test_a_bad_key_is_refused_and_nothing_is_written(sql_backend: Backend, key: Any) -> None:
    async with sql_backend.storage() as storage:
        with pytest.raises(UserError, match="idempotency_key"):
            await storage.append("s", "q1", said("one"), idempotency_key=key)
        assert await storage.count_messages("s") == 0
        assert await storage.append("s", "q1", said("one"), idempotency_key="k") == 1
