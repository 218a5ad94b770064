"""How a JSON document is kept in its column: as written, or compressed, shared, sealed.

A stored document is either the JSON text itself (every row written before
revision 0010, every short document when nothing is encrypted), or::

    \\x01 FLAGS \\x1f KEY_ID \\x1f REFS \\x1f BODY

``\\x01`` never starts JSON text, so the two never mix up. ``FLAGS`` holds, in this
order, ``r`` (the document's long strings are stored once, in ``lovia_contents``:
``REFS`` lists ``digest:offset`` where each goes back), ``z`` (the body is
Zstandard-compressed) and ``e`` (the body is sealed with AES-256-GCM under the key ``KEY_ID``,
bound to the tenant, the flags and the references). A compressed or sealed body
is base64 text (the columns are text); otherwise it is the text itself. Reading
undoes each step, so the exact text that was written comes back. A document is
kept compressed only when that at least halves it (``_pays``).

Zstandard at level 3, measured on tool outputs (source files, 3.3 MB): 3.95x
at 228 MB/s, unpacked at 463 MB/s; zlib keeps 4.21x at level 6 at 47 MB/s (3.61x
at 103 MB/s at level 1) and unpacks at 230-270 MB/s. Every install reads every
database: ``zstandard`` is a core dependency before Python 3.14, whose standard
library has ``compression.zstd``. Either is imported when a document is first long
enough to compress.

Long strings are found in the parsed document and cut from its text where they
stand, so the text that comes back is the text that went in whatever the JSON
encoder that wrote it (a string not found as written is simply left in place).

``r`` is written only in the columns whose documents hold tool outputs (a
message's or a run's entry, a tool effect's outcome): ``shareable``. The
references are counted in the same transaction as the rows that hold them
(``lovia_store.db.contents``).
"""

from __future__ import annotations

import binascii
import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from ..errors import EncryptionKeyError, StoredValueError, UserError
from .compression import compress, decompress
from .encryption import EncryptionKey, KeySet, KeySource, key_sets

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
_SEALED = MARK + "e" + _SEP
_SHARED_SEALED = MARK + "re" + _SEP
SEALED_BYTES = _SEALED.encode()
"""How a sealed document without references starts, read as UTF-8 bytes."""
DEFAULT_THRESHOLD = 2048
_FLAGS = frozenset({"", "r", "z", "e", "rz", "re", "ze", "rze"})
# A JSON string literal; scanned from the start of a JSON text, each match starts
# at an opening quote (outside strings JSON holds no quote).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_CACHED_BYTES = 8 << 20
_CACHED_CHARS = 16 << 20


class Encoded(NamedTuple):
    """A document as its column holds it, and the long values it names (digest, text)."""

    text: str
    shared: tuple[tuple[str, str], ...]


def references(stored: str) -> list[str]:
    """The digests ``stored`` refers to, once per reference (none for most documents,
    nor for one read as bytes: only a sealed one without references is)."""
    if type(stored) is not str or not stored.startswith(SHARED_MARK):
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
        self._values: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._values_chars = 0
        self._lock = threading.Lock()

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
        if len(text) >= self.threshold:
            data = text.encode()
            packed = compress(data)
            if _pays(len(packed), len(data)):
                return Encoded(self._form(tenant, keys, flags + "z", refs, packed), shared)
        if keys is None:  # as written, or its skeleton as it stands
            return Encoded(_plain_form(flags, refs, text), shared) if flags else Encoded(text, ())
        return Encoded(self._form(tenant, keys, flags, refs, text.encode()), shared)

    def _share(
        self, text: str, keys: KeySet | None
    ) -> tuple[str, str, tuple[tuple[str, str], ...]]:
        pieces: list[str] = []
        refs: list[str] = []
        shared: list[tuple[str, str]] = []
        last = kept = 0
        hashed: dict[int, tuple[str, str]] = {}  # by length: a tool result's raw repeats it
        for start, end in self._long_strings(text):
            value = text[start:end]
            pieces.append(text[last:start])
            kept += start - last
            seen = hashed.get(len(value))
            if seen is not None and seen[0] == value:
                digest = seen[1]
            else:
                data = value.encode()
                digest = hashlib.sha256(data).hexdigest() if keys is None else keys.digest(data)
                hashed[len(value)] = (value, digest)
            refs.append(f"{digest}:{kept}")
            shared.append((digest, value))
            last = end
        if not refs:
            return text, "", ()
        pieces.append(text[last:])
        return "".join(pieces), ",".join(refs), tuple(shared)

    def _long_strings(self, text: str) -> list[tuple[int, int]]:
        """Where the document's long strings stand in ``text``, in order.

        Parsing (orjson, C) and a search for each long string as JSON writes it
        cost a fifth of scanning every string literal with a regular expression.
        A string is looked for as orjson writes it, then (not ASCII) as the standard
        library does by default, escaped; the first one found neither way ends the
        search, so a document written otherwise costs two scans, not one per string.
        """
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:  # an integer orjson does not read
            return [
                m.span() for m in _STRING.finditer(text) if m.end() - m.start() >= self.threshold
            ]
        spans: list[tuple[int, int]] = []
        at = 0
        written: dict[int, tuple[str, str]] = {}  # by length, as in ``_share``
        escaped = False  # the document writes what is not ASCII escaped
        for string in _strings_in_order(value, self.threshold - 2):
            seen = written.get(len(string))
            if seen is not None and seen[0] == string:
                literal = seen[1]
            else:
                literal = json.dumps(string) if escaped else orjson.dumps(string).decode()
            start = _find(text, literal, at)
            if start < 0 and not escaped and not string.isascii():
                literal = json.dumps(string)  # the standard library's default form
                start = _find(text, literal, at)
                escaped = start >= 0
            if start < 0:
                # Written otherwise: what follows stays in place (a search per string
                # would scan the rest of the text each time).
                break
            written[len(string)] = (string, literal)
            at = start + len(literal)
            spans.append((start, at))
        return spans

    def _form(self, tenant: str, keys: KeySet | None, flags: str, refs: str, data: bytes) -> str:
        """A packed or sealed body, as base64 text behind its header."""
        key_id = ""
        if keys is not None:
            flags += "e"
            key_id = keys.current.id
            data = keys.current.seal(data, _context(tenant, flags, refs))
        from pybase64 import b64encode  # SIMD base64: a tenth of binascii's time

        return f"{MARK}{flags}{_SEP}{key_id}{_SEP}{refs}{_SEP}{b64encode(data).decode()}"

    def pack(self, tenant: str, digest: str, value: str) -> bytes:
        """A shared value as ``lovia_contents.data`` holds it: ``z`` and its Zstandard
        bytes (``p`` and its UTF-8 when that is no larger), sealed (``e``, the key id,
        the sealed bytes) when encrypting. Kept a while: a value repeats."""
        with self._lock:
            cached = self._packed.get((tenant, digest))
            if cached is not None:
                self._packed.move_to_end((tenant, digest))
                return cached
        data = value.encode()
        packed = compress(data)
        inner = b"z" + packed if len(packed) < len(data) else b"p" + data
        keys = self.keys(tenant)
        if keys is not None:
            key = keys.current
            inner = b"e" + key.id.encode() + key.seal(inner, _context(tenant, digest))
        with self._lock:
            if (tenant, digest) not in self._packed:
                self._packed[(tenant, digest)] = inner
                self._packed_bytes += len(inner)
            while self._packed_bytes > _CACHED_BYTES:
                _, dropped = self._packed.popitem(last=False)
                self._packed_bytes -= len(dropped)
        return inner

    def recall(self, tenant: str, digests: set[str]) -> dict[str, str]:
        """The shared values of ``digests`` read or written lately: a digest names one
        value for good, so a value kept is never stale."""
        with self._lock:
            found = {}
            for digest in digests:
                value = self._values.get((tenant, digest))
                if value is not None:
                    self._values.move_to_end((tenant, digest))
                    found[digest] = value
            return found

    def remember(self, tenant: str, values: Mapping[str, str]) -> None:
        with self._lock:
            for digest, value in values.items():
                if (tenant, digest) in self._values or len(value) > _CACHED_CHARS // 8:
                    continue
                self._values[(tenant, digest)] = value
                self._values_chars += len(value)
            while self._values_chars > _CACHED_CHARS:
                _, dropped = self._values.popitem(last=False)
                self._values_chars -= len(dropped)

    # -- reading -----------------------------------------------------------------

    def decode(
        self,
        tenant: str,
        stored: str,
        shared: Mapping[str, str],
        where: Where | None = None,
        index: int = 0,
    ) -> str:
        """The text that was written (``shared``: the values its references name).

        The hot path of an encrypted load (once per document): kept flat."""
        if stored[:1] != MARK:
            return stored
        parts = stored[1:].split(_SEP, 3)
        if len(parts) != 4 or parts[0] not in _FLAGS or not parts[0]:
            raise damaged("a stored document has an unknown form", where, index)
        flags, key_id, refs, body = parts
        if flags == "r":
            text = body
        else:
            from pybase64 import b64decode  # SIMD base64 (strict: that is its fast path)

            try:
                data = b64decode(body, validate=True)
            except (binascii.Error, ValueError):
                raise damaged("a stored document's body is not base64", where, index) from None
            if "e" in flags:
                keys = None if self._keys is None else self._keys(tenant)
                key = None if keys is None else keys.by_id.get(key_id)
                opened = None if key is None else key.open(data, _context(tenant, flags, refs))
                if opened is None:
                    raise self._unopened(keys, key, key_id, where, index)
                data = opened
            try:
                text = (decompress(data) if "z" in flags else data).decode()
            except (ValueError, UnicodeDecodeError) as exc:
                raise damaged(f"a stored document does not read ({exc})", where, index) from None
        if refs:
            text = _splice(text, refs, shared, where, index)
        return text

    def decode_at(
        self,
        tenant: str,
        texts: list[Any],
        indexes: list[int],
        shared: Mapping[str, str],
        where: Where | None = None,
    ) -> None:
        """``decode`` each of ``texts`` at ``indexes``, in place.

        Sealed documents (flags ``e``, or ``re``: most of an encrypted load) are
        opened inline, their key looked up once: a call per document costs as much
        as opening it. One read as UTF-8 bytes (SQLite, ``_marked``) comes back as
        the bytes opened, which are the document's UTF-8 (authenticated): the JSON
        reader takes them as they are. Anything else, or anything that does not
        open, takes ``decode`` (which names what is wrong)."""
        from pybase64 import b64decode

        keys = None if self._keys is None else self._keys(tenant)
        by_id = {} if keys is None else keys.by_id
        by_bytes_id = {key_id.encode(): key for key_id, key in by_id.items()}
        context = _context(tenant, "e", "")
        for index in indexes:
            stored = texts[index]
            text: Any = None
            try:
                if type(stored) is bytes:  # sealed, without references (``_marked``)
                    _, key_id, _, body = stored.split(b"\x1f", 3)
                    key = by_bytes_id.get(key_id)
                    if key is not None:
                        text = key.open(b64decode(body, validate=True), context)
                elif stored.startswith(_SEALED):
                    _, key_id, _, body = stored.split(_SEP, 3)
                    key = by_id.get(key_id)
                    if key is not None:
                        opened = key.open(b64decode(body, validate=True), context)
                        text = None if opened is None else opened.decode()
                elif stored.startswith(_SHARED_SEALED):
                    _, key_id, refs, body = stored.split(_SEP, 3)
                    key = by_id.get(key_id)
                    if key is not None:
                        seal = _context(tenant, "re", refs)
                        opened = key.open(b64decode(body, validate=True), seal)
                        if opened is not None:
                            text = _splice(opened.decode(), refs, shared, where, index)
            except (binascii.Error, ValueError):
                pass  # decode names it
            if text is None:
                if type(stored) is bytes:
                    stored = utf8_text(stored, where, index)
                text = self.decode(tenant, stored, shared, where, index)
            texts[index] = text

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
                return decompress(body).decode()
            if kind == b"p":
                return body.decode()
        except (ValueError, UnicodeDecodeError) as exc:
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
        opened = None if key is None else key.open(data, context)
        if opened is None:
            raise self._unopened(keys, key, key_id, where, index)
        return opened

    @staticmethod
    def _unopened(
        keys: KeySet | None,
        key: EncryptionKey | None,
        key_id: str,
        where: Where | None,
        index: int,
    ) -> StoredValueError:
        if key is None:
            given = "no encryption keys" if keys is None else "no key of that id"
            message = (
                f"a stored value is encrypted with key {key_id!r}, and this Database has {given}"
            )
        else:
            message = (
                f"a stored value does not open with key {key_id!r}: "
                "a wrong key of the same id, or the value was altered"
            )
        return _key_error(message, key_id, where, index)

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


def _find(text: str, literal: str, at: int) -> int:
    """``text.find(literal, at)``, by its first characters then a comparison: a long
    needle costs ``str.find`` a pass over itself before it searches."""
    head = literal[:32]
    start = text.find(head, at)
    while start >= 0 and not text.startswith(literal, start):
        start = text.find(head, start + 1)
    return start


def _pays(packed: int, size: int) -> bool:
    """Whether compression at least halves a document: one that compresses less (most
    prose of a few KB) would cost every read a decompression to save a fraction of its
    size, the more so as a compressed body is base64 text, a third longer."""
    return packed * 2 <= size


def _plain_form(flags: str, refs: str, text: str) -> str:
    """A skeleton neither packed nor sealed: the text itself behind its header."""
    return f"{MARK}{flags}{_SEP}{_SEP}{refs}{_SEP}{text}"


def _strings_in_order(value: Any, shortest: int) -> list[str]:
    """The strings of ``value`` at least ``shortest`` long, in the order JSON writes them
    (object keys are left alone)."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if len(item) >= shortest:
                found.append(item)
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return found


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


def utf8_text(data: bytes, where: Where | None, index: int) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise damaged("a stored document is not UTF-8 text", where, index) from None


def damaged(message: str, where: Where | None, index: int) -> StoredValueError:
    from .._json import damaged  # pydantic: only once something does not read

    return damaged(message, where, index)


def _key_error(message: str, key_id: str, where: Where | None, index: int) -> StoredValueError:
    plain = damaged(message, where, index)
    return EncryptionKeyError(
        message, key_id=key_id, table=plain.table, column=plain.column, row=plain.row
    )
