"""Transcript entries as stored: JSON documents, decoded exactly, and the rows they name.

Each stored entry is one JSON document (or, for a message another framework
stored that stands for several entries, one array of them). Decoding keeps
every integer exact, and a document that does not read is a ``StoredValueError``
naming its row (``Where``), never a raw decode or validation error.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ._json import Where, damaged, dump_trusted, load_documents
from .entry_shapes import ENTRY_LIST, TranscriptEntry, entry_from_dict, entry_to_json
from .errors import UnknownEntryTypeError

__all__ = [
    "MULTIPLE_ENTRIES",
    "Where",
    "damaged",
    "entries_document",
    "entries_from_json_rows",
    "expand_documents",
    "json_documents",
    "name_unknown_entry",
    "rows_of",
    "session_rows",
    "stored_model",
]

_DECODE_BATCH = 256  # documents parsed and validated together


def rows_of(table: str, key: str, value: str) -> Where:
    """The rows of one session (``key`` ``session_id``) or run (``run_id``) in the
    order read: a damaged one is named by that id and its ``index`` (from 0)."""
    return table, "entry_json", lambda index: {key: value, "index": index}


M = TypeVar("M", bound=BaseModel)


def stored_model(model: type[M], text: str | bytes, where: Where, index: int = 0) -> M:
    """A stored model's JSON (a run's head), validated; a damaged one is a
    ``StoredValueError`` naming its row, never pydantic's ``ValidationError``."""
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise damaged(f"a stored {model.__name__} is not valid ({detail})", where, index) from None


def session_rows(session_id: str, rows: Sequence[Sequence[Any]] | None = None) -> Where:
    """A session's rows in ``lovia_messages``: a damaged one is named by its sequence,
    the first column of ``rows`` (when the reader has them), or by the session alone.
    The sequence is looked up only for a damaged row, so naming costs a read nothing."""
    if rows is None:
        return "lovia_messages", "entry_json", lambda _: {"session_id": session_id}
    return (
        "lovia_messages",
        "entry_json",
        lambda i: {"session_id": session_id, "sequence": rows[i][0]},
    )


json_documents = load_documents
"""Stored JSON documents parsed exactly (``lovia_store._json.load_documents``)."""


def name_unknown_entry(
    documents: Iterable[Any], where: Where | None = None, *, start: int = 0
) -> None:
    """After a batch failed validation: raise for the first document that is no entry.

    An unknown ``type`` raises ``UnknownEntryTypeError`` naming it; a bad field
    a ``StoredValueError`` naming its row (``where``, as ``json_documents``).
    Returns when every document is an entry.
    """
    for index, document in enumerate(documents):
        try:
            entry_from_dict(document)
        except ValidationError as exc:
            detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            message = f"a stored document is not a transcript entry ({detail})"
            raise damaged(message, where, start + index) from None
        except UnknownEntryTypeError:
            raise
        except ValueError as exc:  # not a JSON object
            message = f"a stored document is not a transcript entry ({exc})"
            raise damaged(message, where, start + index) from None


# A stored entry document is one entry's JSON object, or, for a message another
# framework stored that stands for several entries (a zett-agent assistant
# message: its reasoning, text and tool calls), a JSON array of them, in order,
# in one Raw Log row whose entry type is MULTIPLE_ENTRIES. Readers of lovia's
# view expand it: the flat list of entries is what ``load`` returns.
MULTIPLE_ENTRIES = "entries"


def entries_document(entries: Sequence[TranscriptEntry]) -> str:
    """The stored document of a row standing for ``entries`` (one object, or an array)."""
    if len(entries) == 1:
        return entry_to_json(entries[0])
    return "[" + ",".join(entry_to_json(entry) for entry in entries) + "]"


def _is_array(document: str | bytes) -> bool:
    return document[:1] in (b"[", "[")


def expand_documents(rows: Sequence[str | bytes], where: Where | None = None) -> list[str | bytes]:
    """Stored documents with every array split into its entries' documents (in order)."""
    if not any(_is_array(row) for row in rows):
        return list(rows)
    out: list[str | bytes] = []
    for row in rows:
        if _is_array(row):
            out.extend(dump_trusted(item) for item in json_documents([row], where)[0])
        else:
            out.append(row)
    return out


def _flatten(documents: list[Any]) -> list[Any] | None:
    """Parsed documents with arrays spliced in, or None when there was none."""
    if not any(isinstance(document, list) for document in documents):
        return None
    flat: list[Any] = []
    for document in documents:
        if isinstance(document, list):
            flat.extend(document)
        else:
            flat.append(document)
    return flat


def entries_from_json_rows(
    rows: Sequence[str | bytes], where: Where | None = None
) -> list[TranscriptEntry]:
    """Decode stored entry documents (the load hot path): parse, then validate once.

    orjson parses the documents and pydantic validates them a batch at a time,
    one validation per entry; a batch's parsed dicts are dropped before the
    next is parsed, so they never all live at once. (Splicing the documents
    into one JSON array for ``validate_json`` costs more: joining long
    non-ASCII strings copies and widens them, and pydantic's parser is slower
    than orjson on long strings.) A damaged document is a ``StoredValueError``
    naming its row (``where``: table, column and the rows' shared key).
    """
    entries: list[TranscriptEntry] = []
    for start in range(0, len(rows), _DECODE_BATCH):
        documents = json_documents(rows[start : start + _DECODE_BATCH], where, start=start)
        try:
            entries += ENTRY_LIST.validate_python(documents)
        except ValidationError:
            # Rows that stand for several entries are rare: looked for only here,
            # so a session without any pays nothing for them.
            flat = _flatten(documents)
            if flat is None:
                name_unknown_entry(documents, where, start=start)
                raise
            try:
                entries += ENTRY_LIST.validate_python(flat)
            except ValidationError:
                for index, document in enumerate(documents):
                    items = document if isinstance(document, list) else [document]
                    name_unknown_entry(items, where, start=start + index)
                raise
    return entries
