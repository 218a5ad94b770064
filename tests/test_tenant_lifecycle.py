"""Tenants through the lifecycle operations and the command line (issue 32, item 5).

Two tenants, ``acme`` and ``beta``, hold the same session and run ids in one
database, each with rows of its own (their text names the tenant). Every
operation given one tenant touches and shows only that tenant; ``all_tenants``
covers both and keeps them apart through export, import and copy. The rows are
written with Core, so these tests stand on the lifecycle code alone.
"""

from __future__ import annotations

import contextlib
import gzip
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import Connection, func, select, update

from backends import migrated_server_database
from helpers import a_run
from lovia_store import (
    Database,
    InMemoryCheckpointer,
    InMemorySession,
    RunHead,
    UserError,
    upgrade,
)
from lovia_store.cli.app import main
from lovia_store.db import tables
from lovia_store.entries import AssistantTextEntry, InputEntry, ToolResultEntry, entry_to_dict
from lovia_store.lifecycle import (
    copy_database,
    counter_mismatches,
    export,
    import_file,
    prune,
)
from lovia_store.lifecycle.stats import database_stats
from lovia_store.lifecycle.verify import summarize

TENANTS = ("acme", "beta")
KINDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", id="mariadb", marks=pytest.mark.mysql),
]
NOW = datetime.now(UTC).replace(microsecond=0)
OLD = NOW - timedelta(days=30)


@contextlib.asynccontextmanager
async def fresh(kind: str, tmp_path: Path, name: str) -> AsyncIterator[str]:
    """A new SQLite file, or a migrated, empty server database of this test's own."""
    if kind == "sqlite":
        yield str(tmp_path / f"{name}.sqlite3")
        return
    async with migrated_server_database(kind) as url:
        yield url


def _json(entry: Any) -> str:
    return orjson.dumps(entry_to_dict(entry)).decode()


def _rows(tenant: str) -> dict[Any, list[dict[str, Any]]]:
    """One tenant's rows: sessions s-old (30 days idle) and s-new, a completed run of
    s-new with entries, a tool effect and a lease; the same ids in every tenant."""
    rows: dict[Any, list[dict[str, Any]]] = {t: [] for t in tables.metadata.sorted_tables}
    for sid, at, n in (("s-old", OLD, 2), ("s-new", NOW, 3)):
        rows[tables.sessions].append(
            {
                "tenant": tenant,
                "session_id": sid,
                "title": f"{tenant} {sid}",
                "last_sequence": n,
                "message_count": n,
                "run_count": 1,
                "snapshot_version": 1,
                "created_at": at,
                "updated_at": at,
            }
        )
        for seq in range(1, n + 1):
            entry: Any = InputEntry(role="user", content=f"{tenant} says {seq}")
            kind = "input"
            if seq == n:
                entry = ToolResultEntry(call_id="c1", name="t", output=f"{tenant} " * (seq * 10))
                kind = "tool_result"
            rows[tables.messages].append(
                {
                    "tenant": tenant,
                    "session_id": sid,
                    "sequence": seq,
                    "request_id": f"q{seq}",
                    "run_id": "r1",
                    "entry_type": kind,
                    "call_id": "c1" if kind == "tool_result" else None,
                    "entry_json": _json(entry),
                    "created_at": at,
                }
            )
        rows[tables.session_runs].append(
            {
                "tenant": tenant,
                "session_id": sid,
                "run_id": "r1",
                "position": 1,
                "first_sequence": 1,
                "entry_count": n,
                "created_at": at,
            }
        )
        rows[tables.snapshots].append(
            {
                "tenant": tenant,
                "session_id": sid,
                "version": 1,
                "snapshot_id": f"snap-{tenant}",
                "compacted_through_sequence": 1,
                "summary_json": orjson.dumps({"content": f"{tenant} summary"}).decode(),
                "created_at": at,
                "updated_at": at,
            }
        )
    head = {"agent_name": f"{tenant}-agent", "status": "completed", "output": tenant}
    rows[tables.run_heads].append(
        {
            "tenant": tenant,
            "run_id": "r1",
            "status": "completed",
            "head_json": orjson.dumps(head).decode(),
            "entry_count": 2,
            "created_at": OLD,
            "updated_at": OLD,
            "session_id": "s-new",
        }
    )
    for position in (1, 2):
        text = AssistantTextEntry(content=f"{tenant} answer {position}")
        rows[tables.run_entries].append(
            {"tenant": tenant, "run_id": "r1", "position": position, "entry_json": _json(text)}
        )
    result = ToolResultEntry(call_id="c1", name="t", output=f"{tenant} effect")
    rows[tables.tool_effects].append(
        {
            "tenant": tenant,
            "run_id": "r1",
            "call_id": "c1",
            "tool_name": "t",
            "started_at": OLD,
            "result_json": _json(result),
        }
    )
    rows[tables.run_leases].append(
        {
            "tenant": tenant,
            "run_id": "r1",
            "token": 1,
            "lease_id": f"lease-{tenant}",
            "holder": tenant,
            "expires_ms": 0,
        }
    )
    return rows


async def populate(url: str, tenants: tuple[str, ...] = TENANTS) -> None:
    async with Database(url) as db:
        await upgrade(db)

        def work(conn: Connection) -> None:
            for tenant in tenants:
                for table, rows in _rows(tenant).items():
                    if rows:
                        conn.execute(table.insert(), rows)

        await db.write(work)


async def table_rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, in key order: to compare databases whole."""
    async with Database(url, verify_only=True) as db:

        def work(conn: Connection) -> dict[str, list[tuple[Any, ...]]]:
            found = {}
            for table in tables.metadata.sorted_tables:
                if table is tables.schema_versions:
                    continue
                order = list(table.primary_key.columns)
                found[table.name] = [tuple(r) for r in conn.execute(select(table).order_by(*order))]
            return found

        return await db.read(work)


async def tenants_of(url: str) -> dict[str, set[str]]:
    """Which tenants each table holds rows of."""
    return {
        name: {row[0] for row in rows} for name, rows in (await table_rows(url)).items() if rows
    }


def only(rows: dict[str, list[tuple[Any, ...]]], tenant: str) -> dict[str, list[tuple[Any, ...]]]:
    return {name: [r for r in found if r[0] == tenant] for name, found in rows.items()}


def renamed(
    rows: dict[str, list[tuple[Any, ...]]], tenant: str
) -> dict[str, list[tuple[Any, ...]]]:
    return {name: [(tenant, *r[1:]) for r in found] for name, found in rows.items()}


def file_records(path: Path) -> list[dict[str, Any]]:
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("kind", KINDS)
async def test_export_and_import_move_one_tenant_or_every_tenant_apart(
    kind: str, tmp_path: Path
) -> None:
    async with fresh(kind, tmp_path, "src") as src, fresh(kind, tmp_path, "dst") as dst:
        await populate(src)
        before = await table_rows(src)
        one = tmp_path / "acme.jsonl"
        report = await export(src, one, tenant="acme")
        assert report.tenant == "acme" and report.counts["session"] == 2
        records = file_records(one)
        assert records[0]["tenant"] == "acme" and "tenants" not in records[0]
        assert {r["tenant"] for r in records[1:-1]} == {"acme"}
        assert not any("beta" in json.dumps(r) for r in records)
        # The default tenant holds nothing here: an export without a choice is empty,
        # never every customer's.
        empty = await export(src, tmp_path / "default.jsonl")
        assert empty.tenant == "" and empty.records == 0
        # Into the default tenant without saying so: refused (a rename is always said).
        with pytest.raises(UserError, match="tenant 'acme'"):
            await import_file(dst, one)
        # Into another name: renamed, the source's rows exactly, nothing else.
        imported = await import_file(dst, one, tenant="gamma")
        assert imported.tenant == "gamma" and imported.inserted["message"] == 5
        assert await table_rows(dst) == renamed(only(before, "acme"), "gamma")
        # As it is, beside it: the same ids, two tenants.
        await import_file(dst, one, tenant="acme")
        again = await import_file(dst, one, tenant="acme")
        assert not again.changed and again.unchanged["message"] == 5
        # The tables the source has rows in (lovia_contents stays empty: no value is
        # long enough to be shared).
        held = [name for name, rows in before.items() if rows]
        assert await tenants_of(dst) == {n: {"acme", "gamma"} for n in held}
        # Every tenant: each row back into its own.
        every = tmp_path / "all.jsonl.gz"
        report = await export(src, every, all_tenants=True)
        assert report.tenant is None and report.counts["session"] == 4
        records = file_records(every)
        assert records[0]["tenants"] == "all"
        with pytest.raises(UserError, match=r"tenant 'acme' and tenant 'beta'"):
            await import_file(dst, every, tenant="delta")  # two tenants into one: refused
        await import_file(dst, every, all_tenants=True)
        rows = await table_rows(dst)
        assert only(rows, "beta") == only(before, "beta")
        assert only(rows, "acme") == only(before, "acme")
        assert await table_rows(src) == before
        # A single session of one tenant: only that tenant's session of that id.
        part = tmp_path / "part.jsonl"
        await export(src, part, tenant="beta", session_ids=["s-new"])
        sessions = [r for r in file_records(part) if r["record"] == "session"]
        assert [(r["tenant"], r["session_id"]) for r in sessions] == [("beta", "s-new")]
        with pytest.raises(UserError, match="no session"):
            await export(src, part, tenant="gamma", session_ids=["s-new"])
        with pytest.raises(UserError):
            await export(src, part, all_tenants=True, session_ids=["s-new"])
        with pytest.raises(UserError, match="not both"):
            await export(src, part, tenant="acme", all_tenants=True)


@pytest.mark.parametrize("kind", KINDS)
async def test_copy_moves_one_tenant_or_every_tenant_and_verifies_each(
    kind: str, tmp_path: Path
) -> None:
    async with (
        fresh(kind, tmp_path, "src") as src,
        fresh(kind, tmp_path, "one") as one,
        fresh(kind, tmp_path, "all") as every,
    ):
        await populate(src)
        before = await table_rows(src)
        # The destination holds beta rows of its own with the same ids: no concern of
        # a copy of acme.
        await populate(one, ("beta",))
        theirs = await table_rows(one)
        report = await copy_database(src, one, tenant="acme")
        assert report.ok and report.tenant == "acme"
        assert {(c.tenant, c.session_id) for c in report.sessions} == {
            ("acme", "s-new"),
            ("acme", "s-old"),
        }
        rows = await table_rows(one)
        assert only(rows, "acme") == only(before, "acme")
        assert only(rows, "beta") == only(theirs, "beta")
        report = await copy_database(src, every, all_tenants=True)
        assert report.ok and report.tenant is None and len(report.sessions) == 4
        assert await table_rows(every) == before
        mine = await summarize_all(src)
        assert mine == await summarize_all(every)
        # One tenant's digest differs from the other's: the verification tells them apart.
        assert mine[("acme", "s-new")] != mine[("beta", "s-new")]


async def summarize_all(url: str) -> dict[tuple[str, str], str]:
    async with Database(url, verify_only=True) as db:
        summary = await summarize(db, all_tenants=True)
        with pytest.raises(ValueError, match="tenants"):
            _ = summary.sessions
        acme = await summarize(db, tenant="acme")
        assert set(acme.sessions) == {"s-new", "s-old"}
    return {key: tally.digest for key, tally in summary.tallies.items()}


@pytest.mark.parametrize("kind", KINDS)
async def test_stats_counts_per_tenant(kind: str, tmp_path: Path) -> None:
    async with fresh(kind, tmp_path, "db") as url:
        await populate(url)
        async with Database(url) as db:  # one more acme session: the tenants differ

            def more(conn: Connection) -> None:
                conn.execute(
                    tables.sessions.insert(),
                    {"tenant": "acme", "session_id": "x", "created_at": NOW, "updated_at": NOW},
                )

            await db.write(more)
        acme = await database_stats(url, tenant="acme", top=10)
        assert (acme.tenant, acme.sessions, acme.messages, acme.finished_runs) == ("acme", 3, 5, 1)
        assert {s.tenant for s in acme.largest_sessions} == {"acme"}
        assert {o.tenant for o in acme.largest_tool_outputs} == {"acme"}
        assert [t.tenant for t in acme.tenants] == ["acme"]
        default = await database_stats(url)
        assert (default.tenant, default.sessions, default.largest_sessions) == ("", 0, [])
        every = await database_stats(url, all_tenants=True, top=10)
        assert every.tenant is None and every.sessions == 5 and every.messages == 10
        assert [(t.tenant, t.sessions, t.messages) for t in every.tenants] == [
            ("acme", 3, 5),
            ("beta", 2, 5),
        ]
        largest = [(s.tenant, s.session_id) for s in every.largest_sessions]
        assert largest[:2] == [("acme", "s-new"), ("beta", "s-new")]


@pytest.mark.parametrize("kind", KINDS)
async def test_prune_acts_on_its_tenant_or_on_each(kind: str, tmp_path: Path) -> None:
    async with fresh(kind, tmp_path, "db") as url:
        await populate(url)
        before = await table_rows(url)
        async with Database(url, tenant="acme") as db:
            dry = await prune(db, older_than=timedelta(days=1), dry_run=True)
            assert (dry.tenant, dry.sessions) == ("acme", ["s-old"])
            assert await table_rows(url) == before
            report = await prune(db, older_than=timedelta(days=1))
        assert report.sessions == ["s-old"] and report.runs == []
        rows = await table_rows(url)
        assert only(rows, "beta") == only(before, "beta")
        assert [r[1] for r in rows["lovia_sessions"] if r[0] == "acme"] == ["s-new"]
        # Checkpoints of beta only, by name; acme's r1 stays.
        report = await prune(url, tenant="beta", checkpoints_older_than=timedelta(days=1))
        assert report.runs == ["r1"]
        heads = (await table_rows(url))["lovia_run_heads"]
        assert [(r[0], r[1]) for r in heads] == [("acme", "r1")]
        # Every tenant, each by the same criteria: keep_last=1 keeps one of each.
        report = await prune(url, all_tenants=True, keep_last=1, dry_run=True)
        assert report.tenant is None
        assert {n: r.sessions for n, r in report.tenants.items()} == {
            "acme": [],
            "beta": ["s-old"],
        }
        assert report.as_dict()["tenants"]["beta"]["sessions"] == ["s-old"]
        with pytest.raises(UserError, match="not both"):
            await prune(url, tenant="acme", all_tenants=True, keep_last=1)


@pytest.mark.parametrize("kind", KINDS)
async def test_counter_check_covers_every_tenant_and_names_it(kind: str, tmp_path: Path) -> None:
    async with fresh(kind, tmp_path, "db") as url:
        await populate(url)
        async with Database(url) as db:

            def damage(conn: Connection) -> None:
                s, h = tables.sessions.c, tables.run_heads.c
                conn.execute(
                    update(tables.sessions)
                    .where(s.tenant == "acme", s.session_id == "s-new")
                    .values(message_count=7)
                )
                conn.execute(
                    update(tables.run_heads)
                    .where(h.tenant == "beta", h.run_id == "r1")
                    .values(entry_count=5)
                )

            await db.write(damage)
        found = await counter_mismatches(url, all_tenants=True)
        assert [(m.tenant, m.id, m.counter, m.holds) for m in found] == [
            ("acme", "s-new", "message_count", 3),
            ("beta", "r1", "entry_count", 2),
        ]
        assert "of tenant 'acme'" in found[0].detail
        assert [m.tenant for m in await counter_mismatches(url, tenant="beta")] == ["beta"]
        assert await counter_mismatches(url) == []  # the default tenant: sound (empty)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("kind", KINDS)
async def test_the_command_line_takes_a_tenant_or_every_tenant(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    async with fresh(kind, tmp_path, "src") as src, fresh(kind, tmp_path, "dst") as dst:
        await populate(src)
        before = await table_rows(src)

        def run(*args: str) -> tuple[int, str, str]:
            return cli(capsys, *args)

        async def call(*args: str) -> tuple[int, str, str]:
            return await asyncio.to_thread(run, *args)

        code, out, _ = await call("sessions", "--json", "--tenant", "acme", src)
        listed = json.loads(out)
        assert code == 0 and listed["tenant"] == "acme" and listed["total"] == 2
        assert {s["tenant"] for s in listed["sessions"]} == {"acme"}
        code, out, _ = await call("sessions", "--json", "--all-tenants", src)
        pairs = {(s["tenant"], s["session_id"]) for s in json.loads(out)["sessions"]}
        assert pairs == {(t, s) for t in TENANTS for s in ("s-new", "s-old")}
        code, out, _ = await call("sessions", "--all-tenants", src)
        assert "'acme'" in out and "'beta'" in out
        assert json.loads((await call("sessions", "--json", src))[1])["total"] == 0
        code, _, err = await call("sessions", "--tenant", "acme", "--all-tenants", src)
        assert code == 2 and "exclude" in err
        # $LOVIA_STORE_TENANT names the tenant; --all-tenants overrides it.
        monkeypatch.setenv("LOVIA_STORE_TENANT", "beta")
        code, out, _ = await call("stats", "--json", src)
        stats = json.loads(out)
        assert (stats["tenant"], stats["sessions"]) == ("beta", 2)
        code, out, _ = await call("stats", "--json", "--all-tenants", src)
        stats = json.loads(out)
        assert stats["tenant"] is None
        assert [(t["tenant"], t["sessions"]) for t in stats["tenants"]] == [
            ("acme", 2),
            ("beta", 2),
        ]
        assert {s["tenant"] for s in stats["largest_sessions"]} == set(TENANTS)
        code, out, _ = await call("stats", "--all-tenants", src)
        assert code == 0 and "per tenant" in out
        monkeypatch.delenv("LOVIA_STORE_TENANT")
        # export --tenant, import --tenant (renamed), copy --all-tenants.
        path = tmp_path / "acme.jsonl"
        code, out, _ = await call("export", "--json", "--tenant", "acme", "-o", str(path), src)
        assert code == 0 and json.loads(out)["tenant"] == "acme"
        code, _, err = await call("import", str(path), dst)
        assert code == 2 and "--tenant" in err
        code, out, _ = await call("import", "--json", "--tenant", "gamma", str(path), dst)
        assert code == 0 and json.loads(out)["inserted"]["session"] == 2
        assert await table_rows(dst) == renamed(only(before, "acme"), "gamma")
        async with fresh(kind, tmp_path, "copy") as copy:
            code, out, _ = await call("copy", "--all-tenants", src, copy)
            assert code == 0 and "acme/s-new" in out and "beta/s-new" in out
            assert await table_rows(copy) == before
        # prune --tenant: only that tenant's old session goes.
        code, out, _ = await call(
            "prune", "--json", "--yes", "--tenant", "beta", "--older-than", "1d", src
        )
        document = json.loads(out)
        assert code == 0 and (document["tenant"], document["sessions"]) == ("beta", ["s-old"])
        rows = await table_rows(src)
        assert only(rows, "acme") == only(before, "acme")
        code, out, _ = await call(
            "prune", "--dry-run", "--all-tenants", "--checkpoints-older-than", "1d", src
        )
        assert "'acme' checkpoint r1" in out and "'beta' checkpoint r1" in out
        # check covers every tenant and names the tenant.
        async with Database(src) as db:

            def damage(conn: Connection) -> None:
                s = tables.sessions.c
                conn.execute(
                    update(tables.sessions)
                    .where(s.tenant == "acme", s.session_id == "s-old")
                    .values(message_count=9)
                )

            await db.write(damage)
        code, out, err = await call("check", "--json", src)
        document = json.loads(out)
        assert code == 5 and document["mismatches"][0]["tenant"] == "acme"
        assert "of tenant 'acme'" in err
        assert (await call("check", "--tenant", "beta", src))[0] == 0


async def test_a_file_without_tenants_is_of_the_default_tenant(tmp_path: Path) -> None:
    """Records that name no tenant (written before tenants) are the default tenant's."""
    src, dst = str(tmp_path / "src.sqlite3"), str(tmp_path / "dst.sqlite3")
    await populate(src, ("",))
    path = tmp_path / "default.jsonl"
    await export(src, path)
    lines = []
    for record in file_records(path):
        record.pop("tenant", None)
        lines.append(orjson.dumps(record))
    path.write_bytes(b"\n".join(lines) + b"\n")
    await import_file(dst, path)
    assert await table_rows(dst) == await table_rows(src)
    async with Database(dst, verify_only=True) as db:
        counted = await db.read(
            lambda conn: conn.execute(select(func.count()).select_from(tables.sessions)).scalar()
        )
    assert counted == 2


async def test_an_in_memory_prune_refuses_a_checkpointer_of_another_tenant() -> None:
    """The in-memory stores keep one tenant each: pruning acme's sessions with beta's
    checkpointer would delete beta's runs that name a session id acme also has (and let
    beta's runs spare acme's sessions). Refused, as a rewind refuses it; nothing changes."""
    acme, beta = InMemorySession(tenant="acme"), InMemorySession(tenant="beta")
    beta_runs = InMemoryCheckpointer(tenant="beta")
    for store in (acme, beta):
        await store.append("s-1", a_run("1"), run_id="r-1")
    done = RunHead(agent_name="agent", status="completed")
    await beta_runs.append("r-1", a_run("c"), done, session_id="s-1")
    later = datetime.now(UTC) + timedelta(days=1)
    for options in ({"older_than": later}, {"checkpoints_older_than": later}):
        with pytest.raises(UserError, match="tenant"):
            await prune(acme, checkpointer=beta_runs, **options)  # type: ignore[arg-type]
        assert await acme.load("s-1") == a_run("1")
        assert await beta_runs.load("r-1") is not None
    # Its own tenant's checkpointer is taken.
    report = await prune(beta, checkpointer=beta_runs, older_than=later)
    assert (report.sessions, report.runs) == (["s-1"], ["r-1"])
