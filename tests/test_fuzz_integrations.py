"""Generated hostile values through the lovia and zett-agent drop-ins: each call either
stores its values exactly or is refused with a ``UserError`` having changed nothing
(issue 31).

The values are the frameworks' own objects (lovia 0.9's entries and ``RunHead``,
zett-agent's messages and ``ModelUsage``) holding what a caller may pass by mistake:
lone surrogates, NUL, NaN and infinities, integers past 64 bits, keys that are not
strings, sets, bytes and other objects, nesting from 150 to 10,000 levels, a field of
the wrong type. Exact means by the framework's own converter (``entry_to_dict``,
``RunHead.to_dict``, zett's ``encode_messages``) and typed: ``1``, ``1.0`` and ``True``
differ (a tuple reads back as a list, as JSON has it). Deterministic
(``derandomize``), on SQLite.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lovia.checkpointer import RunHead
from lovia.messages import Usage as LoviaUsage
from lovia.transcript import (
    AssistantTextEntry,
    InputEntry,
    ReasoningEntry,
    ToolCallEntry,
    ToolResultEntry,
    entry_to_dict,
)
from zett_agent.messages import (
    AgentMessage,
    AssistantMessage,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from zett_agent.model import ModelUsage
from zett_agent.storage import encode_messages

import lovia_strategies as gen
from lovia_store import UserError
from lovia_store.integrations import lovia as drop_in
from lovia_store.integrations.zett import SQLSessionStorage

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def nested(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


# -- hostile values ------------------------------------------------------------------

text = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["\ud800", "a\udfffb", "\x00", "nul\x00", "\U0001f980", " ", ""]),
)
_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**63, 2**64, -(2**63) - 1, 10**40]),
    st.floats(),  # NaN and the infinities too
    text,
    st.sampled_from([b"bytes", frozenset({1}), object(), 1j]),
)
value: st.SearchStrategy[Any] = st.one_of(
    st.recursive(
        _leaf,
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.lists(inner, max_size=2).map(tuple)
            | st.dictionaries(st.one_of(text, st.integers(0, 3), st.none()), inner, max_size=3)
        ),
        max_leaves=6,
    ),
    st.sampled_from([150, 199, 201, 260, 10_000]).map(nested),
)
mapping = st.dictionaries(text, value, max_size=3)

lovia_entry = st.one_of(
    gen.entry,
    st.builds(AssistantTextEntry, content=text | value, id=st.none() | text),
    st.builds(ReasoningEntry, content=text, metadata=mapping | value),
    st.builds(ToolResultEntry, call_id=text, output=text, raw=value, is_error=st.booleans()),
    st.builds(ToolCallEntry, call_id=text | value, name=text, arguments=text),
    st.builds(InputEntry, role=st.sampled_from(["user", "system", "robot"]), content=text | value),
)
lovia_head = st.builds(
    RunHead,
    agent_name=text | value,
    usage=st.one_of(
        st.builds(LoviaUsage, input_tokens=st.integers(0, 2**64), output_tokens=st.integers()),
        st.none(),
    ),
    turns=st.integers(-1, 2**64) | value,
    status=st.sampled_from([*gen.STATUSES, "exploded"]),
    output=value,
    error=st.none() | mapping | value,
    context_state=mapping,
    updated_at=st.floats(),
)

zett_message = st.one_of(
    st.builds(
        UserMessage,
        content=text | st.lists(st.builds(TextContent, text), max_size=2),
        attributes=st.just({}) | mapping,
    ),
    st.builds(
        AssistantMessage,
        content=text,
        reasoning=st.none() | text,
        tool_calls=st.lists(
            st.builds(
                ToolCall,
                id=text,
                name=text,
                arguments=st.dictionaries(text | st.integers(0, 2), value, max_size=3),
            ),
            max_size=2,
        ).map(tuple),
    ),
    st.builds(ToolMessage, tool_call_id=text, name=text, content=text, success=st.booleans()),
    st.builds(SystemMessage, content=text),
    st.builds(AgentMessage, content=text, attributes=st.just({}) | mapping),
)
usage = st.one_of(
    st.none(),
    st.builds(ModelUsage, input_tokens=st.integers(0, 2**64), output_tokens=st.integers(0, 9)),
    st.just({"input_tokens": 1}),  # not a ModelUsage (zett's own refuses bad counters)
)


# -- exactness -----------------------------------------------------------------------


def typed(item: Any) -> Any:
    """``item`` with every leaf's type kept, so that ``1``, ``1.0`` and ``True`` differ;
    a tuple is a list (JSON has only arrays)."""
    if isinstance(item, dict):
        return {"dict": {k: typed(v) for k, v in item.items()}}
    if isinstance(item, list | tuple):
        return {"list": [typed(v) for v in item]}
    return (type(item).__name__, item)


def _refused(error: BaseException) -> str:
    assert isinstance(error, UserError), f"{type(error).__name__}: {error}"
    return type(error).__name__


# -- lovia ---------------------------------------------------------------------------


def test_hostile_lovia_values_are_stored_exactly_or_refused_typed(tmp_path: Path) -> None:
    path = tmp_path / "lovia.sqlite3"
    outcomes: dict[str, int] = {"stored": 0, "refused": 0}
    runner = asyncio.Runner()

    async def play(
        entries: list[Any], run_id: str | None, meta: Any, head: RunHead, steps: list[Any]
    ) -> None:
        sid = f"s-{uuid.uuid4().hex}"
        rid = f"r-{uuid.uuid4().hex}"
        async with drop_in.SQLiteSession(path) as session:
            await session.append(sid, [AssistantTextEntry(content="before")], run_id="first")
            before = await session.load(sid)
            try:
                chosen = await session.append(sid, entries, run_id=run_id, meta=meta)
            except Exception as error:  # only a UserError, and nothing written
                _refused(error)
                outcomes["refused"] += 1
                assert await session.load(sid) == before
                assert len(await session.segments(sid)) == 1
            else:
                outcomes["stored"] += 1
                segment = (await session.segments(sid))[-1]
                assert segment.run_id == chosen
                assert [typed(entry_to_dict(e)) for e in segment.entries] == [
                    typed(entry_to_dict(e)) for e in entries
                ]
                assert typed(segment.meta) == typed(meta)
        async with drop_in.SQLiteCheckpointer(path, lease_ttl=None) as runs:
            try:
                await runs.append(rid, steps, head)
            except Exception as error:
                _refused(error)
                outcomes["refused"] += 1
                assert await runs.load(rid) is None
            else:
                outcomes["stored"] += 1
                loaded = await runs.load(rid)
                assert loaded is not None
                assert typed(loaded.head.to_dict()) == typed(head.to_dict())
                assert [typed(entry_to_dict(e)) for e in loaded.entries] == [
                    typed(entry_to_dict(e)) for e in steps
                ]
            await runs.list_runs()  # a stored head never fails the listing

    @FUZZ
    @given(
        st.lists(lovia_entry, max_size=3),
        st.none() | text,
        st.none() | mapping | value,
        lovia_head | gen.head,
        st.lists(lovia_entry, max_size=2),
    )
    def check(entries: list[Any], run_id: Any, meta: Any, head: RunHead, steps: list[Any]) -> None:
        runner.run(play(entries, run_id, meta, head, steps))

    with runner:
        check()
    assert outcomes["stored"] > 10 and outcomes["refused"] > 10, outcomes


# -- zett ----------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::lovia_store.errors.DefaultPathWarning")
def test_hostile_zett_values_are_stored_exactly_or_refused_typed(tmp_path: Path) -> None:
    path = tmp_path / "zett.sqlite3"
    outcomes: dict[str, int] = {"stored": 0, "refused": 0}
    runner = asyncio.Runner()

    async def play(
        message: Any, request_id: Any, metadata: Any, tags: Any, used: Any, title: Any
    ) -> None:
        sid = f"s-{uuid.uuid4().hex}"
        async with SQLSessionStorage(path) as storage:
            await storage.append(sid, "first", UserMessage(content="before"))
            try:
                await storage.append(
                    sid,
                    request_id,
                    message,
                    metadata=metadata,
                    tags=tags,
                    usage=used if isinstance(message, AssistantMessage) else None,
                    title=title,
                )
            except Exception as error:
                _refused(error)
                outcomes["refused"] += 1
                assert await storage.count_messages(sid) == 1
                assert len(await storage.list_raw_messages(sid)) == 1
                return
            outcomes["stored"] += 1
            record = (await storage.list_raw_messages(sid))[-1]
            assert encode_messages([record.message]) == encode_messages([message])
            assert typed(record.metadata) == typed(dict(metadata or {}))
            assert typed(record.tags) == typed(dict(tags or {}))
            await storage.load(sid)
        async with drop_in.SQLSession(path) as session:  # the same rows, lovia's view
            await session.load(sid)

    @FUZZ
    @given(
        zett_message,
        st.just("request") | st.just("request 🦀") | text,
        st.none() | st.just({"k": 1}) | mapping,
        st.none() | mapping,
        usage,
        st.none() | st.just("a title") | text,
    )
    def check(
        message: Any, request_id: Any, metadata: Any, tags: Any, used: Any, title: Any
    ) -> None:
        runner.run(play(message, request_id, metadata, tags, used, title))

    with runner:
        check()
    assert outcomes["stored"] > 10 and outcomes["refused"] > 10, outcomes
