"""The Raw Log API: zett-agent's session storage on lovia-store's schema."""

from .models import (
    CompactedMessage,
    ContextSnapshot,
    MessageTiming,
    RawMessageRecord,
    SessionSummary,
    SessionView,
)
from .storage import SQLiteSessionStorage, SQLSessionStorage, default_path
from .sync_view import SyncRuntime, SyncSessionStorage

__all__ = [
    "CompactedMessage",
    "ContextSnapshot",
    "MessageTiming",
    "RawMessageRecord",
    "SQLSessionStorage",
    "SQLiteSessionStorage",
    "SessionSummary",
    "SessionView",
    "SyncRuntime",
    "SyncSessionStorage",
    "default_path",
]
