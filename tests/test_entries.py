"""Transcript entries: lovia's JSON shape, lenient fields, strict types."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from backends import LOVIA_MANIFEST
from helpers import call, result, say, user
from lovia_store import (
    ImagePart,
    InputEntry,
    TextPart,
    ToolResultEntry,
    UnknownEntryTypeError,
    Usage,
    drop_dangling_tool_calls,
    entry_from_dict,
    entry_to_dict,
)

MANIFEST = LOVIA_MANIFEST
# Without the fixture, the cases below are none and test_the_fixture_is_there fails.
EVERY_ENTRY = (
    [e for session in MANIFEST["sessions"] for run in session["runs"] for e in run["entries"]]
    + [e for c in MANIFEST["checkpoints"] for e in c["snapshot"]["entries"]]
    if MANIFEST.available
    else []
)


def test_the_fixture_is_there() -> None:
    assert len(EVERY_ENTRY) > 20 and MANIFEST["sessions"]


@pytest.mark.parametrize("data", EVERY_ENTRY, ids=lambda d: d["type"])
def test_lovia_entries_round_trip_exactly(data: dict[str, object]) -> None:
    entry = entry_from_dict(data)
    assert entry_to_dict(entry) == data
    assert json.loads(entry.model_dump_json()) == data


def test_every_entry_type_is_covered_by_the_fixture() -> None:
    kinds = {d["type"] for d in EVERY_ENTRY}
    assert kinds == {"input", "assistant_text", "reasoning", "tool_call", "tool_result"}


def test_unknown_fields_are_ignored() -> None:
    entry = entry_from_dict({"type": "assistant_text", "content": "hi", "added_in_v2": [1]})
    assert entry_to_dict(entry) == {"type": "assistant_text", "content": "hi", "id": None}


@pytest.mark.parametrize("bad", [{"type": "video_clip", "url": "x"}, {"content": "no type"}])
def test_unknown_type_is_an_error_that_names_it(bad: dict[str, object]) -> None:
    with pytest.raises(UnknownEntryTypeError) as caught:
        entry_from_dict(bad)
    assert isinstance(caught.value, ValueError)
    assert repr(bad.get("type")) in str(caught.value)


def test_wrong_field_types_are_errors() -> None:
    with pytest.raises(ValidationError):
        entry_from_dict({"type": "tool_call", "call_id": "c", "name": "f", "arguments": {"a": 1}})
    with pytest.raises(ValidationError):
        entry_from_dict({"type": "input", "role": "assistant", "content": "x"})


def test_tool_result_parts_serialize_only_when_present() -> None:
    plain = entry_to_dict(result("c"))
    assert "parts" not in plain
    rich = ToolResultEntry(
        call_id="c", output="img", parts=[TextPart(text="t"), ImagePart(url="u")]
    )
    assert entry_to_dict(rich)["parts"] == [
        {"type": "text", "text": "t"},
        {"type": "image", "url": "u", "data": None, "mime_type": None, "detail": None},
    ]


def test_entries_are_immutable() -> None:
    entry = InputEntry(role="user", content="x")
    with pytest.raises(ValidationError):
        entry.content = "changed"  # type: ignore[misc]


def test_drop_dangling_tool_calls_keeps_answered_pairs_and_order() -> None:
    entries = [user("q"), call("a"), call("b"), result("a"), say("x"), call("c")]
    assert drop_dangling_tool_calls(entries) == [user("q"), call("a"), result("a"), say("x")]
    assert drop_dangling_tool_calls([]) == []


def test_usage_adds_up() -> None:
    total = Usage(input_tokens=1, output_tokens=2) + Usage(input_tokens=3, reasoning_tokens=4)
    assert total == Usage(input_tokens=4, output_tokens=2, reasoning_tokens=4)
    assert Usage().model_dump() == {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "reasoning_tokens": 0,
    }


def test_call_id_of_reads_the_field_or_none() -> None:
    from lovia_store.entries import call_id_of

    call = entry_from_dict({"type": "tool_call", "call_id": "c1", "name": "n", "arguments": "{}"})
    result = entry_from_dict({"type": "tool_result", "call_id": "c1", "output": "ok"})
    assert call_id_of(call) == "c1" and call_id_of(result) == "c1"
    assert call_id_of(InputEntry(role="user", content="hi")) is None
    assert call_id_of(entry_from_dict({"type": "assistant_text", "content": "x"})) is None
