"""Differential: random operation sequences on zett-agent's own ``SQLiteSessionStorage``
and on ours (``lovia_store.integrations.zett``), every answer compared.

Sessions (create, get, update, delete, list with types, limit and offset),
appends of every message kind with timing, metadata, tags and usage, pages
with every bound, counts, snapshots with stale, equal and advancing
versions, and loads. Return values must be equal (generated ids, ids of
stored records and timestamps aside) and every refusal must be a
``ValueError`` with the same message. Inputs where the two differ by design
(docs/zett.md: empty ids, a title with surrounding spaces on append, a
self-parent on append) are not generated; they have tests of their own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.extensions.events import MessageTiming
from zett_agent.messages import (
    AgentMessage,
    AssistantMessage,
    ImageBytesSource,
    ImageContent,
    ImageDetail,
    ImageUrlSource,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from zett_agent.model import ModelUsage
from zett_agent.storage import SQLiteSessionStorage as ZettStorage
from zett_agent.storage import encode_messages

from helpers import examples
from lovia_store import UserError
from lovia_store.integrations.zett import SQLiteSessionStorage, codec

SESSIONS = ("a", "b")
PARENTS = ("p", "q")  # never a session of the pool: no self-parent on append
T0 = datetime(2026, 1, 1, tzinfo=UTC)

chars = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
text = st.text(chars, max_size=10)
small = st.integers(min_value=0, max_value=50)
json_value: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)
json_object = st.dictionaries(text, json_value, max_size=3)
tags = st.dictionaries(text.filter(lambda k: k.strip() != ""), json_value, max_size=3)
bad_tags = st.just({" ": 1})


def mostly(valid: st.SearchStrategy[Any], refused: st.SearchStrategy[Any]) -> Any:
    """Mostly ``valid``: a refused call changes nothing, so there is less to compare after it.

    (Hypothesis gives no weights to ``one_of``; a die does.)
    """
    return st.sampled_from((True, True, True, True, False)).flatmap(
        lambda ok: valid if ok else refused
    )


named = st.sampled_from(["Title", "  padded  ", "Ünï 🌍", "x" * 64])
display = st.one_of(st.none(), named, text, st.just(""), st.just("x" * 201))
append_display = mostly(
    st.none() | st.sampled_from(["T", "Two words"]), st.sampled_from(["", "   ", "x" * 201])
)
session_type = st.integers(min_value=-1, max_value=3)


@st.composite
def timings(draw: st.DrawFn) -> MessageTiming | None:
    if draw(st.booleans()):
        return None
    start = T0 + timedelta(microseconds=draw(st.integers(0, 10**12)))

    def span() -> dict[str, Any]:
        return {"started": start, "completed": start + timedelta(milliseconds=draw(small))}

    reasoning = draw(st.booleans())
    content = draw(st.booleans())
    extra: dict[str, Any] = {}
    if reasoning:
        extra.update(
            reasoning_started_at=start,
            reasoning_completed_at=start,
            reasoning_duration_ns=draw(small),
        )
    if content:
        extra.update(
            content_started_at=start,
            content_completed_at=start + timedelta(seconds=1),
            content_duration_ns=draw(small),
        )
    return MessageTiming(span()["started"], span()["completed"], draw(small), **extra)


image = st.builds(
    ImageContent,
    st.one_of(
        st.builds(ImageBytesSource, st.binary(min_size=1, max_size=8), st.just("image/png")),
        st.builds(
            ImageUrlSource, st.sampled_from(["https://e.com/a.png", "data:image/gif;base64,R0=="])
        ),
    ),
    st.sampled_from(list(ImageDetail)),
    st.none() | text,
)
content = st.one_of(text, st.lists(st.builds(TextContent, text) | image, max_size=3))
calls = st.lists(
    st.builds(ToolCall, text, text, json_object, st.none() | text),
    max_size=3,
)
messages = st.one_of(
    st.builds(
        SystemMessage, content=text, attributes=json_object, include_in_messages=st.booleans()
    ),
    st.builds(UserMessage, content=content, attributes=json_object),
    st.builds(
        AssistantMessage,
        content=text,
        reasoning=st.none() | text,
        tool_calls=calls.map(tuple),
        provider=st.none() | text,
        model=st.none() | text,
        replay_blocks=st.lists(json_object, max_size=2).map(tuple),
    ),
    st.builds(ToolMessage, tool_call_id=text, name=text, content=content, success=st.booleans()),
    st.builds(AgentMessage, content=text, include_in_messages=st.booleans()),
)
usages = mostly(
    st.none(),
    st.builds(
        lambda i, o, c, r, reported: ModelUsage(i + c, o + r, c, c // 2, reported, r),
        small,
        small,
        small,
        small,
        st.booleans(),
    ),
)
sid = st.sampled_from(SESSIONS)
operations = st.one_of(
    st.tuples(
        st.just("create_session"),
        st.fixed_dictionaries(
            {
                "session_id": mostly(st.none() | sid, st.just("")),
                "parent_session_id": st.none() | st.sampled_from((*PARENTS, "a")),
                "title": mostly(st.none() | named, display),
                "agent_name": mostly(st.none() | named, display),
                "session_type": session_type,
            }
        ),
    ),
    st.tuples(st.just("get_session"), st.fixed_dictionaries({"session_id": sid})),
    st.tuples(
        st.just("update_session"),
        st.fixed_dictionaries(
            {
                "session_id": sid,
                "title": mostly(named, display),
                "agent_name": mostly(st.none() | named, display),
            }
        ),
    ),
    st.tuples(st.just("delete_session"), st.fixed_dictionaries({"session_id": sid})),
    st.tuples(
        st.just("list_sessions"),
        st.fixed_dictionaries(
            {
                "session_types": st.none() | st.lists(session_type, max_size=2),
                "limit": mostly(st.integers(1, 4), st.just(0)),
                "offset": mostly(st.integers(0, 3), st.just(-1)),
            }
        ),
    ),
    st.tuples(
        st.just("append"),
        st.fixed_dictionaries(
            {
                "session_id": sid,
                "request_id": st.sampled_from(["r1", "r2"]),
                "message": messages,
                "timing": timings(),
                "parent_session_id": mostly(st.none(), st.sampled_from(PARENTS)),
                "title": append_display,
                "agent_name": append_display,
                "metadata": st.none() | json_object,
                "tags": mostly(st.none() | tags, bad_tags),
                "usage": usages,
            }
        ),
    ),
    st.tuples(
        st.just("append"),
        st.fixed_dictionaries(
            {
                "session_id": sid,
                "request_id": st.just("r"),
                "message": messages,
            }
        ),
    ),
    st.tuples(
        st.just("append"),
        st.fixed_dictionaries(
            {
                "session_id": sid,
                "request_id": st.just("r"),
                "message": messages,
            }
        ),
    ),
    st.tuples(
        st.just("append"),
        st.fixed_dictionaries(
            {
                "session_id": sid,
                "request_id": st.just("r"),
                "message": messages,
            }
        ),
    ),
    st.tuples(
        st.just("list_raw_messages"),
        st.fixed_dictionaries(
            {
                "session_id": sid,
                "after_sequence": mostly(st.integers(0, 5), st.just(-1)),
                "through_sequence": mostly(st.none() | st.integers(1, 6), st.just(0)),
                "limit": mostly(st.integers(1, 4), st.just(0)),
                "offset": mostly(st.integers(0, 3), st.just(-1)),
            }
        ),
    ),
    st.tuples(st.just("count_messages"), st.fixed_dictionaries({"session_id": sid})),
    st.tuples(
        st.just("snapshot"),
        st.fixed_dictionaries(
            {
                "session_id": mostly(st.just("a"), sid),
                "compacted_message": st.builds(CompactedMessage, content=content),
                "compacted_through_sequence": mostly(st.integers(1, 2), st.integers(0, 6)),
                "expected_version": st.sampled_from((0, 0, 0, 1, 1, 2, 3)),
            }
        ),
    ),
    st.tuples(st.just("load"), st.fixed_dictionaries({"session_id": sid})),
)

_STAMPED = {"id", "created_at", "updated_at"}


def normal(value: Any, generated: dict[str, str]) -> Any:
    """A return value with what each store stamps itself taken out."""
    if isinstance(value, list | tuple):
        return [normal(item, generated) for item in value]
    if dataclasses.is_dataclass(value) and hasattr(value, "sequence"):  # a raw record
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        if fields["duration_ns"] == 0 and fields["started_at"] == fields["completed_at"]:
            fields.pop("started_at"), fields.pop("completed_at")  # an instant: each store's now
        return {k: normal(v, generated) for k, v in fields.items() if k not in _STAMPED}
    if isinstance(value, BaseModel):
        fields = {name: getattr(value, name) for name in type(value).model_fields}
        return {k: normal(v, generated) for k, v in fields.items() if k not in _STAMPED}
    if isinstance(value, str):
        return generated.get(value, value)
    return value


async def play(storage: Any, ops: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    generated: dict[str, str] = {}
    answers: list[Any] = []
    try:
        for method, arguments in ops:
            try:
                answer = await getattr(storage, method)(**arguments)
            except ValueError as exc:
                answers.append(("refused", str(exc)))
                continue
            if method == "create_session" and not arguments["session_id"]:
                generated[answer.session_id] = f"generated-{len(generated)}"
            answers.append(normal(answer, generated))
    finally:
        await storage.close()
    return answers


def run(ops: list[tuple[str, dict[str, Any]]]) -> tuple[list[Any], list[Any]]:
    with tempfile.TemporaryDirectory() as folder:
        theirs = asyncio.run(play(ZettStorage(Path(folder) / "zett.sqlite3"), ops))
        ours = asyncio.run(play(SQLiteSessionStorage(Path(folder) / "ours.sqlite3"), ops))
    return theirs, ours


prefix = st.lists(
    st.builds(
        lambda message: ("append", {"session_id": "a", "request_id": "r0", "message": message}),
        messages,
    ),
    min_size=1,
    max_size=4,
)


@settings(
    max_examples=examples(80),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(prefix, st.lists(operations, min_size=3, max_size=22))
def test_the_same_operations_give_the_same_answers(
    start: list[tuple[str, dict[str, Any]]], then: list[tuple[str, dict[str, Any]]]
) -> None:
    ops = start + then  # a session with messages to page through and compact from the start
    theirs, ours = run(ops)
    for step, (op, mine, zetts) in enumerate(zip(ops, ours, theirs, strict=True)):
        assert mine == zetts, (step, op[0])


def test_a_long_session_with_snapshots_gives_the_same_answers() -> None:
    """Enough appends for pages and snapshot boundaries to matter, without luck."""
    ops: list[tuple[str, dict[str, Any]]] = [
        (
            "append",
            {"session_id": "a", "request_id": f"r{n}", "message": UserMessage(content=f"m{n}")},
        )
        for n in range(12)
    ]
    for version, boundary in ((0, 3), (1, 3), (1, 2), (2, 5), (1, 8), (2, 8), (3, 12), (3, 13)):
        ops.append(
            (
                "snapshot",
                {
                    "session_id": "a",
                    "compacted_message": CompactedMessage(content=f"v{boundary}"),
                    "compacted_through_sequence": boundary,
                    "expected_version": version,
                },
            )
        )
        ops.append(("load", {"session_id": "a"}))
    for after, through, limit, offset in (
        (0, None, 5, 0),
        (3, 9, 2, 1),
        (0, 12, 100, 11),
        (11, None, 5, 0),
        (2, 2, 1, 0),
    ):
        ops.append(
            (
                "list_raw_messages",
                {
                    "session_id": "a",
                    "after_sequence": after,
                    "through_sequence": through,
                    "limit": limit,
                    "offset": offset,
                },
            )
        )
    theirs, ours = run(ops)
    assert ours == theirs
    snapshots = [answer for (op, _), answer in zip(ops, ours, strict=True) if op == "snapshot"]
    # v1 through 3; not advancing twice; stale; v2 through 8; equal; stale twice.
    assert [a[1] if isinstance(a, tuple) else a["version"] for a in snapshots] == [
        1,
        "Snapshot boundary must advance beyond the previous checkpoint",
        "Snapshot boundary must advance beyond the previous checkpoint",
        "Snapshot conflict; reload the session",
        2,
        "Snapshot boundary must advance beyond the previous checkpoint",
        "Snapshot conflict; reload the session",
        "Snapshot conflict; reload the session",
    ]


REFUSED = "refused"


def _zett_text(message: Any) -> str:
    try:
        return encode_messages([message])[1:-1]
    except (TypeError, ValueError):
        return REFUSED


def _our_text(message: Any) -> str:
    """Our envelope, or ``REFUSED`` for a ``UserError`` (the shared codec refuses a
    value JSON cannot carry before zett's encoder would meet it)."""
    try:
        return codec.encode_envelope(message)
    except UserError:
        return REFUSED


@settings(max_examples=300, deadline=None, database=None)
@given(messages | st.builds(CompactedMessage, content=content))
def test_our_envelope_is_zetts_text_character_for_character(message: Any) -> None:
    """The integration writes the envelope itself (no deep copies); the row holds the
    text zett's own encode_messages would have written."""
    if isinstance(message, CompactedMessage):
        assert codec.encode_compacted(message) == _zett_text(message)
    else:
        assert _our_text(message) == _zett_text(message)


@pytest.mark.parametrize(
    "attributes",
    [{"x": float("nan")}, {"x": {1, 2}}, {"x": datetime(2026, 1, 1, tzinfo=UTC)}, {"x": b"\x00"}],
    ids=["nan", "set", "datetime", "bytes"],
)
def test_what_zett_cannot_encode_we_refuse_alike(attributes: dict[str, Any]) -> None:
    message = UserMessage(content="hi", attributes=attributes)
    assert _our_text(message) == _zett_text(message)
