"""``SQLSession.iter_entries``: a session read in keyset batches, on every SQL backend."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest

from backends import Backend
from helpers import a_run, result, say, user
from lovia_store import SQLSession, UserError


async def collect(store: SQLSession, session_id: str, **kwargs: Any) -> list[Any]:
    return [entry async for entry in store.iter_entries(session_id, **kwargs)]


def count_reads(store: SQLSession) -> list[int]:
    """Count the reads (transactions and one-statement reads) the store's Database
    runs from now on."""
    calls = [0]
    read, read_one = store.database.read, store.database.read_one

    async def counting(work: Any, **options: Any) -> Any:
        calls[0] += 1
        return await read(work, **options)

    async def counting_one(statement: Any, params: Any, **options: Any) -> Any:
        calls[0] += 1
        return await read_one(statement, params, **options)

    store.database.read = counting  # type: ignore[method-assign]
    store.database.read_one = counting_one  # type: ignore[method-assign]
    return calls


async def test_streams_what_load_returns_in_any_batch_size(sql_backend: Backend) -> None:
    async with sql_backend.session() as store:
        assert isinstance(store, SQLSession)
        for n in range(7):
            await store.append("s", a_run(str(n)), run_id=f"r{n}")
        await store.append("other", a_run("x"))
        everything = await store.load("s")
        assert len(everything) == 28
        for batch in (1, 3, 4, 27, 28, 29, 1000, 2**63 - 1):
            assert await collect(store, "s", batch=batch) == everything, batch
        assert await collect(store, "s") == everything


async def test_one_read_per_batch(sql_backend: Backend) -> None:
    async with sql_backend.session() as store:
        assert isinstance(store, SQLSession)
        for n in range(5):
            await store.append("s", a_run(str(n)), run_id=f"r{n}")  # 20 entries
        reads = count_reads(store)
        assert len(await collect(store, "s", batch=6)) == 20
        assert reads[0] == 4  # 6 + 6 + 6 + 2: a short batch is the last
        reads[0] = 0
        assert len(await collect(store, "s", batch=10)) == 20
        assert reads[0] == 3  # 10 + 10, then an empty batch ends it


async def test_an_unknown_or_empty_session_streams_nothing(sql_backend: Backend) -> None:
    async with sql_backend.session() as store:
        assert isinstance(store, SQLSession)
        assert await collect(store, "nobody") == []
        await store.append("empty", [], run_id="r0")
        assert await collect(store, "empty") == []


async def test_a_rewound_session_streams_across_the_hole(sql_backend: Backend) -> None:
    async with sql_backend.session() as store:
        assert isinstance(store, SQLSession)
        for n in range(4):
            await store.append("s", a_run(str(n)), run_id=f"r{n}")
        await store.rewind("s", keep_entries=6)  # the cut drops r1's dangling tool call
        await store.append("s", a_run("after"), run_id="r-after")
        expected = await store.load("s")
        assert len(expected) == 9
        for batch in (1, 2, 5, 100):
            assert await collect(store, "s", batch=batch) == expected, batch


async def test_entries_appended_while_streaming_come_once_in_order(sql_backend: Backend) -> None:
    async with sql_backend.session() as store:
        assert isinstance(store, SQLSession)
        await store.append("s", a_run("1"), run_id="r1")
        seen = []
        async for entry in store.iter_entries("s", batch=2):
            seen.append(entry)
            if len(seen) == 1:  # between two batches' reads
                await store.append("s", a_run("2"), run_id="r2")
        assert seen == a_run("1") + a_run("2")


async def test_arguments_are_checked_when_called(sql_backend: Backend) -> None:
    async with sql_backend.session() as store:
        assert isinstance(store, SQLSession)
        for bad in (0, -1, True, 1.5, "10", 2**63):
            with pytest.raises(UserError, match="batch"):
                store.iter_entries("s", batch=bad)  # type: ignore[arg-type]
        with pytest.raises(UserError, match="session_id"):
            store.iter_entries("")


async def test_memory_stays_bounded_by_a_batch(sql_backend: Backend) -> None:
    """5,000 entries of ~2 KB: a whole load holds them all, a stream one batch."""
    async with sql_backend.session() as store:
        assert isinstance(store, SQLSession)
        for n in range(50):
            run = [user(f"q {n}")] + [say(f"{n}.{k} " + "x" * 2_000) for k in range(99)]
            await store.append("big", run, run_id=f"r{n}")

        async def peak(read: Any) -> tuple[int, float]:
            tracemalloc.start()
            try:
                tracemalloc.reset_peak()
                count = await read()
                return count, tracemalloc.get_traced_memory()[1] / 2**20
            finally:
                tracemalloc.stop()

        async def stream() -> int:
            return sum([1 async for _ in store.iter_entries("big", batch=250)])

        async def load() -> int:
            return len(await store.load("big"))

        streamed, stream_peak = await peak(stream)
        loaded, load_peak = await peak(load)
        assert streamed == loaded == 5_000
        assert load_peak > 10, load_peak  # 5,000 x 2 KB held at once
        assert stream_peak < load_peak / 4, (stream_peak, load_peak)


async def test_documents_orjson_refuses_still_read(sql_backend: Backend) -> None:
    """Integers wider than 64 bits are valid JSON: every read path returns them exactly
    (not as the nearest float, which equals a power of two and fools ``==``)."""
    wide = {"count": 2**70 + 1, "nested": [-(2**65) - 1, 2**64]}
    entries = [user("q"), result("c1", "ok", raw=wide)]
    async with sql_backend.session() as store:
        assert isinstance(store, SQLSession)
        await store.append("s", entries, run_id="r1")
        assert await store.load("s") == entries
        assert await collect(store, "s") == entries
        assert (await store.segments("s"))[0].entries == entries
    async with sql_backend.storage() as storage:
        records = await storage.list_raw_messages("s")
        assert [record.message for record in records] == entries
