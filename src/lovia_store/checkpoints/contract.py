"""Run checkpoints: a small mutable head plus the run's append-only entries."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol, cast, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic_core import PydanticSerializationError

from .._json import check_value, explain_refusal, is_clean
from ..entries import ToolResultEntry, TranscriptEntry, Usage
from ..errors import UserError
from ..validation import check_count

__all__ = [
    "Checkpointer",
    "EffectLog",
    "RunHead",
    "RunSnapshot",
    "RunStatus",
    "RunSummary",
    "ToolEffect",
]

RunStatus = Literal["running", "interrupted", "completed", "failed"]
RUN_STATUSES: tuple[RunStatus, ...] = ("running", "interrupted", "completed", "failed")


class RunHead(BaseModel):
    """What changes as a run proceeds; replaced whole on every checkpoint write.

    ``started_at`` is the run's first start (epoch seconds), kept across
    resumes; ``pending_handoff`` names the agent a transfer fired to but that
    is not active yet. Reading is lenient: fields a newer writer added are
    ignored.
    """

    model_config = ConfigDict(extra="ignore")

    agent_name: str
    usage: Usage = Field(default_factory=Usage)
    turns: int = 0
    status: RunStatus = "running"
    output: JsonValue = None
    error: dict[str, JsonValue] | None = None
    last_input_tokens: int | None = None
    context_state: dict[str, JsonValue] = Field(default_factory=dict)
    started_at: float | None = None
    pending_handoff: str | None = None
    updated_at: float = Field(default_factory=time.time)


class RunSnapshot(RunHead):
    """A run as stored: its id, every entry so far, and its head's fields."""

    run_id: str
    entries: list[TranscriptEntry] = Field(default_factory=list)

    @property
    def head(self) -> RunHead:
        return RunHead.model_validate(self.model_dump(exclude={"run_id", "entries"}))

    @classmethod
    def from_parts(
        cls, run_id: str, entries: Sequence[TranscriptEntry], head: RunHead
    ) -> RunSnapshot:
        return cls(run_id=run_id, entries=list(entries), **dict(head))


class RunSummary(BaseModel):
    """One row of ``list_runs``: enough for an operator to pick a run."""

    run_id: str
    status: RunStatus
    agent_name: str
    turns: int
    entry_count: int
    started_at: float | None
    updated_at: datetime


@runtime_checkable
class Checkpointer(Protocol):
    """Where runs in flight live, keyed by the global ``run_id``.

    ``append`` adds a batch of entries (possibly none: a head-only refresh) and
    replaces the head, in one transaction; stored entries are never
    rewritten. ``load`` rebuilds the snapshot, or None; ``delete`` removes it
    (deleting an unknown run is a no-op).
    """

    async def append(
        self, run_id: str, entries: Sequence[TranscriptEntry], head: RunHead
    ) -> None: ...

    async def load(self, run_id: str) -> RunSnapshot | None: ...

    async def delete(self, run_id: str) -> None: ...


class ToolEffect(BaseModel):
    """What the store knows of one tool call: that it started, and maybe how it ended."""

    call_id: str
    tool_name: str
    started_at: datetime
    outcome: ToolResultEntry | None = None


@runtime_checkable
class EffectLog(Protocol):
    """A checkpointer that also records tool calls' intents and outcomes.

    ``record_intent`` is written (and committed) before a call runs;
    ``run_effect`` runs ``work`` in one transaction on the store's database
    and records the call's outcome in that same transaction, which makes an
    effect that is a row in that database exactly-once.
    """

    async def tool_effects(self, run_id: str) -> dict[str, ToolEffect]: ...

    async def record_intent(self, run_id: str, call_id: str, tool_name: str) -> None: ...

    async def run_effect(
        self,
        run_id: str,
        call_id: str,
        tool_name: str,
        work: Callable[[Any], Any],
        outcome: Callable[[Any], ToolResultEntry],
    ) -> Any: ...


def summary_of(run_id: str, head: RunHead, entry_count: int, updated_at: datetime) -> RunSummary:
    return RunSummary(
        run_id=run_id,
        status=head.status,
        agent_name=head.agent_name,
        turns=head.turns,
        entry_count=entry_count,
        started_at=head.started_at,
        updated_at=updated_at,
    )


def check_head(head: Any) -> RunHead:
    _check_head_type(head)
    check_value(head, "head", models=True)  # NaN, lone surrogates, depth: refused, never nulled
    return cast(RunHead, head)


def encode_head(head: Any) -> str:
    """``check_head`` and the head's JSON; as in ``encode_entries``, the lone
    surrogates of strings are left to the encoder and explained as ``check_head`` would."""
    _check_head_type(head)
    if not is_clean(head, models=True, text=False):
        explain_refusal(head, "head", models=True)
    try:
        encoded: str = head.model_dump_json()
        return encoded
    except PydanticSerializationError as exc:
        check_head(head)
        raise UserError(f"head cannot be stored: {exc}") from None


def _check_head_type(head: Any) -> None:
    if not isinstance(head, RunHead) or isinstance(head, RunSnapshot):
        raise UserError(f"head must be a RunHead, not {type(head).__name__}")


def check_listing(status: Any, limit: Any, offset: Any) -> None:
    if status is not None and status not in RUN_STATUSES:
        raise UserError(f"status must be one of {', '.join(RUN_STATUSES)} or None, got {status!r}")
    check_count(limit, "limit", minimum=1)
    check_count(offset, "offset", minimum=0)
