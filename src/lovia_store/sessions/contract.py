"""The lovia ``Session`` contract: what every session store promises, and an append's checks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable
from uuid import uuid4

from .._json import dump_object
from ..entries import TranscriptEntry, check_entries
from ..errors import UserError
from ..validation import check_id

__all__ = [
    "ForkOrigin",
    "Segment",
    "Session",
    "check_append",
    "check_checkpointer_tenant",
    "checked_append",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Segment:
    """One finished run in a session: its id, its entries, its opaque meta."""

    run_id: str
    entries: list[TranscriptEntry]
    meta: dict[str, Any] | None = field(default=None)


@dataclass(frozen=True)
class ForkOrigin:
    """Where a forked session branched off: the session it was forked from and how
    many of that session's entries the fork took (``fork``'s ``keep_entries``)."""

    session_id: str
    entries: int


@runtime_checkable
class Session(Protocol):
    """Conversation history as append-only per-run segments.

    ``append`` is atomic and idempotent by ``run_id``: appending again under a
    stored run id changes nothing and returns that id. A stored run is never
    replaced. ``load`` is the flat concatenation of ``segments`` in run order.
    """

    async def segments(self, session_id: str) -> list[Segment]: ...

    async def load(self, session_id: str) -> list[TranscriptEntry]: ...

    async def append(
        self,
        session_id: str,
        entries: Sequence[TranscriptEntry],
        *,
        run_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> str: ...

    async def clear(self, session_id: str) -> None: ...


def check_append(
    session_id: object, entries: Sequence[object], run_id: object, meta: object
) -> tuple[str, list[TranscriptEntry], str | None]:
    """An append's arguments, checked: the run id (a new one when omitted), the
    entries, and the meta as exact JSON text (None when there is none)."""
    return checked_append(session_id, entries, run_id, meta, check_entries)


def checked_append(
    session_id: object,
    entries: Sequence[object],
    run_id: object,
    meta: object,
    check: Callable[[Sequence[object]], T],
) -> tuple[str, T, str | None]:
    """``check_append`` with the entries checked by ``check`` (a store's encoder that
    checks as ``check_entries`` does), in the same order: every store names the
    same first mistake."""
    check_id(session_id, "session_id")
    chosen = uuid4().hex if run_id is None else check_id(run_id, "run_id")
    return chosen, check(entries), None if meta is None else dump_object(meta, "meta")


def check_checkpointer_tenant(tenant: str, checkpointer: object) -> None:
    """Refuse a rewind's checkpointer of another tenant: the runs a rewind touches are
    its session's tenant's, and deleting the same run ids elsewhere would reach another
    tenant's checkpoints. A checkpointer without a ``tenant`` (a third party's) passes."""
    other = getattr(checkpointer, "tenant", tenant)
    if other != tenant:
        raise UserError(
            f"the checkpointer works for tenant {other!r}, this session store for {tenant!r}"
        )
