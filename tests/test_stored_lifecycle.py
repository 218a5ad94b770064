"""The lifecycle operations over stored documents (issue 33): compressed, shared once,
encrypted.

Copy moves a deployment between databases that store documents differently
(plain, compressed, encrypted, encrypted under another key), each way, verified
row by row; an export is plain JSON whatever the source, equal to a plain
database's; an import stores as the importing Database says; a prune releases the
references of what it deletes; stats report the shared values and check their
reference counts (a broken count and a dangling reference are named). On SQLite,
PostgreSQL and MariaDB. The rows are written through the contents API
(``stored_support``), so these tests stand on the codec and the lifecycle alone.
"""

from __future__ import annotations

import contextlib
import gzip
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, delete, select, update

from helpers import a_run
from lovia_store import (
    Database,
    InputEntry,
    SQLSession,
    SQLSessionStorage,
    entry_to_dict,
    upgrade,
)
from lovia_store.db import tables
from lovia_store.errors import EncryptionKeyError
from lovia_store.lifecycle import (
    copy_database,
    counter_mismatches,
    export,
    import_file,
    prune,
    rekey,
    stored,
)
from lovia_store.lifecycle.stats import database_stats
from stored_support import (
    DOCUMENTS,
    FORMS,
    KEY1,
    KEY2,
    KINDS,
    SECRET,
    SHAREABLE,
    assert_counts_true,
    cli,
    contents_of,
    database,
    decoded_rows,
    encoded,
    insert_world,
    plain_world,
    shared_bytes,
    stored_texts,
    world,
    write_world,
)


async def assert_stored_as(db: Database, form: str) -> None:
    """Every document is stored as ``form`` says: in clear as written (plain), long ones
    compressed (compressed), none in clear (encrypted); the shared values likewise."""
    texts = await stored_texts(db)
    assert texts
    values = await shared_bytes(db)
    if form == "plain":
        assert not any(encoded(text) for _, _, text in texts)
        assert values == []
        return
    if form == "compressed":
        assert any(encoded(text) for _, _, text in texts)
        assert all(encoded(text) for _, _, text in texts if len(text) > 200)
        assert values and all(not v.startswith(b"e") for v in values)
        return
    assert all(encoded(text) and SECRET not in text for _, _, text in texts), form
    assert values and all(v.startswith(b"e") and SECRET.encode() not in v for v in values)


async def assert_same_world(db: Database, *tenants: str) -> None:
    assert await decoded_rows(db) == plain_world(*tenants)
    await assert_counts_true(db)
    assert await counter_mismatches(db, all_tenants=True) == []


# -- copy ------------------------------------------------------------------------------


CHAIN = ["plain", "encrypted", "compressed", "encrypted2", "plain"]
"""Each step copies the previous database into a new one stored this way."""


@pytest.mark.parametrize("kind", KINDS)
async def test_copy_moves_every_row_between_plain_compressed_and_encrypted_databases(
    kind: str, tmp_path: Path
) -> None:
    """plain -> encrypted -> compressed -> encrypted (another key) -> plain: every copy
    verified by its report and row by row (every session, message, segment, snapshot,
    run, entry, effect and lease decoded and equal to what was written), each
    database stored as its own options say, every reference counted; a second copy
    finds everything there (decoded rows compared), counting nothing twice."""
    async with contextlib.AsyncExitStack() as stack:
        urls = [
            await stack.enter_async_context(database(kind, tmp_path, f"step{step}"))
            for step in range(len(CHAIN))
        ]
        async with Database(urls[0], **FORMS[CHAIN[0]]) as first:
            await write_world(first, "", "acme")
            await assert_stored_as(first, "plain")
        for step in range(1, len(CHAIN)):
            before, after = CHAIN[step - 1], CHAIN[step]
            async with (
                Database(urls[step - 1], **FORMS[before]) as src,
                Database(urls[step], **FORMS[after]) as dst,
            ):
                report = await copy_database(src, dst, all_tenants=True)
                assert report.ok, report.differing
                assert report.inserted["message"] == 24 and report.inserted["tool_effect"] == 4
                shared = await contents_of(dst)
                again = await copy_database(src, dst, all_tenants=True)
                assert again.ok and not sum(again.inserted.values())
                assert again.unchanged["message"] == 24
                assert await contents_of(dst) == shared
                await assert_stored_as(dst, after.rstrip("2"))
                await assert_same_world(dst, "", "acme")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_copy_needs_the_sources_key_and_names_the_row(kind: str, tmp_path: Path) -> None:
    async with (
        database(kind, tmp_path, "src") as src_url,
        database(kind, tmp_path, "dst") as dst_url,
    ):
        async with Database(src_url, **FORMS["encrypted"]) as src:
            await write_world(src)
        async with Database(src_url, **FORMS["encrypted2"]) as wrong, Database(dst_url) as dst:
            with pytest.raises(EncryptionKeyError) as raised:
                await copy_database(wrong, dst)
        assert raised.value.table in {"lovia_messages", "lovia_session_runs", "lovia_snapshots"}
        assert raised.value.row and raised.value.key_id


# -- export and import -----------------------------------------------------------------


def lines(path: Path) -> list[dict[str, Any]]:
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("kind", KINDS)
async def test_an_encrypted_database_exports_the_plain_json_a_plain_one_does(
    kind: str, tmp_path: Path
) -> None:
    async with (
        database(kind, tmp_path, "plain") as plain_url,
        database(kind, tmp_path, "sealed") as sealed_url,
    ):
        async with Database(plain_url, **FORMS["plain"]) as plain:
            await write_world(plain)
            await export(plain, tmp_path / "plain.jsonl")
        async with Database(sealed_url, **FORMS["encrypted"]) as sealed:
            await write_world(sealed)
            await assert_stored_as(sealed, "encrypted")
            report = await export(sealed, tmp_path / "sealed.jsonl.gz")
        assert report.counts["message"] == 12
        mine, theirs = lines(tmp_path / "plain.jsonl"), lines(tmp_path / "sealed.jsonl.gz")
        assert mine[0].pop("exported_at") and theirs[0].pop("exported_at")
        assert [r for r in mine if r["record"] != "header"] == [
            r for r in theirs if r["record"] != "header"
        ]
        raw = (tmp_path / "sealed.jsonl.gz").read_bytes()
        text = gzip.decompress(raw).decode()
        assert "\x01" not in text and text.count(SECRET) >= 12 * 4
        # exactly the text written: each message's entry as it went in
        written = plain_world()["lovia_messages"]
        exported = [r for r in theirs if r["record"] == "message"]
        assert [r["entry_json"] for r in exported] == [r["entry_json"] for r in written]
        # and the key is needed: without it, nothing is written in its place
        async with Database(sealed_url) as keyless:
            with pytest.raises(EncryptionKeyError):
                await export(keyless, tmp_path / "nokey.jsonl")
        assert not (tmp_path / "nokey.jsonl").exists()


@pytest.mark.parametrize("kind", KINDS)
async def test_an_import_stores_as_the_importing_database_says(kind: str, tmp_path: Path) -> None:
    async with (
        database(kind, tmp_path, "plain") as plain_url,
        database(kind, tmp_path, "sealed") as sealed_url,
    ):
        async with Database(plain_url, **FORMS["plain"]) as plain:
            await write_world(plain, "", "acme")
            await export(plain, tmp_path / "all.jsonl", all_tenants=True)
        async with Database(sealed_url, **FORMS["encrypted"]) as sealed:
            report = await import_file(sealed, tmp_path / "all.jsonl", all_tenants=True)
            assert report.inserted["message"] == 24 and report.inserted["tool_effect"] == 4
            await assert_stored_as(sealed, "encrypted")
            await assert_same_world(sealed, "", "acme")
            shared = await contents_of(sealed)
            again = await import_file(sealed, tmp_path / "all.jsonl", all_tenants=True)
            assert not again.changed and again.unchanged["message"] == 24
            assert await contents_of(sealed) == shared  # nothing counted twice
            # a dry run compares decoded rows too: all there, nothing to insert
            dry = await import_file(sealed, tmp_path / "all.jsonl", all_tenants=True, dry_run=True)
            assert not dry.changed and dry.unchanged["run_entry"] == 8
        async with Database(sealed_url, **FORMS["encrypted2"]) as wrong:
            with pytest.raises(EncryptionKeyError):
                await import_file(wrong, tmp_path / "all.jsonl", all_tenants=True)


@pytest.mark.parametrize("kind", KINDS)
async def test_integers_past_a_doubles_range_export_and_import_exactly(
    kind: str, tmp_path: Path
) -> None:
    """The stores keep an integer of any size exactly (a run's meta, a message's metadata
    and tags); its export, written from an encrypted database, imports into a compressed
    one and reads back the same numbers, beside long strings (shared, compressed)."""
    big = 10**400  # past a double's range: orjson does not read it
    text = f"{SECRET} " + "a long value, " * 200
    entry = InputEntry(role="user", content=text)
    async with (
        database(kind, tmp_path, "sealed") as sealed_url,
        database(kind, tmp_path, "packed") as packed_url,
    ):
        async with Database(sealed_url, **FORMS["encrypted"]) as sealed:
            await SQLSession(sealed).append("s", [entry], run_id="r", meta={"n": big, "t": text})
            await SQLSessionStorage(sealed).append(
                "z", "q", entry, metadata={"n": -big, "t": text}, tags={"n": big}
            )
            await export(sealed, tmp_path / "big.jsonl")
        async with Database(packed_url, **FORMS["compressed"]) as packed:
            report = await import_file(packed, tmp_path / "big.jsonl")
            assert report.inserted["message"] == 2 and report.inserted["segment"] == 1
            [segment] = await SQLSession(packed).segments("s")
            assert segment.meta == {"n": big, "t": text}
            [record] = await SQLSessionStorage(packed).list_raw_messages("z", limit=5)
            assert (record.metadata, record.tags) == ({"n": -big, "t": text}, {"n": big})
            await export(packed, tmp_path / "again.jsonl")
        assert lines(tmp_path / "again.jsonl")[1:] == lines(tmp_path / "big.jsonl")[1:]


# -- prune -----------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["compressed", "encrypted"])
@pytest.mark.parametrize("kind", KINDS)
async def test_prune_releases_the_references_of_what_it_deletes(
    kind: str, form: str, tmp_path: Path
) -> None:
    async with database(kind, tmp_path, "db") as url, Database(url, **FORMS[form]) as db:
        await write_world(db, "", "acme")
        before = await contents_of(db)
        assert before and all(refs >= 1 for refs in before.values())
        # s-0 (idle for 30 days) and its run go, in the default tenant only
        report = await prune(db, older_than=timedelta(days=7))
        assert report.sessions == ["s-0"] and report.runs == ["run-0"]
        await assert_counts_true(db)
        after = await contents_of(db)
        assert sum(after.values()) < sum(before.values())
        assert {k: v for k, v in after.items() if k[0] == "acme"} == {
            k: v for k, v in before.items() if k[0] == "acme"
        }
        assert await counter_mismatches(db, all_tenants=True) == []
        # everything, every tenant: nothing is left referred to, so nothing is left
        await prune(db, keep_last=0, checkpoints_older_than=timedelta(0), all_tenants=True)
        assert await contents_of(db) == {}
        assert await stored_texts(db) == []


# -- stats and check -------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_stats_report_the_shared_values_per_tenant(kind: str, tmp_path: Path) -> None:
    async with database(kind, tmp_path, "db") as url, Database(url, **FORMS["encrypted"]) as db:
        await write_world(db, "", "acme")
        shared = await contents_of(db)
        data = await shared_bytes(db)
        stats = await database_stats(db, all_tenants=True)
        assert stats.contents.values == len(shared)
        assert stats.contents.references == sum(shared.values())
        assert stats.contents.stored_bytes == sum(len(d) for d in data)
        assert 0 < stats.contents.stored_bytes < stats.contents.text_chars
        by_tenant = {t.tenant: t.contents for t in stats.tenants}
        assert set(by_tenant) == {"", "acme"}
        for tenant, measured in by_tenant.items():
            mine = {d: r for (t, d), r in shared.items() if t == tenant}
            assert measured.values == len(mine) and measured.references == sum(mine.values())
        one = await database_stats(db, tenant="acme")
        assert one.contents == by_tenant["acme"]
        code, out = await cli_json("stats", url, "--all-tenants", "--json")
        assert code == 0 and out["contents"]["values"] == len(shared)
        assert {t["tenant"]: t["contents"]["references"] for t in out["tenants"]} == {
            t: sum(r for (owner, _), r in shared.items() if owner == t) for t in ("", "acme")
        }


async def cli_json(*args: str, env: dict[str, str] | None = None) -> tuple[int, Any]:
    """``lovia-store ARGS`` (in a thread: it runs its own event loop) with ``env`` set
    meanwhile, and its JSON output."""
    code, printed = await cli(*args, env=env)
    return code, json.loads(printed) if printed.strip() else None


@pytest.mark.parametrize("kind", KINDS)
async def test_check_names_a_broken_reference_count_and_a_dangling_reference(
    kind: str, tmp_path: Path
) -> None:
    async with database(kind, tmp_path, "db") as url, Database(url, **FORMS["compressed"]) as db:
        await write_world(db, "", "acme")
        assert await counter_mismatches(db, all_tenants=True) == []
        shared = await contents_of(db)
        (tenant, counted), *_ = sorted(k for k in shared if k[0] == "acme")
        (_, dangling), *_ = sorted(k for k in shared if k[0] == "")
        c = tables.contents.c

        def damage(conn: Connection) -> None:
            conn.execute(
                update(tables.contents)
                .where(c.tenant == tenant, c.digest == counted)
                .values(refs=c.refs + 2)
            )
            conn.execute(delete(tables.contents).where(c.tenant == "", c.digest == dangling))

        await db.write(damage)
        found = await counter_mismatches(db, all_tenants=True)
        assert [(m.table, m.tenant, m.id, m.counter) for m in found] == [
            ("lovia_contents", "", dangling, "refs"),
            ("lovia_contents", "acme", counted, "refs"),
        ]
        gone, broken = found
        assert gone.says == 0 and gone.holds == shared[("", dangling)]
        assert "is not stored" in gone.detail and dangling in gone.detail
        assert broken.says == shared[(tenant, counted)] + 2
        assert broken.holds == shared[(tenant, counted)]
        assert "tenant 'acme'" in broken.detail
        assert await counter_mismatches(db, tenant="acme") == [broken]
        code, out = await cli_json("check", url, "--json")
        assert code == 5 and out["error"] == "CounterMismatchError"
        assert {(m["table"], m["tenant"], m["id"]) for m in out["mismatches"]} == {
            ("lovia_contents", "", dangling),
            ("lovia_contents", "acme", counted),
        }


@pytest.mark.parametrize("kind", KINDS)
async def test_the_check_reads_the_references_of_long_lists(kind: str, tmp_path: Path) -> None:
    """A document naming so many shared values that their list outgrows the head the
    check reads is read whole: its references all count."""
    async with database(kind, tmp_path, "db") as url, Database(url, **FORMS["compressed"]) as db:
        await upgrade(db)
        many = json.dumps({"outputs": [f"{SECRET} {i} " + "x" * 80 for i in range(120)]})
        rows = world("", sessions=1, messages=3)
        for row in rows[tables.tool_effects]:
            row["result_json"] = many
        await db.write(lambda conn: insert_world(conn, rows))
        texts = [t for table, _, t in await stored_texts(db) if table == "lovia_tool_effects"]
        assert len(texts[0].split("\x1f", 3)[2]) > 4096
        await assert_counts_true(db)
        assert await counter_mismatches(db) == []


def test_the_lifecycle_knows_every_document_column_and_the_three_shareable_ones() -> None:
    assert stored.DOCUMENTS == DOCUMENTS
    assert {t: c[0] for t, c in stored.SHAREABLE.items()} == SHAREABLE


# -- the command line ------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_the_commands_open_encrypted_documents_with_the_keys_given(
    kind: str, tmp_path: Path
) -> None:
    """``show`` prints a session stored encrypted (written by the store on an encrypted
    Database), given its key on the command line or in the environment; ``export``
    writes plain JSON from it; ``copy`` moves it into a plain database with each side's
    keys; ``import`` stores a file encrypted. A wrong key exits 5 naming the key."""
    entries = a_run("x", output=f"{SECRET} " * 40)
    async with (
        database(kind, tmp_path, "sealed") as sealed,
        database(kind, tmp_path, "plain") as plain,
        database(kind, tmp_path, "again") as again,
    ):
        async with Database(sealed, **FORMS["encrypted"]) as db:
            await SQLSession(db).append("alice", entries, run_id="r1")
            await write_world(db)  # rows of every table, encrypted
        (key,) = FORMS["encrypted"]["encryption_keys"]
        code, out = await cli_json("show", "alice", sealed, "--encryption-key", key, "--json")
        assert code == 0 and out["runs"][0]["entries"] == [entry_to_dict(e) for e in entries]
        code, out = await cli_json(
            "show", "alice", sealed, "--json", env={"LOVIA_STORE_ENCRYPTION_KEYS": f" {key} "}
        )
        assert code == 0 and out["total_runs"] == 1
        if await alice_encrypted(sealed):  # the store encrypts (issue 33's sessions wiring)
            code, out = await cli_json("show", "alice", sealed, "--json")
            assert code == 5 and out["error"] == "EncryptionKeyError"
            code, out = await cli_json("show", "alice", sealed, "--json", "--encryption-key", KEY2)
            assert code == 5 and out["error"] == "EncryptionKeyError" and out["message"]
        path = tmp_path / "out.jsonl"
        code, out = await cli_json(
            "export", sealed, "-o", str(path), "--json", "--encryption-key", key
        )
        assert code == 0 and out["records"]["message"] == 12 + len(entries)
        assert "\x01" not in path.read_text() and SECRET in path.read_text()
        code, out = await cli_json(
            "copy", sealed, plain, "--source-encryption-key", key, "--no-compression", "--json"
        )
        assert code == 0 and out["status"] == "ok"
        async with Database(plain) as db:
            await assert_stored_as(db, "plain")
        code, out = await cli_json(
            "import", str(path), again, "--json", env={"LOVIA_STORE_ENCRYPTION_KEYS": KEY2}
        )
        assert code == 0 and out["inserted"]["message"] == 12 + len(entries)
        async with Database(again, **FORMS["encrypted2"]) as db:
            texts = await stored_texts(db)
            assert texts and all(encoded(t) and SECRET not in t for _, _, t in texts)
            await assert_counts_true(db)
        code, out = await cli_json("copy", sealed, again, "--json")  # no source key
        assert code == 5 and out["error"] == "EncryptionKeyError"


async def alice_encrypted(url: str) -> bool:
    """Whether the session store wrote alice's entries encrypted."""
    m = tables.messages.c
    async with Database(url) as db:
        texts = await db.read(
            lambda conn: list(
                conn.execute(select(m.entry_json).where(m.session_id == "alice")).scalars()
            )
        )
    return all(encoded(text) for text in texts)


# -- tricky documents through every form -------------------------------------------

TRICKY = '"\\\n\t\x00\x1f\x7f/\u00e9\u2028\U0001f600 '
"""What JSON escapes, what it may or may not, what is longer in UTF-8 or UTF-16."""
SIZES = (2047, 64, 2049, 2046, 65, 2048)
"""Lengths at and around the thresholds the steps use (64 and the default 2,048)."""


def tricky_output(n: int) -> str:
    """One of six outputs (``stored_support.output``'s stand-in: the same one read again
    in several documents), each at or around a threshold, repetitive or not (which
    compresses less), with every kind of escape."""
    size = SIZES[n % 6]
    if n % 3 == 2:
        return "".join(TRICKY[(i * i + n) % len(TRICKY)] for i in range(size))
    return (f"{SECRET} {TRICKY}" * (size // 10 + 1))[:size]


OUTPUTS = len({n % 6 for n in (1, 2, 3, 5, 6, 7)})
"""The distinct outputs of a tenant's world (``output(n)`` of these ``n``)."""
STEPS: list[tuple[str, dict[str, Any]]] = [
    ("write", {}),  # the default Database: threshold 2,048
    ("rekey", {"compression_threshold": 64, "encryption_keys": [KEY1]}),
    ("copy", {"encryption_keys": lambda tenant: [KEY2] if tenant else [KEY1]}),
    ("export", {"compression": False}),
    ("rekey", {"compression_threshold": 64}),
    ("copy", {"compression": False, "encryption_keys": [KEY2]}),
    ("rekey", {"compression_threshold": 64, "encryption_keys": [KEY1, KEY2]}),
    ("export", {"compression_threshold": 64}),
    ("rekey", {"compression": False}),
]
"""Each step writes the database again, into itself (rekey) or another one (copy,
export and import), as the step's options say; ``KEY1, KEY2`` open every one."""


@pytest.mark.parametrize("kind", KINDS)
async def test_long_values_with_every_escape_survive_every_rekey_copy_and_import(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tool outputs at and around each threshold, with every JSON escape, shared by
    several documents of two tenants (one key per tenant in one step), through rekeys
    (to a key, to two, to none, to no compression, in small batches), verified copies
    and export-import round trips: after every step each document reads back exactly,
    every reference is counted and the counters agree."""
    monkeypatch.setattr("stored_support.output", tricky_output)
    async with contextlib.AsyncExitStack() as stack:
        urls = [
            await stack.enter_async_context(database(kind, tmp_path, f"step{step}"))
            for step in range(len(STEPS))
        ]
        url, options = urls[0], STEPS[0][1]
        async with Database(url, **options) as db:
            await write_world(db, "", "acme")
        for step, (action, wanted) in enumerate(STEPS[1:], start=1):
            if action == "rekey":
                async with Database(url, **wanted) as db:
                    await rekey(db, all_tenants=True, decryption_keys=[KEY1, KEY2], batch_size=3)
            else:
                async with Database(url, **options) as src, Database(urls[step], **wanted) as db:
                    if action == "copy":
                        report = await copy_database(src, db, all_tenants=True)
                        assert report.ok, report.differing
                    else:
                        await export(src, tmp_path / f"{step}.jsonl", all_tenants=True)
                        await import_file(db, tmp_path / f"{step}.jsonl", all_tenants=True)
                url = urls[step]
            options = wanted
            async with Database(url, **options) as db:
                assert await decoded_rows(db) == plain_world("", "acme"), (step, action)
                await assert_counts_true(db)
                assert await counter_mismatches(db, all_tenants=True) == []
                if options.get("compression_threshold") == 64:  # every output shared
                    assert len(await contents_of(db)) == 2 * OUTPUTS
        async with Database(url, **options) as db:  # the last step wrote plain JSON text
            assert await contents_of(db) == {}
            assert not any(encoded(text) for _, _, text in await stored_texts(db))
