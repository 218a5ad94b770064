"""zett-agent's messages as stored: zett's own envelope, kept whole, and lovia's view of it.

The envelope is what zett-agent writes in ``raw_messages.message_json``:
``{"kind": K, "data": dataclasses.asdict(message)}``, written character for
character as zett's own codec (``encode_messages``) writes it, so a message
reads back equal and a row holds the same text zett would have written (compressed,
sealed as the Database says: ``sessions/raw_log/stored.py`` encodes and decodes it).
The projection, the transcript entries lovia's view shows for it, comes from the
envelope (``envelopes.py`` beside this module, which adopted zett files go through
too). Rows written by lovia's API have no envelope: their entry is turned
into the zett message that says the same.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import (
    AgentMessage,
    AnyMessage,
    AssistantMessage,
    ImageBytesSource,
    ImageContent,
    ImageDetail,
    ImageUrlSource,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolMessage,
    UserContentPart,
    UserMessage,
)
from zett_agent.storage import MESSAGE_TYPES, MessageKind, decode_messages

from ..._json import dump_document, dump_trusted, load_document
from ...entries import (
    MULTIPLE_ENTRIES,
    AssistantTextEntry,
    ContentPart,
    ImagePart,
    InputEntry,
    ReasoningEntry,
    TextPart,
    ToolCallEntry,
    TranscriptEntry,
)
from ...errors import StoredValueError, UserError
from ...sessions.raw_log.appends import Projection
from .envelopes import entries_from_envelope, text_of

__all__ = [
    "MESSAGE_CLASSES",
    "decode_compacted",
    "decode_envelopes",
    "encode_envelope",
    "message_from_entries",
    "message_from_entry",
    "project",
]

_KIND_OF = {cls: int(kind) for kind, cls in MESSAGE_TYPES.items()}
MESSAGE_CLASSES = (SystemMessage, UserMessage, AssistantMessage, ToolMessage, AgentMessage)


def encode_envelope(message: object) -> str:
    """The message's envelope as zett encodes it (one ``{"kind", "data"}`` object).

    ``CompactedMessage`` belongs in a snapshot, and anything that is not one of
    zett's message classes is refused, before anything is written.
    """
    kind = _KIND_OF.get(type(message))
    if kind == MessageKind.CHECKPOINT:
        raise UserError("Checkpoints belong in snapshots, not raw logs")
    if kind is None:
        raise UserError(
            f"message must be a zett-agent message (SystemMessage, UserMessage, "
            f"AssistantMessage, ToolMessage or AgentMessage), not {type(message).__name__}"
        )
    return _encode(message)


def _encode(message: Any) -> str:
    """zett's ``encode_messages([message])`` without its brackets, character for character.

    zett builds the document with ``dataclasses.asdict``, whose deep copies cost
    more than the rest of an append's Python; ``_plain`` builds the same document
    without copying, and the shared codec (``dump_document``) writes it as zett's
    ``json.dumps`` call does (a test compares the two on generated messages), having
    refused what JSON cannot carry exactly: a lone surrogate, NaN, a key that is not
    a string, nesting past ``MAX_DEPTH``.
    """
    what = type(message).__name__
    try:
        document = {"kind": _KIND_OF[type(message)], "data": _plain(message)}
    except RecursionError:
        raise UserError(f"{what} is nested too deep to store") from None
    return dump_document(document, what, separators=(", ", ": "), default=_bytes, opaque=(bytes,))


_FIELDS: dict[type, tuple[str, ...]] = {}


_LEAVES = frozenset({str, int, float, bool, type(None)})


def _plain(value: Any) -> Any:
    """``dataclasses.asdict``'s document for zett's values, sharing the leaves."""
    if type(value) in _LEAVES:
        return value
    names = _FIELDS.get(type(value))
    if names is None and dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = _FIELDS[type(value)] = tuple(field.name for field in dataclasses.fields(value))
    if names is not None:
        return {name: _plain(getattr(value, name)) for name in names}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {_plain(key): _plain(item) for key, item in value.items()}
    return value


def _bytes(value: object) -> object:
    """zett's encoding of binary values (image bytes); anything else is refused."""
    if isinstance(value, bytes):
        return {"__kcs_bytes__": base64.b64encode(value).decode("ascii")}
    raise TypeError(f"Unsupported message value: {type(value).__name__}")


def encode_compacted(message: object) -> str:
    if type(message) is not CompactedMessage:
        raise UserError("Context snapshot must contain exactly one CompactedMessage")
    return _encode(message)


def project(envelope: str) -> Projection:
    """The stored projection of one envelope: the entries lovia's view shows for it.

    The projection builds entries in lovia's JSON shape itself (every field, of its
    type), so they are written as built, not validated again on every append.
    """
    entries = entries_from_envelope(load_document(envelope))
    if len(entries) == 1:
        entry = entries[0]
        return Projection(entry["type"], entry.get("call_id"), dump_trusted(entry))
    return Projection(MULTIPLE_ENTRIES, None, dump_trusted(entries))


def summary_text(message: CompactedMessage) -> str:
    """The summary's text, for our own ``summary_json`` beside zett's envelope."""
    return text_of(load_document(_encode(message))["data"].get("content"))


def decode_envelopes(envelopes: Sequence[str], where: Sequence[dict[str, object]]) -> list[Any]:
    """zett's messages from their envelopes, by zett's own codec, in one pass.

    A row that does not decode raises ``StoredValueError`` naming it.
    """
    if not envelopes:
        return []
    try:
        return decode_messages("[" + ",".join(envelopes) + "]")
    except (ValueError, KeyError, TypeError, RecursionError, binascii.Error):
        for envelope, row in zip(envelopes, where, strict=True):
            try:
                decode_messages(f"[{envelope}]")
            except (
                ValidationError,
                ValueError,
                KeyError,
                TypeError,
                RecursionError,
                binascii.Error,
            ) as exc:
                raise StoredValueError(
                    f"Stored message is not a zett-agent message: {exc}",
                    table="lovia_messages",
                    column="envelope_json",
                    row=row,
                ) from exc
        raise


def decode_compacted(envelope: str, row: dict[str, object]) -> CompactedMessage:
    """A snapshot's summary from its envelope; anything else is refused, as zett does."""
    messages: list[object]
    try:
        messages = list(decode_messages(f"[{envelope}]"))
    except (ValueError, KeyError, TypeError, RecursionError, binascii.Error):
        messages = []
    if len(messages) != 1 or not isinstance(messages[0], CompactedMessage):
        raise StoredValueError(
            "Context snapshot must contain exactly one CompactedMessage",
            table="lovia_snapshots",
            column="envelope_json",
            row=row,
        )
    return messages[0]


# -- lovia's entries as zett messages (rows written by lovia's API) ------------


def message_from_entries(
    entries: Sequence[TranscriptEntry], call_names: Mapping[str, str]
) -> AnyMessage:
    """The zett message for a row's entries: one entry's own, or (a model turn held
    in one row) one assistant message with its reasoning, text and calls."""
    if len(entries) == 1:
        return message_from_entry(entries[0], call_names)
    return AssistantMessage(
        content="".join(e.content for e in entries if isinstance(e, AssistantTextEntry)),
        reasoning="".join(e.content for e in entries if isinstance(e, ReasoningEntry)) or None,
        tool_calls=tuple(_tool_call(e) for e in entries if isinstance(e, ToolCallEntry)),
    )


def message_from_entry(entry: TranscriptEntry, call_names: Mapping[str, str]) -> AnyMessage:
    """The zett message that says what one lovia entry says.

    A tool result gets the name of its call when ``call_names`` knows it
    (lovia's results carry no tool name), else ``""``.
    """
    if isinstance(entry, InputEntry):
        if entry.role == "system":
            content = entry.content
            text = content if isinstance(content, str) else _joined_text(content)
            return SystemMessage(content=text)
        return UserMessage(content=_user_content(entry.content))
    if isinstance(entry, AssistantTextEntry):
        return AssistantMessage(content=entry.content)
    if isinstance(entry, ReasoningEntry):
        return AssistantMessage(reasoning=entry.content, provider=entry.provider)
    if isinstance(entry, ToolCallEntry):
        return AssistantMessage(tool_calls=(_tool_call(entry),))
    return ToolMessage(
        tool_call_id=entry.call_id,
        name=call_names.get(entry.call_id, ""),
        content=entry.output if entry.parts is None else _parts(entry.parts),
        success=not entry.is_error,
    )


def _tool_call(entry: ToolCallEntry) -> ToolCall:
    try:
        arguments = json.loads(entry.arguments)
    except (ValueError, RecursionError):  # not JSON, or nested past any decoder
        arguments = None
    if isinstance(arguments, dict):
        return ToolCall(id=entry.call_id, name=entry.name, arguments=arguments)
    # zett's way to say a call's arguments could not be decoded: it is never run.
    return ToolCall(
        id=entry.call_id,
        name=entry.name,
        error=f"arguments are not a JSON object: {entry.arguments[:200]}",
    )


def _joined_text(parts: Sequence[ContentPart]) -> str:
    return "\n".join(part.text for part in parts if isinstance(part, TextPart))


def _user_content(content: str | list[ContentPart]) -> str | list[UserContentPart]:
    return content if isinstance(content, str) else _parts(content)


def _parts(parts: Sequence[ContentPart]) -> list[UserContentPart]:
    return [_part(part) for part in parts]


def _part(part: ContentPart) -> UserContentPart:
    if isinstance(part, TextPart):
        return TextContent(part.text)
    if isinstance(part, ImagePart):
        image = _image(part)
        if image is not None:
            return image
    # A file, or an image zett cannot hold (no image MIME type): said in words.
    described = part.model_dump(exclude_none=True, exclude={"data"})
    return TextContent(f"[{part.type}: {json.dumps(described, ensure_ascii=False)}]")


def _image(part: ImagePart) -> ImageContent | None:
    detail = ImageDetail(part.detail) if part.detail in set(ImageDetail) else ImageDetail.AUTO
    try:
        if part.data is not None:
            data = base64.b64decode(part.data, validate=True)
            source: Any = ImageBytesSource(data, part.mime_type or "")
        elif part.url is not None:
            source = ImageUrlSource(part.url)
        else:
            return None
    except (ValueError, binascii.Error):
        return None
    return ImageContent(source, detail)
