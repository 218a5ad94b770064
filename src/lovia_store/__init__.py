"""lovia-store: durable conversation history and run checkpoints for LLM agents."""

import logging

from ._version import __version__ as __version__
from .checkpoints.contract import (
    Checkpointer,
    EffectLog,
    RunHead,
    RunSnapshot,
    RunSummary,
    ToolEffect,
)
from .checkpoints.leases import RunLease, RunLeases
from .checkpoints.memory import InMemoryCheckpointer
from .checkpoints.sql import SQLCheckpointer, SQLiteCheckpointer
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
    JoinedLineageError,
    LegacyBackupError,
    LoviaStoreError,
    MissingDriverError,
    RunInProgressError,
    RunOwnershipLost,
    SchemaNotCurrentError,
    SchemaVersionError,
    SnapshotConflictError,
    StoreBusyError,
    StoredValueError,
    StoreUnavailableError,
    UnknownEntryTypeError,
    UserError,
)
from .runs.agent import Agent, Model, ModelTurn, ScriptedModel
from .runs.options import CheckpointOptions
from .runs.runner import MaxTurnsExceeded, Runner, RunResult
from .runs.tools import EffectMode, Tool, ToolContext, function_tool
from .sessions.contract import Segment, Session
from .sessions.memory import InMemorySession
from .sessions.raw_log import (
    CompactedMessage,
    ContextSnapshot,
    MessageTiming,
    RawMessageRecord,
    SessionSummary,
    SessionView,
    SQLiteSessionStorage,
    SQLSessionStorage,
    SyncRuntime,
    SyncSessionStorage,
)
from .sessions.sql import SQLiteSession, SQLSession
from .upgrade import UpgradeReport, check, upgrade

# A library's loggers are silent until the application configures logging.
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "Agent",
    "AssistantTextEntry",
    "CheckpointOptions",
    "Checkpointer",
    "CompactedMessage",
    "ConflictError",
    "ContentPart",
    "ContextSnapshot",
    "Database",
    "EffectLog",
    "EffectMode",
    "FilePart",
    "ImagePart",
    "InMemoryCheckpointer",
    "InMemorySession",
    "InputEntry",
    "JoinedLineageError",
    "LegacyBackupError",
    "LoviaStoreError",
    "MaxTurnsExceeded",
    "MessageTiming",
    "MissingDriverError",
    "Model",
    "ModelTurn",
    "RawMessageRecord",
    "ReasoningEntry",
    "RunHead",
    "RunInProgressError",
    "RunLease",
    "RunLeases",
    "RunOwnershipLost",
    "RunResult",
    "RunSnapshot",
    "RunSummary",
    "Runner",
    "SQLCheckpointer",
    "SQLSession",
    "SQLSessionStorage",
    "SQLiteCheckpointer",
    "SQLiteSession",
    "SQLiteSessionStorage",
    "SchemaNotCurrentError",
    "SchemaVersionError",
    "ScriptedModel",
    "Segment",
    "Session",
    "SessionSummary",
    "SessionView",
    "SnapshotConflictError",
    "StoreBusyError",
    "StoreUnavailableError",
    "StoredValueError",
    "SyncRuntime",
    "SyncSessionStorage",
    "TextPart",
    "Tool",
    "ToolCallEntry",
    "ToolContext",
    "ToolEffect",
    "ToolResultEntry",
    "TranscriptEntry",
    "UnknownEntryTypeError",
    "UpgradeReport",
    "Usage",
    "UserError",
    "check",
    "drop_dangling_tool_calls",
    "entry_from_dict",
    "entry_to_dict",
    "function_tool",
    "upgrade",
]
