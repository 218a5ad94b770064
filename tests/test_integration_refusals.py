"""The lovia and zett-agent integrations never raise a raw error (issue 31).

A bad input through ``lovia_store.integrations.lovia`` (with the real lovia) or
``lovia_store.integrations.zett`` (with the real zett-agent) is a ``UserError``,
raised before anything is written; a stored row another program damaged (garbage
written into its column with plain SQL) is a ``StoredValueError`` naming the row,
on SQLite, PostgreSQL and MariaDB. Never ``TypeError``, ``AttributeError``,
``KeyError``, ``RecursionError`` (a value nested 10,000 deep), a JSON decoder's
error (``orjson.JSONDecodeError`` for a lone surrogate, ``json.JSONDecodeError`` for a
damaged run head), ``UnicodeDecodeError`` or a bare ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from lovia.checkpointer import RunHead
from lovia.messages import Usage as LoviaUsage
from lovia.transcript import (
    AssistantTextEntry as LoviaText,
)
from lovia.transcript import (
    InputEntry as LoviaInput,
)
from lovia.transcript import (
    ReasoningEntry as LoviaReasoning,
)
from lovia.transcript import (
    ToolCallEntry as LoviaCall,
)
from lovia.transcript import (
    ToolResultEntry as LoviaResult,
)
from sqlalchemy import text
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from zett_agent.model import ModelUsage

from lovia_store import Database, StoredValueError, UnknownEntryTypeError, UserError
from lovia_store.integrations import lovia as drop_in
from lovia_store.integrations.zett import SQLSessionStorage

DEEP = 10_000


def deep_list(levels: int = DEEP) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


def deep_dict(levels: int = DEEP) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"k": value}
    return value


def head(**changes: Any) -> RunHead:
    values: dict[str, Any] = {"agent_name": "agent", "usage": LoviaUsage(), "turns": 1}
    values.update(changes)
    return RunHead(**values)


def text_entry(content: Any = "hello") -> LoviaText:
    return LoviaText(content=content)


Call = Callable[[drop_in.SQLiteSession, drop_in.SQLiteCheckpointer], Awaitable[Any]]

LOVIA_INPUTS: dict[str, Call] = {
    "entries not a list": lambda s, c: s.append("s", 5),  # type: ignore[arg-type]
    "entries a string": lambda s, c: s.append("s", "entries"),  # type: ignore[arg-type]
    "content not text": lambda s, c: s.append("s", [text_entry(5)]),
    "content a lone surrogate": lambda s, c: s.append("s", [text_entry("a\ud800b")]),
    "role unknown": lambda s, c: s.append("s", [LoviaInput(role="robot", content="x")]),  # type: ignore[arg-type]
    "content parts not parts": lambda s, c: s.append(
        "s",
        [LoviaInput(role="user", content=[object()])],  # type: ignore[list-item]
    ),
    "call id not text": lambda s, c: s.append(
        "s",
        [LoviaCall(call_id=None, name="t", arguments="{}")],  # type: ignore[arg-type]
    ),
    "raw nested 10,000 deep": lambda s, c: s.append(
        "s", [LoviaResult(call_id="c", output="o", raw=deep_list())]
    ),
    "metadata nested 10,000 deep": lambda s, c: s.append(
        "s", [LoviaReasoning(content="r", metadata=deep_dict())]
    ),
    "metadata with a number key": lambda s, c: s.append(
        "s",
        [LoviaReasoning(content="r", metadata={1: "x"})],  # type: ignore[dict-item]
    ),
    "meta nested 10,000 deep": lambda s, c: s.append("s", [text_entry()], meta=deep_dict()),
    "meta a surrogate key": lambda s, c: s.append("s", [text_entry()], meta={"\udc00": 1}),
    "run id not text": lambda s, c: s.append("s", [text_entry()], run_id=5),  # type: ignore[arg-type]
    "session id not text": lambda s, c: s.load(b"s"),  # type: ignore[arg-type]
    "keep_entries not a number": lambda s, c: s.rewind("s", keep_entries="1"),  # type: ignore[arg-type]
    "keep_chars huge": lambda s, c: s.trim_tool_results("s", keep_chars=2**64),
    "fork to a non-id": lambda s, c: s.fork("s", "", keep_entries=0),
    "head usage None": lambda s, c: c.append("r", [], head(usage=None)),
    "head output nested 10,000 deep": lambda s, c: c.append("r", [], head(output=deep_list())),
    "head context nested 10,000 deep": lambda s, c: c.append(
        "r", [], head(context_state=deep_dict())
    ),
    "head a lone surrogate": lambda s, c: c.append("r", [], head(output="\ud800")),
    "head status unknown": lambda s, c: c.append("r", [], head(status="exploded")),
    "head turns not a number": lambda s, c: c.append("r", [], head(turns="many")),
    "head agent name not text": lambda s, c: c.append("r", [], head(agent_name=None)),
    "head not a head": lambda s, c: c.append("r", [], {"agent_name": "a"}),  # type: ignore[arg-type]
    "head time a NaN": lambda s, c: c.append("r", [], head(updated_at=float("nan"))),
    "head error not an object": lambda s, c: c.append("r", [], head(error=[1])),
    "checkpoint entries not a list": lambda s, c: c.append("r", 5, head()),  # type: ignore[arg-type]
    "checkpoint entry not an entry": lambda s, c: c.append("r", ["x"], head()),  # type: ignore[list-item]
    "list_runs status unknown": lambda s, c: c.list_runs(status="exploded"),
    "list_runs limit too large": lambda s, c: c.list_runs(limit=2**64),
    "list_runs offset negative": lambda s, c: c.list_runs(offset=-1),
    "load a non-id": lambda s, c: c.load(None),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("case", list(LOVIA_INPUTS))
async def test_a_bad_input_to_the_lovia_drop_in_is_a_user_error_writing_nothing(
    case: str, tmp_path: Path
) -> None:
    path = tmp_path / "lovia.sqlite3"
    async with drop_in.SQLiteSession(path) as session, drop_in.SQLiteCheckpointer(path) as runs:
        with pytest.raises(UserError):
            await LOVIA_INPUTS[case](session, runs)
        assert await session.load("s") == []
        assert await runs.load("r") is None
        assert await runs.list_runs() == []


ZettCall = Callable[[SQLSessionStorage], Awaitable[Any]]

ZETT_INPUTS: dict[str, ZettCall] = {
    "a lone surrogate in content": lambda z: z.append(
        "s", "r", AssistantMessage(content="a\ud800b")
    ),
    "a lone surrogate in a text part": lambda z: z.append(
        "s", "r", UserMessage(content=[TextContent("\udfff")])
    ),
    "a lone surrogate in a tool result": lambda z: z.append(
        "s", "r", ToolMessage(tool_call_id="c", name="t", content="\ud800")
    ),
    "a lone surrogate in an argument key": lambda z: z.append(
        "s",
        "r",
        AssistantMessage(tool_calls=(ToolCall(id="c", name="t", arguments={"\ud800": 1}),)),
    ),
    "arguments nested 10,000 deep": lambda z: z.append(
        "s",
        "r",
        AssistantMessage(tool_calls=(ToolCall(id="c", name="t", arguments=deep_dict()),)),
    ),
    "arguments with a NaN": lambda z: z.append(
        "s",
        "r",
        AssistantMessage(tool_calls=(ToolCall(id="c", name="t", arguments={"x": float("inf")}),)),
    ),
    "attributes not JSON": lambda z: z.append(
        "s", "r", UserMessage(content="x", attributes={"when": object()})
    ),
    "attributes nested 10,000 deep": lambda z: z.append(
        "s", "r", UserMessage(content="x", attributes=deep_dict())
    ),
    "metadata nested 10,000 deep": lambda z: z.append(
        "s", "r", UserMessage(content="x"), metadata=deep_dict()
    ),
    "tags not an object": lambda z: z.append("s", "r", UserMessage(content="x"), tags=[1]),  # type: ignore[arg-type]
    "usage not a usage": lambda z: z.append(
        "s",
        "r",
        AssistantMessage(content="x"),
        usage={"input_tokens": 1},  # type: ignore[arg-type]
    ),
    "usage past 64 bits": lambda z: z.append(
        "s", "r", AssistantMessage(content="x"), usage=ModelUsage(input_tokens=2**64)
    ),
    "message None": lambda z: z.append("s", "r", None),  # type: ignore[arg-type]
    "timing not a timing": lambda z: z.append("s", "r", UserMessage(content="x"), timing=5),  # type: ignore[arg-type]
    "a summary with a lone surrogate": lambda z: z.snapshot(
        "s", CompactedMessage(content="\ud800"), 1, 0
    ),
    "a summary nested 10,000 deep": lambda z: z.snapshot(
        "s", CompactedMessage(content="x", attributes=deep_dict()), 1, 0
    ),
    "a snapshot version past 64 bits": lambda z: z.snapshot(
        "s", CompactedMessage(content="x"), 1, 2**64
    ),
    "a title not text": lambda z: z.create_session(title=5),  # type: ignore[arg-type]
    "session types not numbers": lambda z: z.list_sessions(session_types=["a"]),  # type: ignore[list-item]
    "a page limit not a number": lambda z: z.list_raw_messages("s", limit="9"),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("case", list(ZETT_INPUTS))
async def test_a_bad_input_to_the_zett_drop_in_is_a_user_error_writing_nothing(
    case: str, tmp_path: Path
) -> None:
    async with SQLSessionStorage(tmp_path / "zett.sqlite3") as storage:
        with pytest.raises(UserError):
            await ZETT_INPUTS[case](storage)
        assert await storage.list_sessions() == []


# -- damaged rows ------------------------------------------------------------------

NESTED = "[" * DEEP + "]" * DEEP
"""Valid JSON no recursive decoder reads."""

LOVIA_ROWS = "session_id = 'lovia'"
ZETT_ROWS = "session_id = 'zett'"
RUN_ROWS = "run_id = 'run'"
LOVIA_READS = ("load", "segments", "zett load", "zett page")
ZETT_READS = ("zett load", "zett page")
RUN_READS = ("run load", "run list")

DAMAGE: list[tuple[str, str, str, Any, tuple[str, ...]]] = [
    # (table, column, which rows, the garbage, the integration calls that read it)
    ("lovia_messages", "entry_json", LOVIA_ROWS, "{broken", LOVIA_READS),
    ("lovia_messages", "entry_json", LOVIA_ROWS, "5", LOVIA_READS),
    ("lovia_messages", "entry_json", LOVIA_ROWS, "[1, 2]", LOVIA_READS),
    ("lovia_messages", "entry_json", LOVIA_ROWS, '{"type": "mystery"}', LOVIA_READS),
    ("lovia_messages", "entry_json", LOVIA_ROWS, '{"type": "input"}', LOVIA_READS),
    ("lovia_messages", "entry_json", LOVIA_ROWS, '{"type": "assistant_text"}', LOVIA_READS),
    ("lovia_messages", "entry_json", LOVIA_ROWS, NESTED, LOVIA_READS),
    ("lovia_session_runs", "meta_json", LOVIA_ROWS, "[]", ("segments",)),
    ("lovia_session_runs", "meta_json", LOVIA_ROWS, "{broken", ("segments",)),
    ("lovia_run_heads", "head_json", RUN_ROWS, "{broken", RUN_READS),
    ("lovia_run_heads", "head_json", RUN_ROWS, "{}", RUN_READS),
    ("lovia_run_heads", "head_json", RUN_ROWS, "[]", RUN_READS),
    ("lovia_run_heads", "head_json", RUN_ROWS, NESTED, RUN_READS),
    ("lovia_run_heads", "head_json", RUN_ROWS, '{"agent_name": "a", "usage": null}', RUN_READS),
    ("lovia_run_heads", "head_json", RUN_ROWS, '{"agent_name": 5, "status": "running"}', RUN_READS),
    ("lovia_run_heads", "head_json", RUN_ROWS, '{"agent_name": "a", "status": "odd"}', RUN_READS),
    ("lovia_run_entries", "entry_json", RUN_ROWS, '{"type": "tool_result"}', ("run load",)),
    ("lovia_run_entries", "entry_json", RUN_ROWS, "nul", ("run load",)),
    ("lovia_messages", "envelope_json", ZETT_ROWS, "{broken", ZETT_READS),
    ("lovia_messages", "envelope_json", ZETT_ROWS, '{"kind": 99, "data": {}}', ZETT_READS),
    ("lovia_messages", "envelope_json", ZETT_ROWS, '{"kind": 1, "data": 5}', ZETT_READS),
    (
        "lovia_messages",
        "envelope_json",
        ZETT_ROWS,
        '{"kind": 1, "data": ' + NESTED + "}",
        ZETT_READS,
    ),
    ("lovia_messages", "metadata_json", ZETT_ROWS, "{broken", ZETT_READS),
    ("lovia_messages", "tags_json", ZETT_ROWS, "[1]", ZETT_READS),
    ("lovia_snapshots", "envelope_json", ZETT_ROWS, "{broken", ("zett load",)),
    ("lovia_snapshots", "envelope_json", ZETT_ROWS, NESTED, ("zett load",)),
]
"""The text cases. A zett row's projection (``entry_json``) and a snapshot's summary
are read only when the row has no envelope (``NO_ENVELOPE``); on SQLite, bytes that
are not UTF-8 are written too (a server's text column cannot hold them)."""

NO_ENVELOPE: list[tuple[str, str, str, Any, tuple[str, ...]]] = [
    ("lovia_messages", "entry_json", ZETT_ROWS, "{broken", ZETT_READS),
    ("lovia_messages", "entry_json", ZETT_ROWS, '{"type": "input"}', ZETT_READS),
    ("lovia_snapshots", "summary_json", ZETT_ROWS, "{broken", ("zett load",)),
    ("lovia_snapshots", "summary_json", ZETT_ROWS, "{}", ("zett load",)),
    ("lovia_snapshots", "summary_json", ZETT_ROWS, '{"content": 5}', ("zett load",)),
]

NOT_UTF8 = b"{\xff\xfe}"
BYTES: list[tuple[str, str, str, Any, tuple[str, ...]]] = [
    ("lovia_messages", "entry_json", LOVIA_ROWS, NOT_UTF8, LOVIA_READS),
    ("lovia_session_runs", "meta_json", LOVIA_ROWS, NOT_UTF8, ("segments",)),
    ("lovia_run_heads", "head_json", RUN_ROWS, NOT_UTF8, RUN_READS),
    ("lovia_run_entries", "entry_json", RUN_ROWS, NOT_UTF8, ("run load",)),
    ("lovia_messages", "envelope_json", ZETT_ROWS, NOT_UTF8, ZETT_READS),
    ("lovia_messages", "metadata_json", ZETT_ROWS, NOT_UTF8, ZETT_READS),
    ("lovia_snapshots", "envelope_json", ZETT_ROWS, NOT_UTF8, ("zett load",)),
]


async def _populate(db: Database) -> None:
    async with drop_in.SQLSession(db) as session, drop_in.SQLCheckpointer(db) as runs:
        await session.append(
            "lovia",
            [LoviaInput(role="user", content="hi"), text_entry("hello")],
            run_id="run",
            meta={"n": 1},
        )
        await runs.append("run", [text_entry("step")], head(status="completed"))
    async with SQLSessionStorage(db) as storage:
        await storage.append("zett", "r1", UserMessage(content="hi"), metadata={"m": 1})
        await storage.append("zett", "r2", AssistantMessage(content="hello"))
        await storage.snapshot("zett", CompactedMessage(content="so far"), 1, 0)


async def _read(name: str, url: str, session_id: str) -> Any:
    """One integration call that reads the damaged row, on stores of its own."""
    if name in ("load", "segments"):
        async with drop_in.SQLSession(url) as session:
            return await getattr(session, name)(session_id)
    if name.startswith("run"):
        async with drop_in.SQLCheckpointer(url, lease_ttl=None) as runs:
            return await (runs.load("run") if name == "run load" else runs.list_runs())
    async with SQLSessionStorage(url) as storage:
        if name == "zett load":
            return await storage.load(session_id)
        return await storage.list_raw_messages(session_id)


async def _execute(db: Database, *statements: str, **values: Any) -> None:
    await db.write(lambda conn: [conn.execute(text(s), values) for s in statements])


async def test_a_damaged_row_read_through_either_integration_is_a_stored_value_error(
    empty_database_url: str,
) -> None:
    url = empty_database_url
    # One Database writes and damages the rows for the whole test; each read opens
    # stores of its own on the URL.
    async with Database(url) as db:
        await _populate(db)
        failures = await _read_every_damage(db, url)
    assert not failures, "\n".join(failures)


async def _read_every_damage(db: Database, url: str) -> list[str]:
    """Each case's damage written, read through every call that reads it, and undone:
    what was read or raised that is not a typed refusal naming the damaged column."""
    cases = [(case, False) for case in DAMAGE] + [(case, True) for case in NO_ENVELOPE]
    if url.startswith("sqlite"):
        cases += [(case, False) for case in BYTES]
    failures = []
    for (table, column, where, garbage, reads), no_envelope in cases:
        statements = [f"UPDATE {table} SET {column} = :v WHERE {where}"]
        if no_envelope:
            statements.append(f"UPDATE {table} SET envelope_json = NULL WHERE {where}")
        await _execute(db, *statements, v=garbage)
        session_id = "zett" if where == ZETT_ROWS else "lovia"
        for name in reads:
            try:
                await _read(name, url, session_id)
            except UnknownEntryTypeError as error:  # a type this version does not know
                if "mystery" not in str(garbage):
                    failures.append(f"{table}.{column} = {garbage!r:.40}, {name}: {error!r}")
            except StoredValueError as error:
                if error.table != table or error.column != column:
                    failures.append(f"{table}.{column} = {garbage!r:.40}, {name}: names {error}")
            except Exception as error:  # the failure is what it raised
                failures.append(f"{table}.{column} = {garbage!r:.40}, {name}: {error!r:.300}")
            else:
                failures.append(f"{table}.{column} = {garbage!r:.40}, {name}: read")
        await _restore(db)
    return failures


async def _restore(db: Database) -> None:
    """Write the rows anew (the simplest way back to what the stores wrote)."""
    await _execute(
        db,
        "DELETE FROM lovia_run_entries",
        "DELETE FROM lovia_run_leases",
        "DELETE FROM lovia_run_heads",
        "DELETE FROM lovia_snapshots",
        "DELETE FROM lovia_session_runs",
        "DELETE FROM lovia_messages",
        "DELETE FROM lovia_sessions",
    )
    await _populate(db)


async def test_a_lovia_call_whose_arguments_nest_10000_deep_reads_through_zett(
    tmp_path: Path,
) -> None:
    """lovia's arguments are a string the drop-in stores as given; zett's view decodes
    them, and arguments no decoder reads are zett's undecodable call, not a raw error."""
    path = tmp_path / "both.sqlite3"
    arguments = "[" * DEEP + "]" * DEEP
    async with drop_in.SQLiteSession(path) as session:
        await session.append("s", [LoviaCall(call_id="c", name="t", arguments=arguments)])
        assert (await session.load("s"))[0].arguments == arguments
    async with SQLSessionStorage(path) as storage:
        (record,) = await storage.list_raw_messages("s")
    (call,) = record.message.tool_calls
    assert call.arguments == {} and call.error is not None
    assert call.error.startswith("arguments are not a JSON object")
