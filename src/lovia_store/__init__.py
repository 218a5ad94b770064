"""lovia-store: durable conversation history and run checkpoints for LLM agents.

Every public name is importable from here, but only the errors and
``upgrade``/``check`` are imported with the package: the rest are imported on
first use (PEP 562), so ``import lovia_store`` loads no SQL engine, no
driver, no Alembic and no optional framework. The ``TYPE_CHECKING`` imports
below give type checkers and IDEs the same names; ``_LAZY`` says where each
one lives (tests/test_public_surface.py keeps the two equal).

The small agent framework (``Agent``, ``Runner``, ``function_tool``, ...)
is documented under ``lovia_store.runs``; its top-level names stay for
compatibility (see docs/runs.md).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ._lazy import by_name as _by_name
from ._lazy import lazy_names as _lazy_names
from .errors import (
    ConflictError,
    ConversionWarning,
    CounterMismatchError,
    DefaultPathWarning,
    EncryptionKeyError,
    ForeignRunnerError,
    JoinedLineageError,
    LegacyBackupError,
    LegacyTableError,
    LoviaStoreError,
    MissingDriverError,
    OutcomeUnknownError,
    RunInProgressError,
    RunOwnershipLost,
    SchemaConflictError,
    SchemaNotCurrentError,
    SchemaVersionError,
    SnapshotConflictError,
    StoreBusyError,
    StoredValueError,
    StoreUnavailableError,
    TransactionPoolerError,
    UnknownEntryTypeError,
    UserError,
)

# Eager: the functions must be bound over the submodule ``lovia_store.upgrade``
# (a lazy name would lose to the module once anything imports it).
from .upgrade import check, upgrade

if TYPE_CHECKING:
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
    from .db.encryption import generate_encryption_key
    from .db.row_security import disable_row_level_security, enable_row_level_security
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
    from .runs import (
        Agent,
        CheckpointOptions,
        EffectMode,
        MaxTurnsExceeded,
        Model,
        ModelTurn,
        Runner,
        RunResult,
        ScriptedModel,
        Tool,
        ToolContext,
        function_tool,
    )
    from .sessions.contract import ForkOrigin, Segment, Session
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
    from .upgrade import UpgradeReport

_LAZY: dict[str, str] = _by_name(
    {
        "._version": "__version__",
        ".checkpoints.contract": "Checkpointer EffectLog RunHead RunSnapshot RunSummary ToolEffect",
        ".checkpoints.leases": "RunLease RunLeases",
        ".checkpoints.memory": "InMemoryCheckpointer",
        ".checkpoints.sql": "SQLCheckpointer SQLiteCheckpointer",
        ".db.database": "Database",
        ".db.encryption": "generate_encryption_key",
        ".db.row_security": "disable_row_level_security enable_row_level_security",
        ".entries": "AssistantTextEntry ContentPart FilePart ImagePart InputEntry ReasoningEntry "
        "TextPart ToolCallEntry ToolResultEntry TranscriptEntry Usage drop_dangling_tool_calls "
        "entry_from_dict entry_to_dict",
        ".runs": "Agent CheckpointOptions EffectMode MaxTurnsExceeded Model ModelTurn Runner "
        "RunResult ScriptedModel Tool ToolContext function_tool",
        ".sessions.contract": "ForkOrigin Segment Session",
        ".sessions.memory": "InMemorySession",
        ".sessions.raw_log": "CompactedMessage ContextSnapshot MessageTiming RawMessageRecord "
        "SessionSummary SessionView SQLiteSessionStorage SQLSessionStorage SyncRuntime "
        "SyncSessionStorage",
        ".sessions.sql": "SQLiteSession SQLSession",
        ".upgrade": "UpgradeReport",
    }
)


__getattr__, __dir__ = _lazy_names(__name__, _LAZY)


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
    "ConversionWarning",
    "CounterMismatchError",
    "Database",
    "DefaultPathWarning",
    "EffectLog",
    "EffectMode",
    "EncryptionKeyError",
    "FilePart",
    "ForeignRunnerError",
    "ForkOrigin",
    "ImagePart",
    "InMemoryCheckpointer",
    "InMemorySession",
    "InputEntry",
    "JoinedLineageError",
    "LegacyBackupError",
    "LegacyTableError",
    "LoviaStoreError",
    "MaxTurnsExceeded",
    "MessageTiming",
    "MissingDriverError",
    "Model",
    "ModelTurn",
    "OutcomeUnknownError",
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
    "SchemaConflictError",
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
    "TransactionPoolerError",
    "TranscriptEntry",
    "UnknownEntryTypeError",
    "UpgradeReport",
    "Usage",
    "UserError",
    "check",
    "disable_row_level_security",
    "drop_dangling_tool_calls",
    "enable_row_level_security",
    "entry_from_dict",
    "entry_to_dict",
    "function_tool",
    "generate_encryption_key",
    "upgrade",
]
