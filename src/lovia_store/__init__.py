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
from .runs.agent import Agent, Model, ModelTurn, ScriptedModel
from .runs.options import CheckpointOptions
from .runs.runner import MaxTurnsExceeded, Runner, RunResult
from .runs.tools import Tool, ToolContext, function_tool
from .stores.checkpoint_models import Checkpointer, RunHead, RunSnapshot, RunSummary
from .stores.memory_checkpoints import InMemoryCheckpointer
from .stores.memory_sessions import InMemorySession
from .stores.segments import Segment, Session
from .stores.sql_checkpoints import SQLCheckpointer, SQLiteCheckpointer
from .stores.sql_sessions import SQLiteSession, SQLSession
from .upgrade import check, upgrade

__all__ = [
    "Agent",
    "AssistantTextEntry",
    "CheckpointOptions",
    "Checkpointer",
    "ConflictError",
    "ContentPart",
    "Database",
    "FilePart",
    "ImagePart",
    "InMemoryCheckpointer",
    "InMemorySession",
    "InputEntry",
    "LoviaStoreError",
    "MaxTurnsExceeded",
    "MissingDriverError",
    "Model",
    "ModelTurn",
    "ReasoningEntry",
    "RunHead",
    "RunResult",
    "RunSnapshot",
    "RunSummary",
    "Runner",
    "SQLCheckpointer",
    "SQLSession",
    "SQLiteCheckpointer",
    "SQLiteSession",
    "SchemaNotCurrentError",
    "SchemaVersionError",
    "ScriptedModel",
    "Segment",
    "Session",
    "SnapshotConflictError",
    "StoreBusyError",
    "StoreUnavailableError",
    "TextPart",
    "Tool",
    "ToolCallEntry",
    "ToolContext",
    "ToolResultEntry",
    "TranscriptEntry",
    "UnknownEntryTypeError",
    "Usage",
    "UserError",
    "check",
    "drop_dangling_tool_calls",
    "entry_from_dict",
    "entry_to_dict",
    "function_tool",
    "upgrade",
]
