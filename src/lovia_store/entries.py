"""Transcript entries: their shapes (``entry_shapes``: lovia's JSON as pydantic
models, and the checks every store makes) and their stored form
(``entry_documents``: JSON documents decoded exactly, a damaged one named by its
row). Imported from here, as before the two were split.
"""

from __future__ import annotations

from .entry_documents import (
    MULTIPLE_ENTRIES,
    Where,
    damaged,
    entries_document,
    entries_from_json_rows,
    expand_documents,
    json_documents,
    name_unknown_entry,
    rows_of,
    session_rows,
    stored_model,
)
from .entry_shapes import (
    ENTRY_CLASSES,
    ENTRY_TYPES,
    AssistantTextEntry,
    ContentPart,
    FilePart,
    ImagePart,
    InputEntry,
    ReasoningEntry,
    TextPart,
    ToolCallEntry,
    ToolResultEntry,
    TranscriptEntry,
    Usage,
    call_id_of,
    check_entries,
    check_entry_values,
    drop_dangling_tool_calls,
    encode_entries,
    entry_from_dict,
    entry_to_dict,
    entry_to_json,
)

__all__ = [
    "ENTRY_CLASSES",
    "ENTRY_TYPES",
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
    "call_id_of",
    "check_entries",
    "check_entry_values",
    "damaged",
    "drop_dangling_tool_calls",
    "encode_entries",
    "entries_document",
    "entries_from_json_rows",
    "entry_from_dict",
    "entry_to_dict",
    "entry_to_json",
    "expand_documents",
    "json_documents",
    "name_unknown_entry",
    "rows_of",
    "session_rows",
    "stored_model",
]
