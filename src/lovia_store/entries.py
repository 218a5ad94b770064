"""Transcript entries: lovia's serialized entry shape as pydantic models.

The JSON of every model is exactly what ``lovia.transcript.entry_to_dict``
writes, so transcripts stored by lovia read as-is. Readers are lenient about
fields (unknown ones are ignored, so a newer writer's additions never stop an
older reader) and strict about types (an unknown entry type is an error: a
silently skipped entry is how reasoning state and tool pairing get lost).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any, Literal, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError, from_json

from ._json import check_value
from .errors import StoredValueError, UnknownEntryTypeError, UserError

__all__ = [
    "MULTIPLE_ENTRIES",
    "AssistantTextEntry",
    "ContentPart",
    "FilePart",
    "ImagePart",
    "InputEntry",
    "ReasoningEntry",
    "TextPart",
    "ToolCallEntry",
    "ToolResultEntry",
    "TranscriptEntry",
    "Usage",
    "Where",
    "check_entry_values",
    "damaged",
    "drop_dangling_tool_calls",
    "entries_document",
    "entries_from_json_rows",
    "entry_from_dict",
    "entry_to_dict",
    "entry_to_json",
    "expand_documents",
    "rows_of",
    "session_rows",
]


class _Frozen(BaseModel):
    # Entries are shared between stores, snapshots and callers without
    # copying, so they must not change under anyone's feet.
    model_config = ConfigDict(frozen=True, extra="ignore")


class TextPart(_Frozen):
    text: str
    type: Literal["text"] = "text"


class ImagePart(_Frozen):
    url: str | None = None
    data: str | None = None
    mime_type: str | None = None
    detail: str | None = None
    type: Literal["image"] = "image"


class FilePart(_Frozen):
    url: str | None = None
    data: str | None = None
    mime_type: str | None = None
    filename: str | None = None
    type: Literal["file"] = "file"


ContentPart = Annotated[TextPart | ImagePart | FilePart, Field(discriminator="type")]


class InputEntry(_Frozen):
    """A ``system`` or ``user`` message contributed by the caller."""

    role: Literal["system", "user"]
    content: str | list[ContentPart]
    type: Literal["input"] = "input"


class AssistantTextEntry(_Frozen):
    content: str
    id: str | None = None
    type: Literal["assistant_text"] = "assistant_text"


class ReasoningEntry(_Frozen):
    """Provider-scoped reasoning; ``metadata`` is opaque replay data."""

    content: str
    id: str | None = None
    provider: str | None = None
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    type: Literal["reasoning"] = "reasoning"


class ToolCallEntry(_Frozen):
    """A tool call; ``arguments`` is the raw JSON text the model emitted."""

    call_id: str
    name: str
    arguments: str
    type: Literal["tool_call"] = "tool_call"


class ToolResultEntry(_Frozen):
    """A tool's rendered result. ``parts`` is serialized only when present,
    which keeps plain results byte-compatible with lovia's shape."""

    call_id: str
    output: str
    raw: JsonValue = None
    is_error: bool = False
    parts: list[ContentPart] | None = Field(default=None, exclude_if=lambda v: v is None)
    type: Literal["tool_result"] = "tool_result"


TranscriptEntry = Annotated[
    InputEntry | AssistantTextEntry | ReasoningEntry | ToolCallEntry | ToolResultEntry,
    Field(discriminator="type"),
]

ENTRY_TYPES = frozenset({"input", "assistant_text", "reasoning", "tool_call", "tool_result"})
ENTRY_CLASSES = (InputEntry, AssistantTextEntry, ReasoningEntry, ToolCallEntry, ToolResultEntry)

_ENTRY: TypeAdapter[TranscriptEntry] = TypeAdapter(TranscriptEntry)
_ENTRY_LIST: TypeAdapter[list[TranscriptEntry]] = TypeAdapter(list[TranscriptEntry])
_DECODE_BATCH = 256  # documents parsed and validated together


class Usage(BaseModel):
    """Token counters; ``+`` folds two usages together."""

    model_config = ConfigDict(extra="ignore")

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )


def _check_type(data: Any) -> None:
    if not isinstance(data, dict):
        raise ValueError(f"a transcript entry must be a JSON object, got {type(data).__name__}")
    entry_type = data.get("type")
    if entry_type not in ENTRY_TYPES:
        raise UnknownEntryTypeError(entry_type)


def entry_to_dict(entry: TranscriptEntry) -> dict[str, Any]:
    """The entry as lovia's JSON-safe dict."""
    return entry.model_dump(mode="json")


def call_id_of(entry: TranscriptEntry) -> str | None:
    """The entry's tool call id, None for entries that have none.

    Not ``getattr(entry, "call_id", None)``: a missing attribute goes through
    pydantic's ``__getattr__`` and costs 2 µs, several per append.
    """
    return entry.call_id if isinstance(entry, (ToolCallEntry, ToolResultEntry)) else None


def entry_to_json(entry: TranscriptEntry) -> str:
    """The entry as compact JSON text (the stored form).

    ``model_dump_json`` with its defaults, minus the cost of resolving its
    keyword arguments on every call (an append encodes every entry). An entry
    ``check_entries`` passed always encodes; one that cannot is a ``UserError``.
    """
    try:
        return entry.__pydantic_serializer__.to_json(entry).decode()
    except PydanticSerializationError as exc:
        raise UserError(f"a {entry.type} entry cannot be stored: {exc}") from None


def entry_from_dict(data: dict[str, Any]) -> TranscriptEntry:
    """Read one entry leniently; an unknown ``type`` raises ``UnknownEntryTypeError``."""
    _check_type(data)
    return _ENTRY.validate_python(data)


Where = tuple[str, str, Callable[[int], dict[str, object]]]
"""Where stored documents come from, for the error naming a damaged one: the
table, the column, and the key of the row at an index of the documents read."""


def rows_of(table: str, key: str, value: str) -> Where:
    """The rows of one session (``key`` ``session_id``) or run (``run_id``) in the
    order read: a damaged one is named by that id and its ``index`` (from 0)."""
    return table, "entry_json", lambda index: {key: value, "index": index}


M = TypeVar("M", bound=BaseModel)


def stored_model(model: type[M], text: str | bytes, where: Where, index: int = 0) -> M:
    """A stored model's JSON (a run's head), validated; a damaged one is a
    ``StoredValueError`` naming its row, never pydantic's ``ValidationError``."""
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise damaged(f"a stored {model.__name__} is not valid ({detail})", where, index) from None


def session_rows(session_id: str, sequences: Sequence[int] | None = None) -> Where:
    """A session's rows in ``lovia_messages``: a damaged one is named by its sequence
    (when the reader has them) or by the session alone."""
    if sequences is None:
        return "lovia_messages", "entry_json", lambda _: {"session_id": session_id}
    return (
        "lovia_messages",
        "entry_json",
        lambda i: {"session_id": session_id, "sequence": sequences[i]},
    )


def damaged(message: str, where: Where | None, index: int) -> StoredValueError:
    """The error for the stored document at ``index`` of the rows ``where`` names."""
    if where is None:
        return StoredValueError(message, table="?", column="entry_json", row={"index": index})
    table, column, key_of = where
    return StoredValueError(message, table=table, column=column, row=key_of(index))


def json_documents(
    rows: Sequence[str | bytes], where: Where | None = None, *, start: int = 0
) -> list[Any]:
    """Parse stored JSON documents, every integer exact.

    pydantic-core's parser keeps an integer wider than 64 bits an integer,
    which orjson turns into a float (older versions refused it), at about
    orjson's speed on a whole session's load. What it refuses and JSON allows
    (a lone surrogate escape, nesting past its limit of about 200) is read by
    the standard library. A document neither reads (broken JSON, invalid UTF-8,
    edited by another program) is a ``StoredValueError`` naming its row
    (``where``, at position ``start`` + its index), never a raw decode error.
    """
    try:
        return [from_json(row) for row in rows]
    except ValueError:
        pass
    out: list[Any] = []
    for index, row in enumerate(rows):
        try:
            out.append(from_json(row))
            continue
        except ValueError:
            pass
        try:
            out.append(json.loads(row))
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            message = f"a stored document is not JSON ({type(exc).__name__}: {exc})"
            raise damaged(message, where, start + index) from None
    return out


def name_unknown_entry(
    documents: Iterable[Any], where: Where | None = None, *, start: int = 0
) -> None:
    """After a batch failed validation: raise for the first document that is no entry.

    An unknown ``type`` raises ``UnknownEntryTypeError`` naming it; a bad field
    a ``StoredValueError`` naming its row (``where``, as ``json_documents``).
    Returns when every document is an entry.
    """
    for index, document in enumerate(documents):
        try:
            entry_from_dict(document)
        except ValidationError as exc:
            detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            message = f"a stored document is not a transcript entry ({detail})"
            raise damaged(message, where, start + index) from None
        except UnknownEntryTypeError:
            raise
        except ValueError as exc:  # not a JSON object
            message = f"a stored document is not a transcript entry ({exc})"
            raise damaged(message, where, start + index) from None


# A stored entry document is one entry's JSON object, or, for a message another
# framework stored that stands for several entries (a zett-agent assistant
# message: its reasoning, text and tool calls), a JSON array of them, in order,
# in one Raw Log row whose entry type is MULTIPLE_ENTRIES. Readers of lovia's
# view expand it: the flat list of entries is what ``load`` returns.
MULTIPLE_ENTRIES = "entries"


def entries_document(entries: Sequence[TranscriptEntry]) -> str:
    """The stored document of a row standing for ``entries`` (one object, or an array)."""
    if len(entries) == 1:
        return entry_to_json(entries[0])
    return "[" + ",".join(entry_to_json(entry) for entry in entries) + "]"


def _is_array(document: str | bytes) -> bool:
    return document[:1] in (b"[", "[")


def expand_documents(rows: Sequence[str | bytes], where: Where | None = None) -> list[str | bytes]:
    """Stored documents with every array split into its entries' documents (in order)."""
    if not any(_is_array(row) for row in rows):
        return list(rows)
    out: list[str | bytes] = []
    for row in rows:
        if _is_array(row):
            out.extend(_dumped(item) for item in json_documents([row], where)[0])
        else:
            out.append(row)
    return out


def _dumped(document: Any) -> str | bytes:
    try:
        return orjson.dumps(document)
    except TypeError:  # an integer wider than 64 bits, which JSON allows
        return json.dumps(document, ensure_ascii=False)


def _flatten(documents: list[Any]) -> list[Any] | None:
    """Parsed documents with arrays spliced in, or None when there was none."""
    if not any(isinstance(document, list) for document in documents):
        return None
    flat: list[Any] = []
    for document in documents:
        if isinstance(document, list):
            flat.extend(document)
        else:
            flat.append(document)
    return flat


def entries_from_json_rows(
    rows: Sequence[str | bytes], where: Where | None = None
) -> list[TranscriptEntry]:
    """Decode stored entry documents (the load hot path): parse, then validate once.

    orjson parses the documents and pydantic validates them a batch at a time,
    one validation per entry; a batch's parsed dicts are dropped before the
    next is parsed, so they never all live at once. (Splicing the documents
    into one JSON array for ``validate_json`` costs more: joining long
    non-ASCII strings copies and widens them, and pydantic's parser is slower
    than orjson on long strings.) A damaged document is a ``StoredValueError``
    naming its row (``where``: table, column and the rows' shared key).
    """
    entries: list[TranscriptEntry] = []
    for start in range(0, len(rows), _DECODE_BATCH):
        documents = json_documents(rows[start : start + _DECODE_BATCH], where, start=start)
        try:
            entries += _ENTRY_LIST.validate_python(documents)
        except ValidationError:
            # Rows that stand for several entries are rare: looked for only here,
            # so a session without any pays nothing for them.
            flat = _flatten(documents)
            if flat is None:
                name_unknown_entry(documents, where, start=start)
                raise
            try:
                entries += _ENTRY_LIST.validate_python(flat)
            except ValidationError:
                for index, document in enumerate(documents):
                    items = document if isinstance(document, list) else [document]
                    name_unknown_entry(items, where, start=start + index)
                raise
    return entries


def check_entry_values(entry: TranscriptEntry, what: str) -> None:
    """Refuse an entry whose values would not read back exactly from any store:
    NaN or infinity (pydantic writes null), a lone surrogate in a string or a
    key (no UTF-8 form; pydantic turns a key's into U+FFFD), nesting past
    ``MAX_DEPTH``. Every store checks, the in-memory ones too, so all refuse
    alike. Costs next to nothing for ASCII text without nested values."""
    check_value(entry, what, models=True)


def check_entries(entries: Iterable[object]) -> list[TranscriptEntry]:
    """Accept only transcript entries whose values round-trip exactly; anything
    else is a caller's mistake (``UserError``)."""
    if isinstance(entries, str | bytes | dict) or not isinstance(entries, Iterable):
        raise UserError(
            f"entries must be a sequence of transcript entries, not {type(entries).__name__}"
        )
    out: list[TranscriptEntry] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, ENTRY_CLASSES):
            raise UserError(
                f"entries[{index}] is {type(entry).__name__}, not a transcript entry "
                "(build one with entry_from_dict)"
            )
        check_entry_values(entry, f"entries[{index}]")
        out.append(entry)
    return out


def drop_dangling_tool_calls(entries: Sequence[TranscriptEntry]) -> list[TranscriptEntry]:
    """Remove tool calls that have no result, so the transcript is safe to replay."""
    resolved = {e.call_id for e in entries if isinstance(e, ToolResultEntry)}
    return [e for e in entries if not (isinstance(e, ToolCallEntry) and e.call_id not in resolved)]
