"""The stored form of documents (db/documents.py, db/encryption.py) and the shared values
they name (db/contents.py): exact round trips, sealed values, typed errors."""

from __future__ import annotations

import base64
import hashlib
import json
import random
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from backends import migrated_server_database
from helpers import examples
from lovia_store import Database, EncryptionKeyError, StoredValueError, UserError
from lovia_store.db.contents import (
    read_documents,
    release_documents,
    retain_references,
    store_documents,
)
from lovia_store.db.documents import DEFAULT_THRESHOLD, MARK, SHARED_MARK, DocumentCodec, references
from lovia_store.db.encryption import generate_encryption_key
from lovia_store.db.tables import contents

KEY_A = generate_encryption_key()
KEY_B = generate_encryption_key()
WHERE = ("lovia_messages", "entry_json", lambda index: {"session_id": "s", "index": index})

texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=300)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
    | st.text(alphabet='ab"\\\n\u00e9\u2028\U0001f600', min_size=60, max_size=400),
    lambda children: st.lists(children, max_size=6) | st.dictionaries(texts, children, max_size=6),
    max_leaves=30,
)


def _round_trip(codec: DocumentCodec, tenant: str, text: str, *, shareable: bool) -> str:
    encoded = codec.encode(tenant, text, shareable=shareable)
    return codec.decode(tenant, encoded.text, dict(encoded.shared), WHERE, 0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=json_values, shareable=st.booleans(), sealed=st.booleans())
def test_every_document_reads_back_as_written(value: Any, shareable: bool, sealed: bool) -> None:
    codec = DocumentCodec(threshold=64, encryption_keys=[KEY_A] if sealed else None)
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert _round_trip(codec, "tenant", text, shareable=shareable) == text


def test_a_short_document_stays_plain_json_unless_sealed() -> None:
    text = '{"type":"input","text":"hello"}'
    assert DocumentCodec().encode("", text) == (text, ())
    sealed = DocumentCodec(encryption_keys=[KEY_A]).encode("", text).text
    assert sealed.startswith(MARK + "e") and "hello" not in sealed


def test_a_long_string_is_shared_and_its_document_compressed() -> None:
    output = "def main():\n    return 42\n" * 200
    text = orjson.dumps({"type": "tool_result", "call_id": "c1", "output": output}).decode()
    codec = DocumentCodec()
    encoded = codec.encode("", text, shareable=True)
    assert encoded.text.startswith(SHARED_MARK) and "return 42" not in encoded.text
    [(digest, value)] = encoded.shared
    assert value == orjson.dumps(output).decode()
    assert digest == hashlib.sha256(value.encode()).hexdigest()
    assert references(encoded.text) == [digest]
    # Not shareable (a head, a snapshot): compressed in place.
    inline = codec.encode("", text)
    assert inline.shared == () and inline.text.startswith(MARK + "z")
    assert len(inline.text) < len(text) / 5


def test_long_strings_written_ascii_escaped_are_shared_too() -> None:
    """A document the standard library wrote (non-ASCII escaped, its default) shares its
    long strings like one orjson wrote; one written otherwise still reads back exactly,
    what was not found left in place."""
    outputs = {f"k{i}": f"é{i} " + "lorem ipsum " * 200 for i in range(40)}
    codec = DocumentCodec()
    for text in (json.dumps(outputs), orjson.dumps(outputs).decode()):
        encoded = codec.encode("", text, shareable=True)
        assert len(encoded.shared) == len(outputs)
        assert codec.decode("", encoded.text, dict(encoded.shared)) == text
    # Slashes escaped (as some encoders write them): found neither way, kept in place.
    slashed = json.dumps({"a": "x/" * 2000, "b": "é/" * 2000}).replace("/", "\\/")
    encoded = codec.encode("", slashed, shareable=True)
    assert encoded.shared == ()
    assert codec.decode("", encoded.text, {}) == slashed


def test_text_that_does_not_compress_is_kept_as_it_is() -> None:
    blob = base64.b64encode(random.Random(1).randbytes(3000)).decode()
    noise = orjson.dumps({"blob": blob}).decode()
    assert DocumentCodec(threshold=64).encode("", noise) == (noise, ())


def test_a_document_stays_compressed_only_when_that_halves_it() -> None:
    rng = random.Random(2)
    prose = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz  ") for _ in range(3000))
    code = "def main():\n    return 42\n" * 120
    plain, sealing = DocumentCodec(), DocumentCodec(encryption_keys=[KEY_A])
    for value, form in ((prose, ""), (code, "z")):
        text = orjson.dumps({"type": "assistant", "text": value}).decode()
        stored = plain.encode("", text).text
        assert stored.startswith(f"{MARK}z\x1f") if form else stored == text
        sealed = sealing.encode("", text).text
        assert sealed.startswith(f"{MARK}{form}e\x1f")
        assert sealing.decode("", sealed, {}) == text


def test_sealed_documents_open_inline_from_text_or_utf8_bytes() -> None:
    codec = DocumentCodec(threshold=64, encryption_keys=[KEY_A])
    short = orjson.dumps({"text": "caf\u00e9 \U0001f600"}).decode()
    long = orjson.dumps({"output": "private " * 40, "n": 1}).decode()
    shared_one = codec.encode("t", long, shareable=True)
    sealed = codec.encode("t", short).text
    stored = [sealed.encode(), sealed, shared_one.text, None]
    codec.decode_at("t", stored, [0, 1, 2], dict(shared_one.shared), WHERE)
    # Bytes come back as the document's UTF-8 (for the JSON reader), text as text.
    assert stored == [short.encode(), short, long, None]
    flags, key_id, refs, body = sealed[1:].split("\x1f")
    altered = f"{MARK}{flags}\x1f{key_id}\x1f{refs}\x1f{body[:-6]}AAAA{body[-2:]}"
    for form in (altered, altered.encode()):
        with pytest.raises(EncryptionKeyError) as caught:
            codec.decode_at("t", [sealed, form], [0, 1], {}, WHERE)
        assert caught.value.row == {"session_id": "s", "index": 1}
    with pytest.raises(EncryptionKeyError):
        DocumentCodec(encryption_keys=[KEY_B]).decode_at("t", [sealed.encode()], [0], {}, WHERE)


def test_compression_off_writes_plain_json_and_still_reads_every_form() -> None:
    text = orjson.dumps({"output": "abc " * 1000}).decode()
    stored = DocumentCodec().encode("", text, shareable=True)
    plain = DocumentCodec(compression=False)
    assert plain.encode("", text, shareable=True) == (text, ())
    assert plain.decode("", stored.text, dict(stored.shared)) == text


def test_keys_rotate_the_first_seals_every_one_opens() -> None:
    text = orjson.dumps({"secret": "the launch code is 0000"}).decode()
    old = DocumentCodec(encryption_keys=[KEY_A]).encode("t", text).text
    rotated = DocumentCodec(encryption_keys=[KEY_B, KEY_A])
    assert rotated.decode("t", old, {}) == text
    assert not rotated.is_current("t", old)
    assert rotated.is_current("t", rotated.encode("t", text).text)
    with pytest.raises(EncryptionKeyError) as caught:
        DocumentCodec(encryption_keys=[KEY_B]).decode("t", old, {}, WHERE, 3)
    assert caught.value.key_id == old.split("\x1f")[1]
    assert caught.value.row == {"session_id": "s", "index": 3}
    assert caught.value.table == "lovia_messages"
    with pytest.raises(EncryptionKeyError):
        DocumentCodec().decode("t", old, {}, WHERE, 0)


def test_a_sealed_document_opens_only_for_its_tenant_and_unaltered() -> None:
    codec = DocumentCodec(threshold=64, encryption_keys=[KEY_A])
    text = orjson.dumps({"output": "private " * 40, "n": 1}).decode()
    encoded = codec.encode("alice", text, shareable=True)
    shared = dict(encoded.shared)
    with pytest.raises(EncryptionKeyError):
        codec.decode("bob", encoded.text, shared, WHERE, 0)
    flags, key_id, refs, body = encoded.text[1:].split("\x1f")
    flipped = body[:10] + ("A" if body[10] != "A" else "B") + body[11:]
    for altered in (
        f"{MARK}{flags}\x1f{key_id}\x1f{refs}\x1f{flipped}",
        f"{MARK}{flags}\x1f{key_id}\x1f{refs.replace(':', ':1', 1)}\x1f{body}",
    ):
        with pytest.raises(EncryptionKeyError):
            codec.decode("alice", altered, shared, WHERE, 0)
    # A shared value is sealed too, under a digest that is no plain hash of it.
    [(digest, value)] = encoded.shared
    assert digest != hashlib.sha256(value.encode()).hexdigest()
    packed = codec.pack("alice", digest, value)
    assert b"private" not in packed
    assert codec.unpack("alice", digest, packed) == value
    with pytest.raises(EncryptionKeyError):
        codec.unpack("bob", digest, packed)


def test_a_key_provider_gives_each_tenant_its_keys() -> None:
    keys = {"alice": [KEY_A], "bob": [KEY_B]}
    asked: list[str] = []

    def provider(tenant: str) -> list[str]:
        asked.append(tenant)
        return keys[tenant]

    codec = DocumentCodec(encryption_keys=provider)
    text = '{"a":1}'
    sealed = codec.encode("alice", text).text
    assert codec.decode("alice", sealed, {}) == text
    assert codec.encode("alice", text).text.split("\x1f")[1] == sealed.split("\x1f")[1]
    assert asked == ["alice"]  # asked once per tenant
    with pytest.raises(EncryptionKeyError):
        codec.decode("bob", sealed, {}, WHERE, 0)
    with pytest.raises(UserError, match="tenant 'carol'"):
        codec.encode("carol", text)


@pytest.mark.parametrize(
    "stored",
    [
        "\x01q\x1f\x1f\x1f{}",
        "\x01z\x1f\x1f\x1fnot base64!",
        "\x01z\x1f\x1f\x1f" + "aGVsbG8=",  # base64, not zlib
        "\x01r\x1f\x1fdeadbeef:0\x1f{}",  # names a value not stored
        "\x01",
    ],
)
def test_a_damaged_document_is_a_stored_value_error_naming_its_row(stored: str) -> None:
    with pytest.raises(StoredValueError) as caught:
        DocumentCodec().decode("", stored, {}, WHERE, 7)
    assert caught.value.row == {"session_id": "s", "index": 7}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"compression": "yes"}, "compression is True or False"),
        ({"threshold": 10}, "at least 64"),
        ({"encryption_keys": []}, "empty"),
        ({"encryption_keys": KEY_A}, "a list of keys"),
        ({"encryption_keys": [b"short"]}, "32 bytes"),
        ({"encryption_keys": ["not*base64"]}, "not base64"),
        ({"encryption_keys": [KEY_A, KEY_A]}, "twice"),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError, match=message):
        DocumentCodec(**options)


def test_keys_without_the_cryptography_package_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "cryptography", None)
    with pytest.raises(UserError, match=r"lovia-store\[encryption\]"):
        DocumentCodec(encryption_keys=[KEY_A])


# -- shared values in the database --------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres", "mariadb"])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "stored.sqlite3")
        return
    async with migrated_server_database(request.param) as url:
        yield url


async def _counts(db: Database) -> list[tuple[str, str, int]]:
    return list(
        await db.read(
            lambda conn: [
                tuple(row)
                for row in conn.execute(
                    select(contents.c.tenant, contents.c.digest, contents.c.refs).order_by(
                        contents.c.tenant, contents.c.digest
                    )
                )
            ]
        )
    )


@pytest.mark.parametrize("sealed", [False, True], ids=["compressed", "encrypted"])
async def test_a_value_is_stored_once_and_deleted_with_its_last_reference(
    database_url: str, sealed: bool
) -> None:
    keys = [KEY_A] if sealed else None
    output = "line of a file\n" * 300
    doc = orjson.dumps({"type": "tool_result", "call_id": "c", "output": output}).decode()
    other = orjson.dumps({"type": "tool_result", "call_id": "d", "output": output}).decode()
    async with Database(database_url, encryption_keys=keys) as db:
        stored = await db.write(
            lambda conn: store_documents(conn, "t", [doc, other, None, "{}"], shareable=True)
        )
        [(tenant, _, refs)] = await _counts(db)
        assert (tenant, refs) == ("t", 2)
        assert all(output not in text for text in stored if text)
        read = await db.read(lambda conn: read_documents(conn, "t", stored, WHERE))
        assert read == [doc, other, None, "{}"]
        # The same value in another tenant is that tenant's own row.
        await db.write(lambda conn: store_documents(conn, "u", [doc], shareable=True))
        assert [(t, r) for t, _, r in await _counts(db)] == [("t", 2), ("u", 1)]
        # A copy (a fork) counts its references once more.
        await db.write(lambda conn: retain_references(conn, "t", stored[:1]))
        assert [(t, r) for t, _, r in await _counts(db)] == [("t", 3), ("u", 1)]
        await db.write(lambda conn: release_documents(conn, "t", stored[:2]))
        assert [(t, r) for t, _, r in await _counts(db)] == [("t", 1), ("u", 1)]
        await db.write(lambda conn: release_documents(conn, "t", stored[:1]))
        assert [t for t, _, _ in await _counts(db)] == ["u"]
    # A reference whose value is gone (a release too many: damage) is named. (A new
    # Database: one that read or wrote the value keeps it a while, by its digest.)
    async with Database(database_url, encryption_keys=keys) as db:
        with pytest.raises(StoredValueError, match="not stored"):
            await db.read(lambda conn: read_documents(conn, "t", stored, WHERE))


async def test_a_release_rolled_back_keeps_the_value(database_url: str) -> None:
    doc = orjson.dumps({"output": "x" * 5000}).decode()
    async with Database(database_url) as db:
        stored = await db.write(lambda conn: store_documents(conn, "", [doc], shareable=True))

        def release_then_fail(conn: Any) -> None:
            release_documents(conn, "", stored)
            raise RuntimeError("the change that dropped the reference failed")

        with pytest.raises(RuntimeError):
            await db.write(release_then_fail)
        assert [r for _, _, r in await _counts(db)] == [1]
        assert await db.read(lambda conn: read_documents(conn, "", stored)) == [doc]


# -- exact whatever wrote the text and whatever the options -------------------------

AROUND = (62, 63, 64, 65, 66, 98, 99, 100, 101, 2045, 2046, 2047, 2048, 2049, 2050)
"""String lengths at and around the thresholds below (64, 100, the default 2,048)."""
TRICKY = '"\\\n\t\x00\x01\x1f\x7f/\u00e9\u2028\u2029\ufeff\U0001f600ab '
"""What JSON escapes (quotes, backslashes, control characters), what it may or may not
(U+2028, DEL, a solidus), and what is longer in UTF-8 or UTF-16 (non-BMP)."""


@st.composite
def long_strings(draw: st.DrawFn) -> str:
    """A string at or around a threshold, of a repeated piece of ``TRICKY`` (compresses)
    or of any of its characters (may not)."""
    size = draw(st.sampled_from(AROUND))
    piece = draw(st.text(st.sampled_from(TRICKY), min_size=1, max_size=size))
    return (piece * (size // len(piece) + 1))[:size]


@st.composite
def documents(draw: st.DrawFn) -> Any:
    """A JSON value holding a few long strings, each maybe several times: in nested
    lists, as object values and as object keys, beside integers past 64 bits (and past
    a double's range), floats and short strings."""
    pool = draw(st.lists(long_strings(), min_size=1, max_size=3))
    leaves = st.sampled_from(pool) | st.none() | st.booleans() | st.text(max_size=5)
    leaves |= st.sampled_from([2**64, -(2**63) - 1, 10**400, 0.1, -1.5e300, 5e-324])
    keys = st.sampled_from(pool) | st.text(st.sampled_from(TRICKY), max_size=4)
    value = draw(
        st.recursive(
            leaves,
            lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
            max_leaves=12,
        )
    )
    return {"output": pool[0], "raw": value}  # a tool result's shape


WRITERS: dict[str, Any] = {
    "compact": lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":")),
    "ascii": json.dumps,  # \\u escapes: long strings not found as orjson writes them
    "zett": lambda v: json.dumps(v, ensure_ascii=False, separators=(", ", ": ")),
    "indented": lambda v: json.dumps(v, ensure_ascii=False, indent=1, sort_keys=True),
}
"""How a document's text may have been written: ours, zett-agent's, another program's."""
CODEC_OPTIONS = st.fixed_dictionaries(
    {
        "compression": st.booleans(),
        "threshold": st.sampled_from([64, 100, DEFAULT_THRESHOLD]),
        "encryption_keys": st.sampled_from([None, [KEY_A], [KEY_B, KEY_A]]),
    }
)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=list(HealthCheck))
@given(
    value=documents(),
    writer=st.sampled_from(sorted(WRITERS)),
    options=CODEC_OPTIONS,
    reader_options=CODEC_OPTIONS,
    shareable=st.booleans(),
)
def test_a_document_reads_back_exactly_whatever_wrote_it_and_whatever_the_options(
    value: Any,
    writer: str,
    options: dict[str, Any],
    reader_options: dict[str, Any],
    shareable: bool,
) -> None:
    """Exact round trips of long strings at and around each threshold, with every JSON
    escape, repeated in one document (in lists, as values, as keys), beside integers
    no double holds; read by the codec that wrote them, and by another Database's
    codec with other options (its keys open what it holds the key of, else the read
    is an EncryptionKeyError)."""
    text = WRITERS[writer](value)
    codec = DocumentCodec(**options)
    encoded = codec.encode("t", text, shareable=shareable)
    shared = dict(encoded.shared)
    assert len(encoded.shared) == len(references(encoded.text))
    assert all(json.loads(literal) is not None for literal in shared.values())  # literals
    assert codec.decode("t", encoded.text, shared, WHERE, 0) == text
    inline = [encoded.text, encoded.text.encode()]
    codec.decode_at("t", inline, [0], shared, WHERE)
    assert inline[0] == text
    if encoded.text.startswith(f"{MARK}e\x1f"):  # as SQLite reads it: UTF-8 bytes
        codec.decode_at("t", inline, [1], shared, WHERE)
        assert inline[1] == text.encode()
    reader = DocumentCodec(**reader_options)
    sealing = options["encryption_keys"][0] if options["encryption_keys"] else None
    assert encoded.text.startswith(MARK) or sealing is None
    if sealing is None or sealing in (reader_options["encryption_keys"] or []):
        assert reader.decode("t", encoded.text, shared, WHERE, 0) == text
    else:
        with pytest.raises(EncryptionKeyError) as caught:
            reader.decode("t", encoded.text, shared, WHERE, 4)
        assert caught.value.row == {"session_id": "s", "index": 4}
