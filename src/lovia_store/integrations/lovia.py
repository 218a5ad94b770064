"""lovia's own ``Session`` and ``Checkpointer`` on lovia-store: change one import.

``from lovia_store.integrations.lovia import SQLiteSession, SQLiteCheckpointer``
instead of ``from lovia import ...``: lovia's ``Runner`` and web UI keep
working, with lovia's own objects in and out (its entry dataclasses,
``Segment``, ``RunHead``, ``RunSnapshot``, ``Usage``), on SQLite, PostgreSQL or
MariaDB, with Alembic migrations. The rows are the native stores' rows, so a
session written here reads through ``lovia_store.SQLSession``, the Raw Log API
and the command line, and the reverse.

Entries cross the boundary as dicts: lovia's ``entry_to_dict`` and
``entry_from_dict`` against the stored JSON documents, through the one codec
(``lovia_store._json``): what is written is exact JSON and an entry (or head) every
reader of the rows reads back, checked by lovia-store's entry model, else a
``UserError``; a stored document that is not is a ``StoredValueError`` naming its
row, never a raw ``KeyError`` or ``TypeError`` from lovia's converter.

The checkpointer adds what lovia has not: a lease per run. Loading a run that
can resume takes its lease (``RunInProgressError`` while another live worker
holds it); a run started afresh takes it at its first write; every write is
fenced by it (``RunOwnershipLost`` once another worker took the run over); it
is renewed in the background while the run is quiet and released when the run
leaves ``running`` or is deleted.

Every adapter takes ``tenant=`` and hands it to the native store it wraps: the
sessions and runs of one tenant are invisible to every other (the same ids in
two tenants are two sessions, two runs). None is the Database's tenant, so
lovia's own code, which names none, keeps today's behaviour.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine, Sequence
from typing import Any, Generic, Self, TypeVar

from pydantic import ValidationError

from .._json import damaged, dump_document, dump_object, load_document
from .._lovia_guard import own_calls
from ..checkpoints import sql as sql_checkpoints
from ..checkpoints.contract import RunHead as StoredHead
from ..checkpoints.leases import DEFAULT_LEASE_TTL, HeldLease, check_ttl
from ..db.store import SQLStore, StoreTarget
from ..entries import Where, json_documents, name_unknown_entry, rows_of, session_rows
from ..entry_shapes import ENTRY_LIST
from ..entry_shapes import entry_from_dict as entry_from_native_dict
from ..errors import MissingDriverError, UserError
from ..sessions import sql as sql_sessions
from ..sessions.contract import ForkOrigin, check_append
from ..sessions.log import EncodedRun
from ..validation import check_count, check_id

try:
    from lovia.checkpointer import RunHead, RunSnapshot
    from lovia.session import Segment
    from lovia.transcript import (
        AssistantTextEntry,
        InputEntry,
        ReasoningEntry,
        ToolCallEntry,
        ToolResultEntry,
        TranscriptEntry,
        entry_from_dict,
        entry_to_dict,
    )
except ImportError as exc:  # pragma: no cover - exercised in a venv without lovia
    raise MissingDriverError(
        "lovia_store.integrations.lovia needs lovia: pip install 'lovia-store[lovia]'"
    ) from exc

__all__ = ["SQLCheckpointer", "SQLSession", "SQLiteCheckpointer", "SQLiteSession"]

Native = TypeVar("Native", bound=SQLStore)
_ENTRY_CLASSES = (InputEntry, AssistantTextEntry, ReasoningEntry, ToolCallEntry, ToolResultEntry)
_RESUMABLE = ("running", "interrupted")


def _name(value: object) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def _details(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())


def encode_entries(entries: Sequence[object]) -> EncodedRun:
    """lovia entries as stored rows: type, call id and the JSON of ``entry_to_dict``.

    Each document must be exact JSON (``dump_document``) and an entry the stores read
    back (lovia-store's entry model, which every reader of the rows applies): a value
    lovia's own converter cannot take, or one no reader would read, is a
    ``UserError`` naming the entry, before anything is written."""
    if not isinstance(entries, list | tuple):
        raise UserError(f"entries must be a list of lovia transcript entries, not {_name(entries)}")
    run = EncodedRun([], [], [])
    documents = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, _ENTRY_CLASSES):
            raise UserError(f"entries[{index}] is {_name(entry)}, not a lovia transcript entry")
        try:
            document = entry_to_dict(entry)
        except RecursionError:  # lovia's own converter recurses on each level
            raise UserError(f"entries[{index}] is nested too deep to store") from None
        except (TypeError, ValueError, AttributeError) as exc:  # a field of the wrong kind
            raise UserError(f"entries[{index}] cannot be stored: {exc}") from None
        run.types.append(entry.type)
        run.call_ids.append(document.get("call_id"))
        run.documents.append(dump_document(document, f"entries[{index}]"))
        documents.append(document)
    try:
        ENTRY_LIST.validate_python(documents)
    except ValidationError:
        for index, document in enumerate(documents):
            try:
                entry_from_native_dict(document)
            except ValidationError as exc:
                raise UserError(
                    f"entries[{index}] is not an entry the stores read back ({_details(exc)})"
                ) from None
        raise
    return run


def decode_entries(
    rows: Sequence[str | bytes], where: Where | None = None
) -> list[TranscriptEntry]:
    """Stored documents as lovia's entries; a damaged one is a ``StoredValueError``
    naming its row (``where``), an unknown entry type an ``UnknownEntryTypeError``.
    Checked by the entry model every reader applies (strict about types), then
    converted by lovia's own ``entry_from_dict``."""
    documents = json_documents(rows, where)
    try:
        ENTRY_LIST.validate_python(documents)
    except ValidationError:
        name_unknown_entry(documents, where)
        raise
    entries = []
    for index, document in enumerate(documents):
        try:
            entries.append(entry_from_dict(document))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            message = f"a stored document is not a lovia transcript entry ({exc!r})"
            raise damaged(message, where, index) from None
    return entries


def _head_document(head: RunHead) -> tuple[str, str]:
    """The head's status and JSON: exact, and a head the stores read back (a damaged
    head would fail every ``list_runs``), else ``UserError``."""
    try:
        document = head.to_dict()
    except RecursionError:  # lovia's to_json_safe recurses on each level
        raise UserError("head is nested too deep to store") from None
    except (TypeError, ValueError, AttributeError) as exc:  # usage=None, ...
        raise UserError(f"head cannot be stored: {exc!r}") from None
    text = dump_document(document, "head")
    try:
        StoredHead.model_validate(document)
    except ValidationError as exc:
        raise UserError(f"head is not a run head the stores read back ({_details(exc)})") from None
    return document["status"], text


def _decode_head(run_id: str, text: str | bytes) -> RunHead:
    """A stored head as lovia's; a damaged one is a ``StoredValueError`` naming the run."""
    where: Where = ("lovia_run_heads", "head_json", lambda _: {"run_id": run_id})
    document = load_document(text, where)
    try:
        StoredHead.model_validate(document)
    except ValidationError as exc:
        raise damaged(f"a stored RunHead is not valid ({_details(exc)})", where) from None
    try:
        return RunHead.from_dict(document)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise damaged(f"a stored RunHead is not lovia's ({exc!r})", where) from None


class _Adapter(Generic[Native]):
    """What both adapters share: the native store they wrap, and its lifetime."""

    _native: Native

    @property
    def database(self) -> Any:
        """The ``lovia_store.Database`` underneath (share it with other stores)."""
        return self._native.database

    @property
    def tenant(self) -> str:
        """The tenant every call works for (the native store's)."""
        return self._native.tenant

    async def close(self) -> None:
        await self._native.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        if self.tenant:
            return f"{type(self).__name__}({self.database.url!r}, tenant={self.tenant!r})"
        return f"{type(self).__name__}({self.database.url!r})"


class SQLSession(_Adapter[sql_sessions.SQLSession]):
    """lovia's ``Session`` (with ``trim_tool_results``, ``rewind`` and ``fork``) on any SQL backend.

    ``target`` is what ``lovia_store.SQLSession`` takes: a URL, a SQLite path,
    an ``AsyncEngine`` you own, or a ``Database`` several stores share.
    ``tenant``: the tenant its sessions belong to (None: the Database's).
    """

    def __init__(self, target: StoreTarget, *, tenant: str | None = None) -> None:
        self._native = sql_sessions.SQLSession(target, tenant=tenant)

    async def segments(self, session_id: str) -> list[Segment]:
        where = session_rows(session_id)
        parts = await self._native.segment_parts(
            session_id, lambda rows: decode_entries(rows, where)
        )
        return [Segment(run_id, entries, meta) for run_id, entries, meta in parts]

    async def load(self, session_id: str) -> list[TranscriptEntry]:
        documents = await self._native.load_documents(session_id)
        return decode_entries(documents, rows_of("lovia_messages", "session_id", session_id))

    async def append(
        self,
        session_id: str,
        entries: list[TranscriptEntry],
        *,
        run_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> str:
        """One finished run, atomically; appending a stored ``run_id`` again is a no-op."""
        chosen, _, _ = check_append(session_id, [], run_id, None)
        meta_json = None if meta is None else dump_object(meta, "meta")
        await self._native.append_encoded(session_id, chosen, meta_json, encode_entries(entries))
        return chosen

    async def clear(self, session_id: str) -> None:
        await self._native.clear(session_id)

    async def trim_tool_results(
        self, session_id: str, *, keep_chars: int = 400, keep_runs: int = 1
    ) -> int:
        return await self._native.trim_tool_results(
            session_id, keep_chars=keep_chars, keep_runs=keep_runs
        )

    async def rewind(
        self, session_id: str, *, keep_entries: int, checkpointer: object | None = None
    ) -> int:
        """lovia's rewind; with ``checkpointer``, the checkpoints of the runs it cut go too."""
        native = checkpointer._native if isinstance(checkpointer, SQLCheckpointer) else checkpointer
        with own_calls():  # the native checkpointer's delete, on lovia's behalf
            return await self._native.rewind(
                session_id,
                keep_entries=keep_entries,
                checkpointer=native,  # type: ignore[arg-type]
            )

    async def fork(self, session_id: str, new_session_id: str, *, keep_entries: int) -> int:
        """lovia-store's fork (the non-destructive rewind): the first ``keep_entries``
        entries copied into a new session; returns the entries it holds."""
        return await self._native.fork(session_id, new_session_id, keep_entries=keep_entries)

    async def fork_origin(self, session_id: str) -> ForkOrigin | None:
        """The session and entry count ``session_id`` was forked from, or None."""
        return await self._native.fork_origin(session_id)


class SQLiteSession(SQLSession):
    """lovia's ``SQLiteSession(path, *, wal=False)``, on lovia-store's schema."""

    def __init__(
        self, path: str | os.PathLike[str], *, wal: bool = False, tenant: str | None = None
    ) -> None:
        self._native = sql_sessions.SQLiteSession(path, wal=wal, tenant=tenant)


class SQLCheckpointer(_Adapter[sql_checkpoints.SQLCheckpointer]):
    """lovia's ``Checkpointer`` on any SQL backend, with a lease per run.

    ``lease_ttl`` (seconds, default 30) is how long a lease outlives its last
    write or renewal; ``None`` turns leases off (lovia's own behaviour).
    ``tenant``: the tenant its runs belong to (None: the Database's).
    """

    def __init__(
        self,
        target: StoreTarget,
        *,
        lease_ttl: float | None = DEFAULT_LEASE_TTL,
        tenant: str | None = None,
    ) -> None:
        self._native = sql_checkpoints.SQLCheckpointer(target, tenant=tenant)
        self._setup(lease_ttl)

    def _setup(self, lease_ttl: float | None) -> None:
        self.lease_ttl = None if lease_ttl is None else check_ttl(lease_ttl)
        self._held: dict[str, HeldLease] = {}
        self._pending: dict[str, asyncio.Future[None]] = {}  # lease changes in flight
        self._fresh: set[str] = set()  # runs this instance found absent (or deleted)

    async def _hold(self, run_id: str) -> HeldLease | None:
        # lovia stops a run by cancelling it, maybe while this worker takes or
        # releases the run's lease. Both finish regardless (shielded) and are
        # waited for here: a lease orphaned by a cancelled caller would refuse
        # this very worker the run with RunInProgressError until it expired.
        pending = self._pending.get(run_id)
        if pending is not None:
            await asyncio.wait([pending])
        held = self._held.get(run_id)
        if held is None and self.lease_ttl is not None:
            held = HeldLease(self._native, run_id, self.lease_ttl)
            await self._shielded(run_id, self._enter(run_id, held))
        return held

    async def _enter(self, run_id: str, held: HeldLease) -> None:
        await held.__aenter__()
        self._held[run_id] = held

    async def _let_go(self, run_id: str) -> None:
        held = self._held.pop(run_id, None)
        if held is not None:
            await self._shielded(run_id, held.__aexit__(None, None, None))

    async def _shielded(self, run_id: str, change: Coroutine[Any, Any, None]) -> None:
        task = self._pending[run_id] = asyncio.ensure_future(change)
        task.add_done_callback(lambda _: self._settled(run_id, task))
        await asyncio.shield(task)

    def _settled(self, run_id: str, task: asyncio.Future[None]) -> None:
        if self._pending.get(run_id) is task:
            del self._pending[run_id]
        if not task.cancelled():
            task.exception()  # seen: a cancelled caller's RunInProgressError is not news

    async def load(self, run_id: str) -> RunSnapshot | None:
        """The run as stored, or None; a run that can resume is leased to this worker first."""
        check_id(run_id, "run_id")
        # The lease comes before the read: a worker that finished the run while
        # this one waited must not be continued from what was read before.
        await self._hold(run_id)
        stored = await self._native.load_documents(run_id)
        if stored is None:
            # A fresh start takes the lease at its first write (before any tool
            # runs); holding it now would let a mere look keep others out.
            await self._let_go(run_id)
            self._fresh.add(run_id)
            return None
        head_json, documents = stored
        head = _decode_head(run_id, head_json)
        if head.status not in _RESUMABLE:  # a replay executes nothing
            await self._let_go(run_id)
        self._fresh.discard(run_id)
        where = rows_of("lovia_run_entries", "run_id", run_id)
        return RunSnapshot.from_parts(run_id, decode_entries(documents, where), head)

    async def append(self, run_id: str, entries: list[TranscriptEntry], head: RunHead) -> None:
        """Add the step's entries and replace the head, under the run's lease."""
        check_id(run_id, "run_id")
        if not isinstance(head, RunHead):
            raise UserError(f"head must be a lovia.checkpointer.RunHead, not {_name(head)}")
        run = encode_entries(entries)
        status, head_json = _head_document(head)
        held = await self._hold(run_id)
        first = run_id in self._fresh
        await self._native.append_encoded(
            run_id,
            status,
            head_json,
            run.documents,
            lease=held.lease if held is not None else None,
            first=first,
        )
        self._fresh.discard(run_id)
        if status != "running":
            await self._let_go(run_id)

    async def delete(self, run_id: str) -> None:
        check_id(run_id, "run_id")
        held = self._held.get(run_id)
        with own_calls():  # lovia's Runner drives this adapter, which speaks its types
            await self._native.delete(run_id, lease=held.lease if held is not None else None)
        await self._let_go(run_id)
        self._fresh.add(run_id)

    async def list_runs(
        self, *, status: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[Any]:
        """lovia-store's run listing (an operator looking for interrupted runs)."""
        check_count(limit, "limit", minimum=1)
        return await self._native.list_runs(status=status, limit=limit, offset=offset)  # type: ignore[arg-type]

    async def close(self) -> None:
        """Release the leases this worker holds, then the database if it is ours."""
        if self._pending:  # a lease still being taken is released too
            await asyncio.wait(list(self._pending.values()))
        for run_id in list(self._held):
            await self._let_go(run_id)
        await self._native.close()


class SQLiteCheckpointer(SQLCheckpointer):
    """lovia's ``SQLiteCheckpointer(path, *, wal=False)``, on lovia-store's schema."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        wal: bool = False,
        lease_ttl: float | None = DEFAULT_LEASE_TTL,
        tenant: str | None = None,
    ) -> None:
        self._native = sql_checkpoints.SQLiteCheckpointer(path, wal=wal, tenant=tenant)
        self._setup(lease_ttl)
