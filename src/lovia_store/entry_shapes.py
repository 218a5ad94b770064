"""Transcript entries: lovia's serialized entry shape as pydantic models.

The JSON of every model is exactly what ``lovia.transcript.entry_to_dict``
writes, so transcripts stored by lovia read as-is. Readers are lenient about
fields (unknown ones are ignored, so a newer writer's additions never stop an
older reader) and strict about types (an unknown entry type is an error: a
silently skipped entry is how reasoning state and tool pairing get lost).
Every store checks the entries it is given here (``check_entries``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter
from pydantic_core import PydanticSerializationError

from ._json import all_clean, check_value
from .errors import UnknownEntryTypeError, UserError

__all__ = [
    "ENTRY_CLASSES",
    "ENTRY_LIST",
    "ENTRY_TYPES",
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
    "call_id_of",
    "check_entries",
    "check_entry_values",
    "drop_dangling_tool_calls",
    "encode_entries",
    "entry_from_dict",
    "entry_to_dict",
    "entry_to_json",
]


class _Frozen(BaseModel):
    # Entries are shared between stores, snapshots and callers without
    # copying, so they must not change under anyone's feet.
    # defer_build: a model's validator and serializer are built when it is first
    # used, so a process builds only the entry models it meets (a first append of
    # one InputEntry builds that one, not all of them).
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)


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
_EXACT_ENTRY_CLASSES = frozenset(ENTRY_CLASSES)

# Built on first use (defer_build): a process that only appends never validates one.
_DEFERRED = ConfigDict(defer_build=True)
_ENTRY: TypeAdapter[TranscriptEntry] = TypeAdapter(TranscriptEntry, config=_DEFERRED)
ENTRY_LIST: TypeAdapter[list[TranscriptEntry]] = TypeAdapter(
    list[TranscriptEntry], config=_DEFERRED
)


class Usage(BaseModel):
    """Token counters; ``+`` folds two usages together."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

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
    return _checked(entries, text=True)


def encode_entries(entries: Iterable[object]) -> tuple[list[TranscriptEntry], list[str]]:
    """``check_entries`` and each entry's ``entry_to_json``, for a store that encodes.

    The lone surrogates of strings are left to the encoder, which refuses them
    (scanning non-ASCII text for them costs more than the rest of the check);
    any refusal is then explained as ``check_entries`` explains it, naming the
    same entry, so a store that encodes refuses exactly as the in-memory ones do.
    """
    checked = _checked(entries, text=False)
    try:
        return checked, [entry_to_json(entry) for entry in checked]
    except UserError:
        _explain(checked)
        raise


def _checked(entries: Iterable[object], *, text: bool) -> list[TranscriptEntry]:
    if type(entries) is not list and (
        isinstance(entries, str | bytes | dict) or not isinstance(entries, Iterable)
    ):
        raise UserError(
            f"entries must be a sequence of transcript entries, not {type(entries).__name__}"
        )
    out: list[Any] = []  # entries, each one's class checked below
    for index, entry in enumerate(entries):
        # Exact classes first: an isinstance against pydantic's metaclass costs
        # more than the rest of an entry's check.
        if type(entry) not in _EXACT_ENTRY_CLASSES and not isinstance(entry, ENTRY_CLASSES):
            _explain(out)  # an earlier entry's mistake is named first
            raise UserError(
                f"entries[{index}] is {type(entry).__name__}, not a transcript entry "
                "(build one with entry_from_dict)"
            )
        out.append(entry)
    if not all_clean(out, models=True, text=text):
        _explain(out)  # the first entry with any mistake, lone surrogates included
    return out


def _explain(entries: Sequence[TranscriptEntry]) -> None:
    """Refuse the first of ``entries`` that ``check_entries`` refuses, as it says it."""
    for index, entry in enumerate(entries):
        check_entry_values(entry, f"entries[{index}]")


def drop_dangling_tool_calls(entries: Sequence[TranscriptEntry]) -> list[TranscriptEntry]:
    """Remove tool calls that have no result, so the transcript is safe to replay."""
    resolved = {e.call_id for e in entries if isinstance(e, ToolResultEntry)}
    return [e for e in entries if not (isinstance(e, ToolCallEntry) and e.call_id not in resolved)]
