"""Hypothesis strategies for the differential tests: lovia's own objects and operations.

Everything generated is lovia 0.9.119's (its entry dataclasses, parts,
``RunHead``, ``Usage``) and something both stores must accept: no lone
surrogates, no NaN, no empty or NUL-carrying ids (those are refusals, tested
on their own). Text reaches past the BMP; integers span 64 bits. The known
cases at the end are played first: each once differed between lovia and us.
"""

from __future__ import annotations

import base64
from typing import Any

from hypothesis import strategies as st
from lovia.checkpointer import RunHead
from lovia.messages import Usage
from lovia.parts import FilePart, ImagePart, TextPart
from lovia.transcript import (
    AssistantTextEntry,
    InputEntry,
    ReasoningEntry,
    ToolCallEntry,
    ToolResultEntry,
)

# lovia's trim marker ends with this; outputs that carry it are already trimmed.
SENTINEL = "archived to a result store]"
STATUSES = ("running", "interrupted", "completed", "failed")

# Any code point but surrogates: NUL, controls, combining marks, emoji.
_chars = st.characters(exclude_categories=("Cs",))
text = st.text(_chars, max_size=12)
# Ids as callers choose them: printable, non-empty, sometimes with spaces or
# non-BMP characters, never NUL (refused: PostgreSQL cannot store it).
ident = st.text(st.characters(exclude_categories=("Cs", "Cc")), min_size=1, max_size=16)
int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)

json_value: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | int64 | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=5,
)
json_object = st.dictionaries(text, json_value, max_size=4)

_b64 = st.binary(max_size=24).map(lambda raw: base64.b64encode(raw).decode("ascii"))
_mime = st.sampled_from(["image/png", "image/jpeg", "application/pdf", "text/plain"])
_url = text.map(lambda path: f"https://example.com/{path}")
part = st.one_of(
    st.builds(TextPart, text=text),
    st.builds(ImagePart, url=_url, detail=st.sampled_from([None, "auto", "low", "high"])),
    st.builds(ImagePart, data=_b64, mime_type=_mime),
    st.builds(FilePart, url=_url, mime_type=st.none() | _mime, filename=st.none() | text),
    st.builds(FilePart, data=_b64, mime_type=_mime, filename=st.none() | text),
)
parts = st.lists(part, min_size=1, max_size=3)


@st.composite
def output(draw: st.DrawFn) -> str:
    """A tool output: short, long (past lovia's 400-character default), or already trimmed."""
    kind = draw(st.sampled_from(["long", "short", "trimmed"]))
    if kind == "short":
        return draw(text)
    body = draw(st.text(_chars, min_size=1, max_size=8)) * draw(st.integers(60, 200))
    if kind == "long":
        return body
    return f"{body}\n[... 1,234 chars trimmed from stored history; {SENTINEL}"


# A small pool of call ids, so results pair with calls and a rewind can
# leave calls dangling.
call_id = st.sampled_from(["c0", "c1", "c2", "call 🦀"])

entry = st.one_of(
    st.builds(
        ToolResultEntry,
        call_id=call_id,
        output=output(),
        raw=json_value,
        is_error=st.booleans(),
        parts=st.none() | parts,
    ),
    st.builds(InputEntry, role=st.sampled_from(["system", "user"]), content=text | parts),
    st.builds(ToolCallEntry, call_id=call_id, name=ident, arguments=text),
    st.builds(AssistantTextEntry, content=text, id=st.none() | ident),
    st.builds(
        ReasoningEntry,
        content=text,
        id=st.none() | ident,
        provider=st.none() | st.sampled_from(["anthropic", "openai"]),
        metadata=json_object,
    ),
)
# Mostly runs with entries; now and then one without (a segment all the same).
entries = st.lists(entry, min_size=1, max_size=6) | st.just([])

# -- session operations ------------------------------------------------------------
# Each is a tuple the test plays on both stores; ``session`` picks one of two
# sessions, so one session's operations must not reach the other.
session = st.integers(0, 1)
_keep = st.sampled_from([0, 0, 1, 2, 3, 10, 400, 10_000, -1])

_append = st.tuples(
    st.just("append"),
    session,
    entries,
    # None: omitted (each store picks its own id); an int: re-append the run
    # appended that many appends ago (a no-op); a str: given.
    st.none() | st.integers(0, 3) | ident,
    st.none() | json_object,
)
_trim = st.tuples(st.just("trim"), session, _keep, st.sampled_from([0, 0, 1, 2, 5, -1]))
# The cut: -1 is refused; any other number is taken modulo (entries + 2), so
# every cut from 0 to one past the end comes up.
_rewind = st.tuples(st.just("rewind"), session, st.integers(-1, 40))
_clear = st.tuples(st.just("clear"), session)
# Appends weigh most: the other operations need something to work on.
_session_kinds = {"append": _append, "trim": _trim, "rewind": _rewind, "clear": _clear}
session_op = st.sampled_from(
    ["append", "append", "rewind", "append", "trim", "append", "rewind", "append", "clear"]
).flatmap(_session_kinds.__getitem__)
session_ops = st.lists(session_op, min_size=3, max_size=14)

# A history for the every-cut test: appends only, a run id given or omitted.
_run = st.lists(entry, min_size=1, max_size=4) | st.just([])
history = st.lists(st.tuples(_run, st.booleans(), st.none() | json_object), min_size=2, max_size=4)

# -- checkpoint operations ---------------------------------------------------------
_epoch = st.floats(min_value=0, max_value=4e9, allow_nan=False)
head = st.builds(
    RunHead,
    agent_name=ident,
    usage=st.builds(
        Usage,
        input_tokens=st.integers(0, 2**63 - 1),
        output_tokens=st.integers(0, 10**6),
        cache_read_tokens=st.integers(0, 10**6),
        cache_write_tokens=st.integers(0, 10**6),
    ),
    turns=st.integers(0, 50),
    status=st.sampled_from(STATUSES),
    output=json_value,
    error=st.none() | json_object,
    last_input_tokens=st.none() | st.integers(0, 10**7),
    context_state=json_object,
    updated_at=_epoch,
    pending_handoff=st.none() | ident,
    started_at=st.none() | _epoch,
)
run = st.integers(0, 1)  # one of two run ids per example
_checkpoint_kinds = {
    "append": st.tuples(st.just("append"), run, entries, head),
    "head": st.tuples(st.just("append"), run, st.just([]), head),  # a head-only step
    "load": st.tuples(st.just("load"), run),
    "delete": st.tuples(st.just("delete"), run),
}
checkpoint_op = st.sampled_from(
    ["append", "load", "head", "append", "load", "append", "delete"]
).flatmap(_checkpoint_kinds.__getitem__)
checkpoint_ops = st.lists(checkpoint_op, min_size=2, max_size=14)


# -- known cases -----------------------------------------------------------------


def tool_run(output: str = "x" * 1_000, raw: object = None) -> list[Any]:
    return [ToolCallEntry("c1", "lookup", "{}"), ToolResultEntry("c1", output, raw=raw)]


WIDE = {"n": 2**64 + 1, "nested": [-(2**63) - 1, 2**70 + 1], "top": 2**63 - 1}
# (The regression tests in test_session_contract.py and test_streaming.py say how.)
SESSION_CASES: list[list[tuple[Any, ...]]] = [
    # trim's keep_runs counts a run without entries
    [("append", 0, tool_run(), "r1", None), ("append", 0, [], "e", {"m": 1}), ("trim", 0, 10, 1)],
    # a run without entries keeps its place after a rewind left sequences unused
    [
        ("append", 0, tool_run(), "r1", None),
        ("append", 0, tool_run(), "r2", None),
        ("rewind", 0, 2),
        ("append", 0, [], "empty", None),
        ("append", 0, [InputEntry("user", "after")], "r3", None),
    ],
    # runs without entries at the cut, and before everything at a cut of 0
    [
        ("append", 0, [], "first", {"m": 0}),
        ("append", 0, tool_run(), "r1", None),
        ("append", 1, [], "elsewhere", None),
        ("append", 0, [], "at the cut", None),
        ("append", 0, tool_run(), "r2", None),
        ("rewind", 0, 2),
        ("rewind", 0, 0),
    ],
    # the marker's sentinel outside the output does not make it trimmed
    [("append", 0, tool_run(raw={"note": SENTINEL}), "r1", None), ("trim", 0, 10, 0)],
    # where lovia turns a value into JSON itself (a raw value), NaN becomes null on both
    [("append", 0, [ToolResultEntry("c1", "o", raw=[1.5, float("nan")])], "r1", None)],
    # integers wider than 64 bits stay integers (orjson reads them as floats)
    [
        (
            "append",
            0,
            [ToolResultEntry("c1", "o", raw=WIDE), ReasoningEntry("r", metadata=WIDE)],
            None,
            WIDE,
        )
    ],
]


def a_head(status: str, **fields: Any) -> RunHead:
    return RunHead("bot", Usage(1, 2), 1, status, updated_at=1_700_000_000.25, **fields)


CHECKPOINT_CASES: list[list[tuple[Any, ...]]] = [
    # a run with wide integers, loaded, deleted, started again head-only, loaded
    [
        ("append", 0, [ToolResultEntry("c1", "o", raw=WIDE)], a_head("running", output=WIDE)),
        ("append", 0, [], a_head("interrupted", context_state={"wide": WIDE})),
        ("load", 0),
        ("delete", 0),
        ("load", 0),
        ("append", 0, [], a_head("completed", output=float("nan"), started_at=1.5)),
        ("load", 0),
    ],
]
