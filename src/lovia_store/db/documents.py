"""How a JSON document is kept in its column: as written, or compressed, shared, sealed.

A stored document is either the JSON text itself (every row written before
revision 0010, every short document when nothing is encrypted), or::

    \\x01 FLAGS \\x1f KEY_ID \\x1f REFS \\x1f BODY

``\\x01`` never starts JSON text, so the two never mix up. ``FLAGS`` holds, in this
order, ``r`` (the document's long strings are stored once, in ``lovia_contents``:
``REFS`` lists ``digest:offset`` where each goes back), ``z`` (the body is zlib-
compressed) and ``e`` (the body is sealed with AES-256-GCM under the key ``KEY_ID``,
bound to the tenant, the flags and the references). A compressed or sealed body
is base64 text (the columns are text); otherwise it is the text itself. Reading
undoes each step, so the exact text that was written comes back.

zlib, from the standard library, so that every install reads every database:
on tool outputs (source files, 3.3 MB) it keeps 4.21x at level 6, the
``zstandard`` package 3.95x at level 3, at four times the speed; a long value is
compressed once (it is stored once), so the ratio matters more.

``r`` is written only in the columns whose documents hold tool outputs (a
message's or a run's entry, a tool effect's outcome): ``shareable``. The
references are counted in the same transaction as the rows that hold them
(``lovia_store.db.contents``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from ..errors import EncryptionKeyError, StoredValueError, UserError
from .encryption import KeySet, KeySource, key_sets

if TYPE_CHECKING:
    from .._json import Where

__all__ = [
    "DEFAULT_THRESHOLD",
    "MARK",
    "SHARED_MARK",
    "DocumentCodec",
    "Encoded",
    "references",
]

MARK = "\x01"
SHARED_MARK = MARK + "r"
"""The prefix of a document with references (a ``LIKE`` finds them: ``release``)."""
_SEP = "\x1f"
DEFAULT_THRESHOLD = 2048
LEVEL = 6
_FLAGS = frozenset({"", "r", "z", "e", "rz", "re", "ze", "rze"})
# A JSON string literal; scanned from the start of a JSON text, each match starts
# at an opening quote (outside strings JSON holds no quote).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_CACHED_BYTES = 8 << 20


class Encoded(NamedTuple):
    """A document as its column holds it, and the long values it names (digest, text)."""

    text: str
    shared: tuple[tuple[str, str], ...]


def references(stored: str) -> list[str]:
    """The digests ``stored`` refers to, once per reference (none for most documents)."""
    if not stored.startswith(SHARED_MARK):
        return []
    parts = stored.split(_SEP, 3)
    if len(parts) < 4 or not parts[2]:
        return []
    return [ref.partition(":")[0] for ref in parts[2].split(",")]


class DocumentCodec:
    """One Database's way of storing documents: its threshold, its keys.

    ``compression=False`` writes documents as plain JSON text (as before revision
    0010), sealed when there are keys; everything reads either way.
    """

    def __init__(
        self,
        *,
        compression: bool = True,
        threshold: int = DEFAULT_THRESHOLD,
        encryption_keys: KeySource | None = None,
    ) -> None:
        if not isinstance(compression, bool):
            raise UserError(f"compression is True or False, not {compression!r}")
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 64:
            raise UserError(
                f"compression_threshold is a number of characters, at least 64, not {threshold!r}"
            )
        self.compression = compression
        self.threshold = threshold
        self._keys: Callable[[str], KeySet] | None = key_sets(encryption_keys)
        self._packed: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._packed_bytes = 0

    @property
    def encrypts(self) -> bool:
        return self._keys is not None

    def keys(self, tenant: str) -> KeySet | None:
        return None if self._keys is None else self._keys(tenant)

    # -- writing -----------------------------------------------------------------

    def encode(self, tenant: str, text: str, *, shareable: bool = False) -> Encoded:
        """``text`` as its column will hold it. Short documents stay as they are
        unless encrypted; long ones are compressed, their long strings shared."""
        keys = self.keys(tenant)
        if not self.compression or len(text) < self.threshold:
            if keys is None:
                return Encoded(text, ())
            return Encoded(self._form(tenant, keys, "", "", text.encode()), ())
        refs = ""
        shared: tuple[tuple[str, str], ...] = ()
        if shareable:
            text, refs, shared = self._share(text, keys)
        flags = "r" if refs else ""
        data = text.encode()
        if len(text) >= self.threshold:
            packed = zlib.compress(data, LEVEL)
            if len(packed) * 4 // 3 + 8 < len(data):
                data, flags = packed, flags + "z"
        if keys is None and not flags:
            return Encoded(text, ())
        return Encoded(self._form(tenant, keys, flags, refs, data), shared)

    def _share(
        self, text: str, keys: KeySet | None
    ) -> tuple[str, str, tuple[tuple[str, str], ...]]:
        pieces: list[str] = []
        refs: list[str] = []
        shared: list[tuple[str, str]] = []
        last = kept = 0
        for match in _STRING.finditer(text):
            start, end = match.span()
            if end - start < self.threshold:
                continue
            value = match.group()
            pieces.append(text[last:start])
            kept += start - last
            data = value.encode()
            digest = hashlib.sha256(data).hexdigest() if keys is None else keys.digest(data)
            refs.append(f"{digest}:{kept}")
            shared.append((digest, value))
            last = end
        if not refs:
            return text, "", ()
        pieces.append(text[last:])
        return "".join(pieces), ",".join(refs), tuple(shared)

    def _form(self, tenant: str, keys: KeySet | None, flags: str, refs: str, data: bytes) -> str:
        key_id = ""
        if keys is not None:
            flags += "e"
            key_id = keys.current.id
            data = keys.current.seal(data, _context(tenant, flags, refs))
        body = data.decode() if flags in ("", "r") else base64.b64encode(data).decode("ascii")
        return f"{MARK}{flags}{_SEP}{key_id}{_SEP}{refs}{_SEP}{body}"

    def pack(self, tenant: str, digest: str, value: str) -> bytes:
        """A shared value as ``lovia_contents.data`` holds it: ``z`` and its zlib
        bytes (``p`` and its UTF-8 when that is no larger), sealed (``e``, the key id,
        the sealed bytes) when encrypting. Kept a while: a value repeats."""
        cached = self._packed.get((tenant, digest))
        if cached is not None:
            self._packed.move_to_end((tenant, digest))
            return cached
        data = value.encode()
        packed = zlib.compress(data, LEVEL)
        inner = b"z" + packed if len(packed) < len(data) else b"p" + data
        keys = self.keys(tenant)
        if keys is not None:
            key = keys.current
            inner = b"e" + key.id.encode() + key.seal(inner, _context(tenant, digest))
        self._packed[(tenant, digest)] = inner
        self._packed_bytes += len(inner)
        while self._packed_bytes > _CACHED_BYTES:
            _, dropped = self._packed.popitem(last=False)
            self._packed_bytes -= len(dropped)
        return inner

    # -- reading -----------------------------------------------------------------

    def decode(
        self,
        tenant: str,
        stored: str,
        shared: Mapping[str, str],
        where: Where | None = None,
        index: int = 0,
    ) -> str:
        """The text that was written (``shared``: the values its references name)."""
        if not stored.startswith(MARK):
            return stored
        parts = stored[1:].split(_SEP, 3)
        if len(parts) != 4 or parts[0] not in _FLAGS or not parts[0]:
            raise damaged("a stored document has an unknown form", where, index)
        flags, key_id, refs, body = parts
        if flags in ("r",):
            text = body
        else:
            try:
                data = base64.b64decode(body.encode("ascii"), validate=True)
            except (binascii.Error, UnicodeEncodeError):
                raise damaged("a stored document's body is not base64", where, index) from None
            if "e" in flags:
                data = self._open(tenant, key_id, data, _context(tenant, flags, refs), where, index)
            try:
                text = (zlib.decompress(data) if "z" in flags else data).decode()
            except (zlib.error, UnicodeDecodeError) as exc:
                raise damaged(f"a stored document does not read ({exc})", where, index) from None
        if refs:
            text = _splice(text, refs, shared, where, index)
        return text

    def unpack(
        self, tenant: str, digest: str, data: bytes, where: Where | None = None, index: int = 0
    ) -> str:
        """The shared value ``pack`` stored under ``digest``."""
        if data[:1] == b"e":
            key_id = data[1:9].decode("ascii", "replace")
            data = self._open(tenant, key_id, data[9:], _context(tenant, digest), where, index)
        kind, body = data[:1], data[1:]
        try:
            if kind == b"z":
                return zlib.decompress(body).decode()
            if kind == b"p":
                return body.decode()
        except (zlib.error, UnicodeDecodeError) as exc:
            raise damaged(f"a shared value does not read ({exc})", where, index) from None
        raise damaged("a shared value has an unknown form", where, index)

    def _open(
        self,
        tenant: str,
        key_id: str,
        data: bytes,
        context: bytes,
        where: Where | None,
        index: int,
    ) -> bytes:
        keys = self.keys(tenant)
        key = None if keys is None else keys.by_id.get(key_id)
        if key is None:
            given = "no encryption keys" if keys is None else "no key of that id"
            raise _key_error(
                f"a stored value is encrypted with key {key_id!r}, and this Database has {given}",
                key_id,
                where,
                index,
            )
        opened = key.open(data, context)
        if opened is None:
            raise _key_error(
                f"a stored value does not open with key {key_id!r}: "
                "a wrong key of the same id, or the value was altered",
                key_id,
                where,
                index,
            )
        return opened

    def is_current(self, tenant: str, stored: str) -> bool:
        """Whether ``stored`` is sealed as this codec seals now (the current key, or
        not sealed without keys): what ``rekey`` leaves alone."""
        keys = self.keys(tenant)
        if not stored.startswith(MARK):
            return keys is None
        flags, key_id = stored[1:].split(_SEP, 2)[:2]
        if keys is None:
            return "e" not in flags
        return "e" in flags and key_id == keys.current.id


def _context(tenant: str, *parts: str) -> bytes:
    return "\x00".join(("lovia-store", tenant, *parts)).encode()


def _splice(
    text: str, refs: str, shared: Mapping[str, str], where: Where | None, index: int
) -> str:
    pieces: list[str] = []
    last = 0
    for ref in refs.split(","):
        digest, _, at = ref.partition(":")
        value = shared.get(digest)
        if value is None or not at.isdigit():
            raise damaged(
                f"a stored document refers to a shared value that is not stored ({digest})",
                where,
                index,
            )
        offset = int(at)
        pieces.append(text[last:offset])
        pieces.append(value)
        last = offset
    pieces.append(text[last:])
    return "".join(pieces)


def damaged(message: str, where: Where | None, index: int) -> StoredValueError:
    from .._json import damaged  # pydantic: only once something does not read

    return damaged(message, where, index)


def _key_error(message: str, key_id: str, where: Where | None, index: int) -> StoredValueError:
    plain = damaged(message, where, index)
    return EncryptionKeyError(
        message, key_id=key_id, table=plain.table, column=plain.column, row=plain.row
    )
