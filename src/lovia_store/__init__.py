"""lovia-store: durable conversation history and run checkpoints for LLM agents."""

from .db.database import Database
from .entries import (
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
    drop_dangling_tool_calls,
    entry_from_dict,
    entry_to_dict,
)
from .errors import (
    ConflictError,
    LoviaStoreError,
    MissingDriverError,
    SchemaNotCurrentError,
    SchemaVersionError,
    SnapshotConflictError,
    StoreBusyError,
    StoreUnavailableError,
    UnknownEntryTypeError,
    UserError,
)
from .stores.memory_sessions import InMemorySession
from .stores.segments import Segment, Session
from .stores.sql_sessions import SQLiteSession, SQLSession
from .upgrade import check, upgrade

__all__ = [
    "AssistantTextEntry",
    "ConflictError",
    "ContentPart",
    "Database",
    "FilePart",
    "ImagePart",
    "InMemorySession",
    "InputEntry",
    "LoviaStoreError",
    "MissingDriverError",
    "ReasoningEntry",
    "SQLSession",
    "SQLiteSession",
    "SchemaNotCurrentError",
    "SchemaVersionError",
    "Segment",
    "Session",
    "SnapshotConflictError",
    "StoreBusyError",
    "StoreUnavailableError",
    "TextPart",
    "ToolCallEntry",
    "ToolResultEntry",
    "TranscriptEntry",
    "UnknownEntryTypeError",
    "Usage",
    "UserError",
    "check",
    "drop_dangling_tool_calls",
    "entry_from_dict",
    "entry_to_dict",
    "upgrade",
]
